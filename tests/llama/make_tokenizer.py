"""Reference ids of SmolLM2's byte-level BPE tokenizer for tests/test_bpe.cpp, from Hugging Face's
`tokenizers` as transformers builds it from the GGUF file in data/smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf).

    scripts/setup --dev                             # .venv with transformers and gguf
    .venv/bin/python tests/llama/make_tokenizer.py  # writes tests/data/llama/tokenizer.json

tokenizer.json is a list, a text per line, of {"text", "ids", "gguf_ids", "llama3_ids", "unsplit_ids",
"decoded"} and sometimes "llama_cpp_ids", all with add_special_tokens=False, for texts that reach the
corners of the pre-tokenizers:

  ids            SmolLM2's own tokenizer: the file's vocabulary and merges behind the pre-tokenizer of its
                 tokenizer.json (which the GGUF file does not carry, so it is set here), Digits(individual_
                 digits) then ByteLevel with GPT-2's regex; llama.cpp's "smollm" is the same ("\p{N}", then
                 GPT-2's regex). ember's pre = "smollm" gives these.
  gguf_ids       transformers' GGUF conversion as it is: it knows no "smollm" pre-tokenizer, so it keeps
                 GPT2Tokenizer's ByteLevel regex and never splits digits first; "a  1" (two spaces before a
                 digit) and " ½" then tokenize otherwise. ember's pre = "gpt2" gives these.
  llama3_ids     the same vocabulary behind Llama 3's pre-tokenizer (the Split regex transformers uses for
                 tokenizer.ggml.pre "llama-bpe", and BPE's ignore_merges). ember's "llama-bpe".
  unsplit_ids    `ids` with the special tokens written in the text read as plain text (split_special_
                 tokens): ember's encode(text, parse_special = false).
  decoded        decode(ids), special tokens kept.
  llama_cpp_ids  only where it differs from `ids`: what llama.cpp gives. A byte without a token (SmolLM2's
                 vocabulary lacks 21) is dropped after merging there, before merging by Hugging Face (so
                 its neighbours merge); emulated here by cutting the pieces at such bytes.
"""
import json
import re
from pathlib import Path

import gguf  # noqa: F401  (transformers reads GGUF files with it)
import transformers
from tokenizers import Regex, pre_tokenizers
from transformers import AutoTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

ROOT = Path(__file__).resolve().parent.parent.parent
MODEL = ROOT / "data" / "smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "data" / "llama" / "tokenizer.json"

TEXTS = [
    "",
    "Hello world",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "multiple     spaces   between words",
    "tabs\tand\t\ttabs",
    "line\nbreaks\r\nand\n\n\nblank lines",
    "spaces before newlines   \n  next line",
    "\n\n leading newlines",
    "café naïve Zoë résumé",
    "Caf\u00e9 with a combining accent: cafe\u0301",
    "\u2019curly\u2019 \u201cquotes\u201d and it\u2019s",
    "日本語のテキスト",
    "中文 and English mixed: 你好，世界！",
    "hello 👋🏽 family 👨‍👩‍👧 done",
    "1234567",
    "pi is 3.14159, the date is 2024-11-28",
    "a  1 and x 2",
    "don't I'M we'll they'd O'Neil's 'S 'sup",
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start",
    "a" * 300,
    " " * 40 + "after forty spaces",
    "def foo(x):\n    if x:\n        return x ** 2\n    return None\n",
    "no\u00a0break and ideographic\u3000space",
    "control \u0004 byte",
    "a byte without a token merges its neighbours: ...\u0004\u201d \u0004<",
    "ÀÁÂ ½ ² ³ fractions ¼",
    "!!! ??? ... --- (parens) [brackets] {braces}",
]

# SmolLM2's tokenizer.json (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct): no normalizer, and
# Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, trim_offsets=true,
# use_regex=true)]; its BPE sets no unk_token and ignore_merges false, as the GGUF conversion does.
SMOLLM2_PRE_TOKENIZER = pre_tokenizers.Sequence(
    [
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ]
)
LLAMA3_PRE_TOKENIZER = pre_tokenizers.Sequence(
    [
        pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS["llama-bpe"]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]
)


def load():
    """A fresh backend tokenizer (tokenizers.Tokenizer) as transformers builds it from the file."""
    return AutoTokenizer.from_pretrained(MODEL, gguf_file=GGUF_FILE).backend_tokenizer


def main() -> None:
    gguf_tokenizer = load()
    smollm2 = load()
    smollm2.pre_tokenizer = SMOLLM2_PRE_TOKENIZER
    llama3 = load()
    llama3.pre_tokenizer = LLAMA3_PRE_TOKENIZER
    llama3.model.ignore_merges = True
    unsplit = load()
    unsplit.pre_tokenizer = SMOLLM2_PRE_TOKENIZER
    unsplit.encode_special_tokens = True
    # llama.cpp: a byte without a token stops merges at it (its stand-in pairs with nothing), then
    # is dropped.
    vocab = smollm2.get_vocab()
    missing = "".join(c for c in bytes_to_unicode().values() if c not in vocab)
    llama_cpp = load()
    llama_cpp.pre_tokenizer = pre_tokenizers.Sequence(
        [SMOLLM2_PRE_TOKENIZER, pre_tokenizers.Split(Regex("[" + re.escape(missing) + "]"), behavior="removed")]
    )

    cases = []
    for text in TEXTS:
        ids = smollm2.encode(text, add_special_tokens=False).ids
        case = {
            "text": text,
            "ids": ids,
            "gguf_ids": gguf_tokenizer.encode(text, add_special_tokens=False).ids,
            "llama3_ids": llama3.encode(text, add_special_tokens=False).ids,
            "unsplit_ids": unsplit.encode(text, add_special_tokens=False).ids,
            "decoded": smollm2.decode(ids, skip_special_tokens=False),
        }
        llama_cpp_ids = llama_cpp.encode(text, add_special_tokens=False).ids
        if llama_cpp_ids != ids:
            case["llama_cpp_ids"] = llama_cpp_ids
            print(f"llama.cpp differs on {text!r}: {[smollm2.id_to_token(i) for i in llama_cpp_ids]}")
        cases.append(case)
        if case["gguf_ids"] != ids:
            print(f"transformers' GGUF conversion differs on {text!r}:")
            print(f"  SmolLM2's tokenizer:  {[smollm2.id_to_token(i) for i in ids]}")
            print(f"  GGUF conversion:      {[smollm2.id_to_token(i) for i in case['gguf_ids']]}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:  # a text per line
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
    print(f"{OUT.relative_to(ROOT)}: {len(cases)} texts (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
