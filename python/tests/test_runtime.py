"""Around the tensors: errors as ember.Error (a RuntimeError) with the library's [op] message, the
GIL released inside kernels (another Python thread runs meanwhile), ember.compile of a Python
training step, the profiler as a context manager, memory statistics, autocast, anomaly detection,
the DataLoader."""

import threading
import time

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn


def test_errors_carry_the_op_message():
    assert issubclass(ember.Error, RuntimeError)
    with pytest.raises(ember.Error) as info:
        ember.ones(2, 3) @ ember.ones(2, 3)
    assert str(info.value).startswith("[matmul]")
    with pytest.raises(RuntimeError, match=r"^\[cross_entropy\]"):
        F.cross_entropy(ember.ones(2, 3), ember.tensor([0, 5]))
    with pytest.raises(ember.Error, match=r"\[Conv2d\]|\[conv2d\]"):
        nn.Conv2d(3, 4, 3)(ember.ones(1, 2, 8, 8))
    with pytest.raises(TypeError):  # wrong Python types are TypeErrors, as in PyTorch
        ember.ones(2) + "a"


def test_gil_is_released_inside_kernels():
    """A single long matmul runs while another Python thread keeps ticking."""
    a = ember.randn(1200, 1200)
    a @ a  # warm up
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    thread = threading.Thread(target=tick)
    thread.start()
    time.sleep(0.01)
    start = time.perf_counter()
    for _ in range(3):
        a @ a
    end = time.perf_counter()
    stop.set()
    thread.join()
    inside = [t for t in ticks if start < t < end]
    assert end - start > 0.02, "the matmuls were too quick to tell"
    assert len(inside) >= 5, f"{len(inside)} ticks during {end - start:.3f} s of matmul: the GIL was held"


def test_threads_run_ember_concurrently():
    ember.manual_seed(0)
    model = nn.Linear(64, 64)
    x = ember.randn(256, 64)
    with ember.no_grad():
        expected = model(x).sum().item()
    results, errors = [], []

    def work():
        try:
            with ember.no_grad():
                for _ in range(20):
                    results.append(model(x).sum().item())
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80 and all(r == expected for r in results)


def test_compile_with_a_dynamic_batch_dim():
    calls = []

    def f(x, w):
        calls.append(x.shape[0])
        return (x @ w).relu() + 1.0

    w = ember.randn(6, 3)
    compiled = ember.compile(f, mode="compiled", dynamic=[(0, 0)])
    for n in (4, 9, 2, 7, 1, 9):
        x = ember.randn(n, 6)
        np.testing.assert_array_equal(compiled(x, w).numpy(), f(x, w).numpy())
    # 4 and 9 are traced; 2, 7 and 1 are built from their template without calling f.
    assert calls.count(4) == 2 and calls.count(9) == 3 and calls.count(2) == 1
    assert compiled.stats["compiles"] == 2 and compiled.stats["sized"] == 3
    with pytest.raises(ember.Error, match="not a tensor argument"):
        ember.compile(f, dynamic=[(5, 0)])(ember.randn(2, 6), w)


def test_compile_a_python_training_step():
    ember.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = ember.optim.SGD(model.parameters(), lr=0.1)
    x, y = ember.randn(32, 8), ember.randint(0, 3, (32,))

    calls = []

    def step(inputs, targets):
        calls.append(1)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    eager_state = {k: v.clone() for k, v in model.state_dict().items()}
    compiled = ember.compile(step, mode="compiled")
    losses = [compiled(x, y).item() for _ in range(5)]
    assert len(calls) == 1, "replays must not call the Python function"
    stats = compiled.stats
    assert stats["compiles"] == 1 and stats["replays"] == 4 and stats["traced_kernels"] > 0
    assert stats["trace_seconds"] > 0 and stats["pass_seconds"] > 0
    assert losses[-1] < losses[0]
    # The same steps eagerly from the same start give the same losses.
    model.load_state_dict(eager_state)
    eager = [step(x, y).item() for _ in range(5)]
    np.testing.assert_allclose(losses, eager, rtol=1e-5)
    assert "replay" in compiled.explain() or compiled.explain()
    with pytest.raises(TypeError, match="tensors or numbers"):
        compiled("text", y)
    with pytest.raises(ember.Error, match="mode"):
        ember.compile(step, mode="fast")


def test_profiler_context_manager(tmp_path):
    model = nn.Sequential(nn.Linear(32, 32), nn.GELU())
    with ember.profiler.profile() as prof:
        with ember.profiler.record_function("my step"):
            model(ember.randn(16, 32)).sum().backward()
    table = prof.table(row_limit=5)
    assert "matmul" in table or "linear" in table
    names = [s["name"] for s in prof.op_stats()]
    assert "gelu" in names and all(s["calls"] >= 1 for s in prof.op_stats())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    assert "my step" in path.read_text()
    with pytest.raises(ember.Error, match="sort_by"):
        prof.table("speed")


def test_memory_stats_and_threads():
    ember.empty_cache()
    before = ember.memory_stats()
    assert set(before) >= {"bytes_in_use", "peak_bytes_in_use", "bytes_reserved", "system_allocations"}
    big = ember.zeros(1 << 20)
    assert ember.memory_stats()["bytes_in_use"] >= before["bytes_in_use"] + (4 << 20)
    del big
    assert ember.memory_stats()["bytes_in_use"] <= before["bytes_in_use"] + 1024
    n = ember.get_num_threads()
    ember.set_num_threads(1)
    assert ember.get_num_threads() == 1
    ember.set_num_threads(n)


def test_autocast_and_anomaly_detection():
    a, b = ember.randn(8, 8), ember.randn(8, 8)
    with ember.autocast(dtype=ember.bfloat16):
        assert (a @ b).dtype == ember.bfloat16
    assert (a @ b).dtype == ember.float32
    x = ember.tensor([-1.0], requires_grad=True)
    with ember.autograd.detect_anomaly():
        with pytest.raises(ember.Error, match="sqrt|nan|NaN"):
            x.sqrt().sum().backward()


def test_data_loader():
    inputs, targets = ember.arange(20, dtype=ember.float32).reshape(10, 2), ember.arange(10)
    dataset = ember.data.TensorDataset(inputs, targets)
    assert len(dataset) == 10 and dataset[3][1].item() == 3
    loader = ember.data.DataLoader(dataset, batch_size=4, shuffle=True, seed=1)
    assert len(loader) == 3
    seen = [y for _, ys in loader for y in ys.tolist()]
    assert sorted(seen) == list(range(10)) and seen != list(range(10))
    second = [y for _, ys in loader for y in ys.tolist()]  # each pass is the next epoch
    assert sorted(second) == list(range(10)) and second != seen
    loader.set_epoch(0)  # replays epoch 0's order (a resumed run)
    assert [y for _, ys in loader for y in ys.tolist()] == seen
