"""ember.models.Llama, its tokenizer and Chat on SmolLM2-135M-Instruct (data/smollm2, which
scripts/setup fetches), against tests/data/llama/model.json (Hugging Face transformers on the same
file, dequantized to float32: tests/llama/make_llama.py)."""

import json

import ember
import pytest

from conftest import DATA, ROOT

MODEL = DATA / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
REFERENCE = json.loads((ROOT / "tests" / "data" / "llama" / "model.json").read_text())


@pytest.fixture(scope="module")
def model_path() -> str:
    assert MODEL.exists(), f"{MODEL} is missing: run scripts/setup"
    return str(MODEL)


def test_tokenizer_gives_the_reference_ids(model_path):
    tokenizer = ember.models.load_tokenizer(model_path)
    assert tokenizer.vocab_size == 49152 and tokenizer.eos_id == 2
    for prompt in REFERENCE["prompts"]:
        assert tokenizer.encode(prompt["prompt"]) == prompt["ids"]
        assert tokenizer.decode(prompt["ids"]) == prompt["prompt"]


def test_float_greedy_tokens_match_transformers(model_path):
    model = ember.models.Llama.from_gguf(model_path, dequantize=True)
    assert model.config["n_layer"] == 30 and model.config["n_kv_head"] == 3
    prompt = REFERENCE["prompts"][0]
    assert model.generate(prompt["ids"], 16, temperature=0.0) == prompt["new_ids"][:16]
    logits = model(ember.tensor([prompt["ids"]]))
    assert tuple(logits.shape) == (1, len(prompt["ids"]), 49152)


def test_chat_answers_and_keeps_the_conversation(model_path):
    system = "You are a concise assistant. Answer in one sentence."
    chat = ember.models.Chat(model_path, system=system, temperature=0.0, repetition_penalty=1.0, max_tokens=32)
    answer = chat.reply("Why is the sky blue?")
    assert "Rayleigh scattering" in answer
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"]
    assert chat.messages[2]["content"] == answer
    chat.reset()
    assert chat.messages == [{"role": "system", "content": system}]
    with pytest.raises(ember.Error, match="unknown chat template"):
        ember.models.Chat(model_path, chat_template="llama2")
