"""ember.train, ember.models, ember.onnx and ember.gguf from Python: checkpoints the CLI wrote load and
continue to the CLI's own losses (and files), the training step builder, and the formats."""

import json
import subprocess

import numpy as np
import pytest

import ember
from conftest import DATA, ROOT

SHAKESPEARE = DATA / "shakespeare" / "input.txt"
GPT = ["--layers", "1", "--heads", "2", "--dim", "16", "--context", "16", "--batch-size", "4", "--steps", "20",
       "--warmup", "2", "--eval-every", "10", "--eval-batches", "2", "--seed", "5", "--threads", "2"]


def run_cli(cli, *args):
    out = subprocess.run([str(cli), *map(str, args)], check=True, capture_output=True, text=True).stdout
    return out


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture
def shakespeare():
    if not SHAKESPEARE.exists():
        pytest.skip(f"no text at {SHAKESPEARE} (scripts/setup downloads it)")
    return SHAKESPEARE


def test_a_gpt_checkpoint_of_the_cli_continues_in_python(cli, shakespeare, tmp_path):
    ember.set_num_threads(2)
    full = last_json(run_cli(cli, "train", "gpt", *GPT, "--data", shakespeare, "--sample", "0", "--json",
                             "--save", tmp_path / "full.safetensors"))
    run_cli(cli, "train", "gpt", *GPT, "--data", shakespeare, "--json", "--stop-after", "10",
            "--save", tmp_path / "part.safetensors")
    run = ember.train.text_run(layers=1, heads=2, dim=16, context=16, batch_size=4, steps=20, warmup=2, seed=5,
                               data=str(shakespeare), eval_every=10, eval_batches=2,
                               resume=str(tmp_path / "part.safetensors"), save=str(tmp_path / "python.safetensors"))
    assert run.first_step == 10
    seen = []
    summary = run.run(lambda p: seen.append(p["kind"]))
    assert summary["final_loss"] == full["final_loss"]
    assert summary["evaluation"]["val_loss"] == full["val_loss"]
    assert seen.count("step") == 10 and seen.count("evaluation") == 1
    # The same run: the same final checkpoint, byte for byte.
    assert (tmp_path / "python.safetensors").read_bytes() == (tmp_path / "full.safetensors").read_bytes()


def test_an_mnist_checkpoint_of_the_cli_continues_in_python(cli, data_dir, tmp_path):
    ember.set_num_threads(2)
    common = ["--model", "mlp", "--epochs", "2", "--seed", "7", "--threads", "2", "--data", data_dir / "mnist", "--json"]
    full = last_json(run_cli(cli, "train", "mnist", *common, "--save", tmp_path / "full.safetensors"))
    run_cli(cli, "train", "mnist", *common, "--stop-after", "1", "--save", tmp_path / "part.safetensors")
    run = ember.train.mnist_run(model="mlp", epochs=2, seed=7, data=str(data_dir / "mnist"),
                                resume=str(tmp_path / "part.safetensors"), save=str(tmp_path / "python.safetensors"))
    summary = run.run()
    assert summary["final_loss"] == full["final_loss"]
    assert summary["evaluation"]["test_accuracy"] == full["test_accuracy"]
    assert (tmp_path / "python.safetensors").read_bytes() == (tmp_path / "full.safetensors").read_bytes()


def test_load_model_rebuilds_what_the_cli_trained(cli, shakespeare, tmp_path):
    ember.set_num_threads(2)
    run_cli(cli, "train", "gpt", *GPT, "--data", shakespeare, "--json", "--save", tmp_path / "gpt.safetensors")
    text = run_cli(cli, "generate", "--checkpoint", tmp_path / "gpt.safetensors", "--prompt", "ROMEO:", "--tokens",
                   "24", "--temperature", "0", "--threads", "2")
    loaded = ember.train.load_model(str(tmp_path / "gpt.safetensors"))
    assert loaded.kind == "gpt" and isinstance(loaded.model, ember.models.GPT)
    assert loaded.config["dim"] == "16" and loaded.context == 16
    prompt = loaded.tokenizer.encode("ROMEO:")
    ids = loaded.model.generate(prompt, 24, temperature=0)
    assert "ROMEO:" + loaded.tokenizer.decode(ids) + "\n" == text
    checkpoint = ember.train.read_checkpoint(str(tmp_path / "gpt.safetensors"))
    assert checkpoint.kind == "gpt" and checkpoint.settings["steps_done"] == "20"
    assert set(checkpoint.model_state()) == set(loaded.model.state_dict())
    assert any(k.startswith(ember.train.OPTIMIZER_PREFIX) for k in checkpoint.tensors)
    with pytest.raises(ember.Error, match=r"is not a model of the kinds asked for \(it holds a gpt model\)"):
        ember.train.load_model(str(tmp_path / "gpt.safetensors"), kinds=["ssm"])


def test_the_committed_checkpoints_of_every_kind_load():
    folder = ROOT / "tests" / "data" / "checkpoints"
    kinds = {"mnist_mlp": ember.nn.Sequential, "mnist_cnn": ember.nn.Sequential, "gpt": ember.models.GPT,
             "ssm": ember.models.Mamba, "diffusion": ember.models.UNet}
    for kind, cls in kinds.items():
        loaded = ember.train.load_model(str(folder / f"{kind}.safetensors"))
        assert loaded.kind == kind and isinstance(loaded.model, cls), kind
    averaged = ember.train.load_model(str(folder / "diffusion.safetensors"), average=True)
    trained = ember.train.load_model(str(folder / "diffusion.safetensors"))
    a, t = averaged.model.state_dict(), trained.model.state_dict()
    assert set(a) == set(t) and any(not np.array_equal(a[k].numpy(), t[k].numpy()) for k in a)
    quantized = ember.train.load_model(str(folder / "gpt_q8_0.gguf"))
    assert quantized.source.quantization == "q8_0" and quantized.source.format == "gguf"
    assert [k["name"] for k in ember.train.model_kinds()] == ["mnist_mlp", "mnist_cnn", "gpt", "ssm", "diffusion",
                                                               "minilm"]


def test_training_step_compiled_matches_eager_and_a_hand_written_loop():
    def make():
        ember.manual_seed(3)
        return ember.models.GPT(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)

    ember.manual_seed(9)
    batches = [(ember.randint(0, 11, (4, 8)), ember.randint(0, 11, (4, 8))) for _ in range(2)] * 3

    def losses(compile):
        model = make()
        step = ember.train.TrainingStep(model, optimizer="adamw", lr=1e-2, clip_grad_norm=1.0, compile=compile,
                                        loss=lambda b: model.loss(b[0], b[1]))
        return [step(list(b))[0].item() for b in batches]

    eager, compiled = losses(False), losses(True)
    assert np.allclose(eager, compiled, rtol=1e-5)
    # By hand: the same step in Python, bit for bit.
    model = make()
    opt = ember.optim.AdamW(model.parameters(), lr=1e-2)
    by_hand = []
    for x, y in batches:
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        ember.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        by_hand.append(loss.item())
    assert by_hand == eager
    assert eager[-1] < eager[1] < eager[0] or eager[-2] < eager[0]  # it learns the two batches


def test_training_step_saves_a_checkpoint_load_model_reads(tmp_path):
    ember.manual_seed(1)
    model = ember.models.Mamba(vocab_size=7, d_model=8, n_layer=1, d_state=4)
    step = ember.train.TrainingStep(model, optimizer="adam", lr=1e-2, loss=lambda b: model.loss(b[0], b[1]))
    x = ember.randint(0, 7, (2, 5))
    step([x, x])
    settings = {"task": "ssm", "layers": "1", "dim": "8", "state": "4", "expand": "2", "conv": "4", "context": "5",
                "vocabulary": "61626364656667"}
    step.save_checkpoint(str(tmp_path / "run.safetensors"), settings)
    loaded = ember.train.load_model(str(tmp_path / "run.safetensors"))
    assert loaded.kind == "ssm" and loaded.tokenizer.vocab_size == 7
    for name, t in model.state_dict().items():
        assert np.array_equal(loaded.model.state_dict()[name].numpy(), t.numpy()), name
    again = ember.train.TrainingStep(loaded.model, optimizer="adam", lr=1e-2,
                                     loss=lambda b: loaded.model.loss(b[0], b[1]))
    again.load_checkpoint(ember.train.read_checkpoint(str(tmp_path / "run.safetensors")))
    assert set(again.state_dict()) == set(step.state_dict())
    with pytest.raises(ember.Error, match="the loss function must return"):
        ember.train.TrainingStep(model, loss=lambda b: [])([x, x])


def test_onnx_models_load_and_run():
    case = ROOT / "tests" / "data" / "onnx" / "mlp"
    model = ember.onnx.load(str(case / "model.onnx"))
    x = ember.from_numpy(np.load(case / "input.npy"))
    out = model.run({model.input_names[0]: x})
    expected = np.load(case / "expected_logits.npy")
    assert np.allclose(out[model.output_names[0]].numpy(), expected, atol=1e-4, rtol=1e-4)
    eager = model([x])[0]
    assert np.allclose(eager.detach().numpy(), expected, atol=1e-4, rtol=1e-4)


def test_gguf_round_trip(tmp_path):
    metadata = {"general.architecture": "test", "n": 3, "scale": 0.5, "ok": True, "names": ["a", "b"]}
    tensors = {"w": ember.arange(6, dtype=ember.float32).reshape(2, 3), "b": ember.ones(3)}
    ember.gguf.save(str(tmp_path / "t.gguf"), metadata, tensors)
    got_metadata, got_tensors = ember.gguf.load(str(tmp_path / "t.gguf"))
    for key, value in metadata.items():
        assert got_metadata[key] == value, key
    assert list(got_tensors) == ["w", "b"]
    assert np.array_equal(got_tensors["w"].numpy(), tensors["w"].numpy())
    with pytest.raises(ember.Error, match=r"\[gguf\] metadata \"bad\""):
        ember.gguf.save(str(tmp_path / "u.gguf"), {"bad": {}}, {})


def test_sentence_encoder_and_wordpiece(cli):
    folder = DATA / "minilm"
    if not folder.is_dir():
        pytest.skip(f"no MiniLM at {folder} (scripts/setup downloads it)")
    ember.set_num_threads(2)
    encoder = ember.models.SentenceEncoder.from_folder(str(folder))
    tokenizer = encoder.tokenizer
    ids = tokenizer.encode("Hello, world!")
    assert tokenizer.id_to_token(ids[0]) == "[CLS]" and tokenizer.id_to_token(ids[-1]) == "[SEP]"
    vectors = encoder.encode(["Hello, world!", "A cat sat on the mat."])
    cli_vectors = json.loads(run_cli(cli, "embed", "--model", folder, "--json", "--threads", "2", "Hello, world!",
                                     "A cat sat on the mat."))["embeddings"]
    assert np.allclose(vectors.numpy(), np.array(cli_vectors, dtype=np.float32), atol=1e-6)
    loaded = ember.train.load_model(str(folder))
    assert loaded.kind == "minilm" and isinstance(loaded.model, ember.models.Bert)
    hidden, pooled = loaded.model(tokenizer.encode_batch(["Hello"])["input_ids"])
    assert hidden.shape[-1] == 384
