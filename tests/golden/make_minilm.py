"""Writes minilm.json: what Hugging Face makes of the MiniLM in data/minilm (all-MiniLM-L6-v2, which
scripts/setup fetches), for tests/test_tokenizer.cpp and tests/test_bert.cpp:

  tokenizer   the ids of tricky texts from transformers' AutoTokenizer (the Rust `tokenizers`
              BertTokenizerFast), one at a time and as a padded batch
  model       BertModel's last_hidden_state and pooler_output for a padded batch of two texts
  embeddings  SentenceTransformer(data/minilm).encode() of ~50 sentences (mean pooling, L2 norm)

Run from the repository root:
    scripts/setup --dev          # .venv with torch, transformers, sentence-transformers
    .venv/bin/python tests/golden/make_minilm.py
"""

import json
from pathlib import Path

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODEL = ROOT / "data" / "minilm"

LONG_WORD = "pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # 135 characters: [UNK]
LONG_TEXT = " ".join(f"Sentence number {i} talks about tokenizers, truncation and padding." for i in range(60))

# (name, text, max_length); max_length None: the tokenizer's model_max_length (512).
TOKENIZER_CASES = [
    ("empty", "", None),
    ("plain", "Hello, world!", None),
    ("accents", "Crème brûlée, naïve café, Ångström, façade, São Paulo, Đà Nẵng", None),
    ("punctuation", "Wait... what?! (Really) [yes] {no} a-b_c d/e 'quoted' \"double\" $5 + 3 = <8> ^~`|@#%&*", None),
    ("unicode_punctuation", "«Bonjour» — “quoted” ‘single’ …ellipsis… ¿Qué? ¡Sí! §3 ¶2 †‡ •bullet", None),
    ("cjk", "我爱自然语言处理。東京は日本の首都です。", None),
    ("korean", "한국어 텍스트 처리", None),
    ("emoji", "I love pizza 🍕🍕 and 😀 smiles 👍🏽 👨‍👩‍👧 flags 🇫🇷", None),
    ("long_word", f"a {LONG_WORD} b", None),
    ("word_of_100", "x" * 100, None),
    ("word_of_101", "y" * 101, None),
    ("greek", "Η γρήγορη καφέ αλεπού ΠΗΔΑΕΙ πάνω από τον τεμπέλη σκύλο. ΣΟΦΙΑ σοφίας", None),
    ("cyrillic", "Съешь же ещё этих мягких французских булок, да выпей чаю. ЁЛКА", None),
    ("arabic_hebrew", "مرحبا بالعالم שלום עולם", None),
    ("hindi_thai", "नमस्ते दुनिया สวัสดีชาวโลก", None),
    ("mixed_whitespace", "  tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u2003em\u2028line  ", None),
    ("control_chars", "null\x00char bell\x07 esc\x1b[0m soft\u00adhyphen zero\u200bwidth bom\ufeffx rep\ufffdl \x0bvt\x0cff\x85nel",
     None),
    ("private_use", "a\ue000b \U000f0000c", None),
    ("numbers", "3.14159 1,000,000 10^6 2nd 42% -7 +8 0xFF 1e-12", None),
    ("capitals_dotted", "İstanbul ISTANBUL Straße STRASSE ǅemal Σίσυφος ΣΊΣΥΦΟΣ", None),
    ("fullwidth_ligatures", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ ﬁne ﬂow ①②③ ™ ½", None),
    ("combining", "e\u0301 a\u0308 o\u0302\u0323 n\u0303 Z\u0335\u0331", None),
    ("urls_code", "https://example.com/path?q=1&r=2 user@mail.org def f(x): return x**2 # comment", None),
    ("subwords", "unaffable tokenization preprocessing electroencephalography antidisestablishmentarianism", None),
    ("truncate_16", "The quick brown fox jumps over the lazy dog, again and again and again and again.", 16),
    ("truncate_default", LONG_TEXT, None),
    ("truncate_256", LONG_TEXT, 256),
    ("special_text", "[CLS] [SEP] [PAD] [MASK] [UNK] ##ing", None),
]

BATCH = ["Hello, world!", "", "Crème brûlée is a dessert.", "我爱自然语言处理", LONG_TEXT]

MODEL_TEXTS = ["The cat sat on the mat.", "A much longer sentence, so that the first one is padded in the batch."]

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome.",
    "The new movie is so great!",
    "The cat sits outside.",
    "The dog plays in the garden.",
    "I love pasta.",
    "Do you like pizza?",
    "How do I reset my password?",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "The stock market fell sharply on Monday.",
    "Investors worried about rising interest rates.",
    "Photosynthesis converts light energy into chemical energy.",
    "Plants need sunlight, water and carbon dioxide to grow.",
    "The quick brown fox jumps over the lazy dog.",
    "Machine learning models can overfit small datasets.",
    "Deep neural networks learn hierarchical representations.",
    "Transformers use self-attention to mix information between tokens.",
    "The weather today is sunny with a light breeze.",
    "It is raining heavily in the mountains.",
    "She plays the piano beautifully.",
    "He forgot his umbrella at the office.",
    "Crème brûlée is a French dessert.",
    "São Paulo is the largest city in Brazil.",
    "我爱自然语言处理。",
    "Москва — столица России.",
    "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    "I'm so happy today 😀🎉",
    "Wait... what?! That's unbelievable!!!",
    "",
    "a",
    "OK",
    "The   spaces\tand\nnewlines are   normalized.",
    "C++20 concepts make templates easier: template <class T> requires std::integral<T>.",
    "Call 555-0199 or e-mail support@example.com before 5 p.m.",
    "The mitochondria is the powerhouse of the cell.",
    "Quantum computers exploit superposition and entanglement.",
    "A bicycle has two wheels; a tricycle has three.",
    "Please turn off the lights when you leave the room.",
    LONG_TEXT,
    "The end.",
]


def rounded(values):
    """Nested lists of floats with 9 significant digits (float32 needs at most 9)."""
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return float(f"{values:.9g}")


def main():
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    cases = []
    for name, text, max_length in TOKENIZER_CASES:
        kwargs = {"truncation": True, "max_length": max_length} if max_length else {"truncation": True}
        ids = tokenizer(text, **kwargs)["input_ids"]
        cases.append({"name": name, "text": text, "max_length": max_length, "ids": ids,
                      "tokens": tokenizer.convert_ids_to_tokens(ids)})
    batch = tokenizer(BATCH, padding=True, truncation=True, max_length=256)

    bert = AutoModel.from_pretrained(MODEL).eval()
    inputs = tokenizer(MODEL_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = bert(**inputs)

    encoder = SentenceTransformer(str(MODEL), device="cpu")
    embeddings = encoder.encode(SENTENCES, batch_size=32, convert_to_numpy=True)

    out = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__},
        "tokenizer": {"model_max_length": tokenizer.model_max_length, "cases": cases,
                      "batch": {"texts": BATCH, "max_length": 256, "input_ids": batch["input_ids"],
                                "attention_mask": batch["attention_mask"],
                                "token_type_ids": batch["token_type_ids"]}},
        "model": {"texts": MODEL_TEXTS, "input_ids": inputs["input_ids"].tolist(),
                  "attention_mask": inputs["attention_mask"].tolist(),
                  "last_hidden_state": rounded(outputs.last_hidden_state.tolist()),
                  "pooler_output": rounded(outputs.pooler_output.tolist())},
        "embeddings": {"max_seq_length": encoder.max_seq_length, "sentences": SENTENCES,
                       "vectors": rounded(embeddings.tolist())},
    }
    path = HERE / "minilm.json"
    path.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes): {len(cases)} tokenizer cases, "
          f"{len(SENTENCES)} sentence embeddings")


if __name__ == "__main__":
    main()
