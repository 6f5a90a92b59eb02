"""Interop with PyTorch, where torch is installed (the --dev .venv; CI's .venv has no torch, so
these skip there): DLPack both ways shares memory, a module's weights move between the two
libraries, and the same small model computes the same outputs and gradients in both."""

import numpy as np
import pytest

import ember
from ember import nn

torch = pytest.importorskip("torch")


def test_dlpack_both_ways_shares_memory():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    e = ember.from_dlpack(t)
    assert e.shape == (2, 3) and e.dtype == ember.float32
    e[0, 0] = 100
    assert t[0, 0].item() == 100
    back = torch.from_dlpack(e)
    back[1, 2] = -7
    assert e[1, 2].item() == -7 and t[1, 2].item() == -7
    strided = ember.from_dlpack(t.t())
    assert strided.stride() == (1, 3) and strided.tolist() == t.t().tolist()
    for dtype, ember_dtype in [(torch.float64, ember.float64), (torch.int64, ember.int64),
                               (torch.bfloat16, ember.bfloat16), (torch.bool, ember.bool), (torch.int8, ember.int8)]:
        x = torch.ones(3, dtype=dtype)
        assert ember.from_dlpack(x).dtype == ember_dtype
        assert torch.from_dlpack(ember.ones(3).to(ember_dtype)).dtype == dtype


def test_exported_tensor_outlives_ember_handle():
    e = ember.arange(10, dtype=ember.float32)
    t = torch.from_dlpack(e)
    del e
    ember.zeros(10) + 1
    assert t.tolist() == [float(i) for i in range(10)]


def test_weights_move_between_libraries():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    ours = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    ours.load_state_dict({k: ember.from_dlpack(v.detach().contiguous()) for k, v in ref.state_dict().items()})
    x = torch.randn(4, 6)
    y_ref = ref(x)
    y = ours(ember.from_dlpack(x))
    np.testing.assert_allclose(y.detach().numpy(), y_ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    y_ref.square().sum().backward()
    y.square().sum().backward()
    for (name, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    # and back: ember's weights into a fresh PyTorch model
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    fresh.load_state_dict({k: torch.from_dlpack(v) for k, v in ours.state_dict().items()})
    torch.testing.assert_close(fresh(x), y_ref)
