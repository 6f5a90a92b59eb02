"""Reference outputs of SmolLM2-135M-Instruct (data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf, which
scripts/setup fetches) as Hugging Face transformers runs it, for ember's Llama-family GGUF support.

transformers loads the GGUF itself: its tokenizer from the file's tokenizer.ggml.* metadata and the
model with every weight dequantized to float32 by the `gguf` package (gguf.quants.dequantize, the
same Q4_1 / Q8_0 arithmetic tests/quant pins), Q and K rows put back from llama.cpp's interleaved
order into Hugging Face's (see check_rope_layout). The output head is tied to the token embedding.
The forward pass runs in float32 with eager attention on the CPU.

tests/data/llama/model.json
  "model"    the GGUF file's name and the library versions that made the data
  "passage"  a fixed English passage (the opening of A Tale of Two Cities): "text", its "ids" (no
             BOS: the file says tokenizer.ggml.add_bos_token = false), "logits_positions" (the rows
             of passage_logits.npy), "mean_nll" and "perplexity" (exp of the mean next-token
             cross-entropy over positions 1..T-1, from the float32 logits, reduced in float64),
             "argmax" (the most likely next token at every position 0..T-1) and "argmax_margin" (its
             logit minus the runner-up's: where that is tiny, an argmax may legitimately flip)
  "prompts"  four prompts, two raw completions and two ChatML chats rendered by the file's chat
             template (tokenizer.apply_chat_template(messages, add_generation_prompt=True,
             tokenize=False)): "name", "kind" ("raw" | "chat"), "messages" (chats only), "prompt"
             (the exact text), "ids", and greedy decoding of up to 48 new tokens (model.generate,
             do_sample=False, no repetition penalty, eos_token_id = 2 = <|im_end|>):
             "new_ids" (the EOS included when it came), "new_margins" (at each step, the chosen
             token's logit minus the runner-up's), "stopped_at_eos", and "text" (the new ids decoded
             as bytes, special tokens kept, no clean-up of spaces)
  "chat_renderings"  what the template makes of a few conversations (with and without the
             generation prompt), including one with no system message, where the template inserts
             SmolLM's default one, and a multi-turn one
tests/data/llama/passage_logits.npy
  float32 (3, 49152): the logits at positions 0, T//2 and T-1 of the passage

Every tokenized text is checked to come out the same under the pre-tokenizer llama.cpp (and
SmolLM2's own tokenizer.json) use for tokenizer.ggml.pre = smollm, digits split one by one before the
GPT-2 split, which transformers' GGUF tokenizer lacks (they differ only where two or more
whitespace characters come right before a digit). The script stops if one does not.

Run from the repository root (seeded, one thread pair: a re-run writes the same bytes):
    scripts/setup --dev          # .venv with torch, transformers, accelerate and gguf
    .venv/bin/python tests/llama/make_llama.py
"""

import copy
import json
import os
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader has its own progress bar

import gguf
import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent.parent
FOLDER = ROOT / "data" / "smollm2"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "data" / "llama"

EOS = 2  # <|im_end|>
MAX_NEW_TOKENS = 48

PASSAGE = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
           "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
           "season of Light, it was the season of Darkness.")

RAW_PROMPTS = [
    ("capital", "The capital of France is"),
    ("fibonacci", "def fibonacci(n):"),
]
CHAT_PROMPTS = [
    ("chat_user", [{"role": "user", "content": "What is the capital of France?"}]),
    ("chat_system", [{"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
                     {"role": "user", "content": "Why is the sky blue?"}]),
]
RENDERINGS = [
    ("user", [{"role": "user", "content": "Hi!"}]),
    ("system_user", [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi!"}]),
    ("multi_turn", [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}]),
]


def smollm_ids(tokenizer):
    """A tokenizer function with llama.cpp's smollm pre-tokenizer: Digits(individual) then ByteLevel."""
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return lambda text: backend.encode(text, add_special_tokens=False).ids


def encode(tokenizer, smollm, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if ids != smollm(text):
        raise SystemExit(f"the pre-tokenizers disagree on {text!r}: pick a text without whitespace runs before digits")
    return ids


def decode(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def check_rope_layout(model):
    """transformers un-permutes llama.cpp's Q/K rows and rotates halves (rotate_half); on the rows as
    the GGUF stores them that is the same as rotating adjacent pairs (x[2i], x[2i+1]) by
    position * base^(-2i/64), llama.cpp's LLAMA_ROPE_TYPE_NORM. Checked on block 0's queries."""
    reader = gguf.GGUFReader(FOLDER / NAME)
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    stored = torch.from_numpy(gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32))
    attention = model.model.layers[0].self_attn
    heads, dim = model.config.num_attention_heads, model.config.head_dim
    # HF row h*64 + j*32 + i is stored row h*64 + 2i + j.
    hf_order = stored.reshape(heads, dim // 2, 2, -1).transpose(1, 2).reshape(stored.shape)
    assert torch.equal(attention.q_proj.weight.detach(), hf_order), "q_proj is not the un-permuted GGUF rows"

    x = torch.randn(1, 5, model.config.hidden_size)
    positions = torch.tensor([[0, 1, 7, 100, 4000]])
    cos, sin = model.model.rotary_emb(x, positions)
    q = attention.q_proj(x).view(1, 5, heads, dim).transpose(1, 2)
    q_hf, _ = transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, q, cos, sin)

    q_stored = (x @ stored.T).view(1, 5, heads, dim // 2, 2).double()
    # The angles as transformers computes them, in float32 (off by a few 1e-4 rad at position 4000).
    inv_freq = 1.0 / (100000.0 ** (torch.arange(0, dim, 2).float() / dim))
    theta = positions[0, :, None].float() * inv_freq
    c, s = torch.cos(theta).double()[None, :, None, :], torch.sin(theta).double()[None, :, None, :]
    a, b = q_stored[..., 0], q_stored[..., 1]
    pairs = torch.stack([a * c - b * s, a * s + b * c], dim=-1)  # (1, 5, heads, 32, 2)
    q_pairs = pairs.transpose(3, 4).reshape(1, 5, heads, dim).transpose(1, 2)  # into HF's order
    error = (q_pairs - q_hf.double()).abs().max().item()
    assert error < 1e-4, f"adjacent-pair RoPE on the stored rows differs from HF's by {error}"
    return error


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    tokenizer = AutoTokenizer.from_pretrained(FOLDER, gguf_file=NAME)
    model = AutoModelForCausalLM.from_pretrained(FOLDER, gguf_file=NAME, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    smollm = smollm_ids(tokenizer)
    OUT.mkdir(parents=True, exist_ok=True)

    with torch.no_grad():
        rope_error = check_rope_layout(model)

        ids = encode(tokenizer, smollm, PASSAGE)
        t = len(ids)
        logits = model(torch.tensor([ids])).logits[0]  # (T, vocab) float32
        log_probs = torch.log_softmax(logits.double(), dim=-1)
        nll = -log_probs[torch.arange(t - 1), torch.tensor(ids[1:])]
        mean_nll = nll.mean().item()
        top2 = logits.topk(2, dim=-1).values
        rows = [0, t // 2, t - 1]
        passage = {
            "text": PASSAGE, "ids": ids, "logits_positions": rows,
            "mean_nll": mean_nll, "perplexity": float(np.exp(mean_nll)),
            "argmax": logits.argmax(dim=-1).tolist(),
            "argmax_margin": [round(float(m), 4) for m in (top2[:, 0] - top2[:, 1])],
        }
        np.save(OUT / "passage_logits.npy", logits[rows].numpy().astype(np.float32))

        prompts = [{"name": name, "kind": "raw", "prompt": text} for name, text in RAW_PROMPTS]
        for name, messages in CHAT_PROMPTS:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            prompts.append({"name": name, "kind": "chat", "messages": messages, "prompt": text})
        for p in prompts:
            p["ids"] = encode(tokenizer, smollm, p["prompt"])
            out = model.generate(torch.tensor([p["ids"]]), attention_mask=torch.ones(1, len(p["ids"]), dtype=torch.long),
                                 do_sample=False, max_new_tokens=MAX_NEW_TOKENS, repetition_penalty=1.0,
                                 eos_token_id=EOS, pad_token_id=EOS, temperature=None, top_p=None, top_k=None,
                                 output_logits=True, return_dict_in_generate=True)
            new = out.sequences[0, len(p["ids"]):].tolist()
            p["new_ids"] = new
            step_top2 = torch.cat(out.logits).topk(2, dim=-1).values
            p["new_margins"] = [round(float(m), 4) for m in (step_top2[:, 0] - step_top2[:, 1])]
            p["stopped_at_eos"] = bool(new) and new[-1] == EOS
            p["text"] = decode(tokenizer, new)

    renderings = []
    for name, messages in RENDERINGS:
        renderings.append({
            "name": name, "messages": messages,
            "text": tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False),
            "text_with_generation_prompt": tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                         tokenize=False),
        })

    versions = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                "tokenizers": tokenizers.__version__, "gguf": version("gguf")}
    sections = {"model": {"file": f"data/smollm2/{NAME}", "generator": versions},
                "passage": passage, "prompts": prompts, "chat_renderings": renderings}
    lines = []
    for key, value in sections.items():
        if isinstance(value, list):
            items = ",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value)
            lines.append(f"{json.dumps(key)}: [\n{items}\n ]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    (OUT / "model.json").write_text("{\n " + ",\n ".join(lines) + "\n}\n")

    print(f"RoPE layout: adjacent pairs on the stored rows match HF's rotate_half (max diff {rope_error:.2e})")
    print(f"passage: {t} tokens, perplexity {passage['perplexity']:.4f}, logits at {rows}")
    for p in prompts:
        stop = "stopped at EOS" if p["stopped_at_eos"] else f"{len(p['new_ids'])} tokens, no EOS"
        print(f"{p['name']}: {len(p['ids'])} prompt ids, {stop} (smallest margin {min(p['new_margins']):.4f}): "
              f"{p['text']!r}")
    for name in ("model.json", "passage_logits.npy"):
        print(f"wrote {(OUT / name).relative_to(ROOT)} ({(OUT / name).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
