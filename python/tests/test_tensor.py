"""Tensors from Python: creation, dtypes, geometry, views, indexing (get and set), operators
(reflected and in place) against NumPy, values (item, tolist, bool, float), printing, and the
edge cases: empty tensors, size-0 and size-1 dims, non-contiguous and broadcast inputs."""

import math

import numpy as np
import pytest

import ember


def np_of(t: ember.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def test_creation_and_dtypes():
    assert ember.zeros(2, 3).shape == (2, 3)
    assert ember.zeros((2, 3)).shape == (2, 3)
    assert ember.ones([4]).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert ember.full((2,), 7, dtype=ember.int32).tolist() == [7, 7]
    assert ember.arange(5).dtype == ember.int64 and ember.arange(5).tolist() == [0, 1, 2, 3, 4]
    assert ember.arange(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert ember.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert ember.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert ember.tensor([[1, 2], [3, 4]]).dtype == ember.int64
    assert ember.tensor([1.5, 2]).dtype == ember.float32
    assert ember.tensor([True, False]).dtype == ember.bool
    assert ember.tensor([1, 2], dtype=ember.float64).dtype == ember.float64
    assert ember.tensor(3.5).shape == () and ember.tensor(3.5).item() == 3.5
    assert ember.tensor([]).shape == (0,)
    assert ember.zeros(0, 3).numel() == 0
    assert ember.float is ember.float32 and ember.long is ember.int64
    assert repr(ember.float32) == "ember.float32" and ember.float64.itemsize == 8
    assert ember.zeros(2, requires_grad=True).requires_grad
    with pytest.raises(ember.Error, match=r"\[tensor\] ragged"):
        ember.tensor([[1, 2], [3]])
    with pytest.raises(ember.Error, match="expected a shape"):
        ember.zeros("a")


def test_random_is_seeded():
    ember.manual_seed(3)
    a = ember.randn(4, 4)
    ember.manual_seed(3)
    assert ember.randn(4, 4).eq(a).all().item()
    r = ember.randint(0, 5, (1000,))
    assert r.dtype == ember.int64 and 0 <= r.min().item() and r.max().item() < 5
    u = ember.rand(10000)
    assert 0.45 < u.mean().item() < 0.55


def test_geometry_and_views():
    x = ember.arange(24, dtype=ember.float32).reshape(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.size() == (2, 3, 4) and x.size(-1) == 4 and x.ndim == 3 and x.dim() == 3
    assert x.stride() == (12, 4, 1) and x.numel() == 24 and x.is_contiguous() and len(x) == 2
    t = x.transpose(0, 2)
    assert t.shape == (4, 3, 2) and not t.is_contiguous() and t.stride() == (1, 4, 12)
    np.testing.assert_array_equal(np_of(t), np_of(x).transpose(2, 1, 0))
    assert x.permute(2, 0, 1).shape == (4, 2, 3) and x.permute((2, 0, 1)).shape == (4, 2, 3)
    assert x.view(6, 4).shape == (6, 4) and x.view(-1).shape == (24,) and x.flatten(1).shape == (2, 12)
    assert x[0].unsqueeze(0).shape == (1, 3, 4) and ember.zeros(1, 3, 1).squeeze().shape == (3,)
    assert ember.zeros(3, 1).expand(3, 5).stride() == (1, 0)
    assert x.T.shape == (4, 3, 2) and x.narrow(2, 1, 2).shape == (2, 3, 2)
    v = x.view(24)
    v[0] = 100.0  # a view shares its storage
    assert x[0, 0, 0].item() == 100.0
    c = x.clone()
    c[0, 0, 0] = -1
    assert x[0, 0, 0].item() == 100.0
    with pytest.raises(ember.Error, match=r"\[view\]"):
        t.view(24)


def test_indexing_matches_numpy():
    x = ember.arange(60, dtype=ember.float32).reshape(3, 4, 5)
    n = np_of(x)
    for key in [0, -1, (1, 2), (slice(None), 1), (slice(1, None), slice(None, None, 2)), (Ellipsis, 0),
                (None, 1), (1, None, slice(2, 4)), (slice(0, 0),), (Ellipsis,), (0, Ellipsis, None),
                (slice(-2, None), -1, slice(None, -1))]:
        np.testing.assert_array_equal(np_of(x[key]), n[key], err_msg=str(key))
    np.testing.assert_array_equal(np_of(x[ember.tensor([2, 0])]), n[[2, 0]])
    np.testing.assert_array_equal(np_of(x[:, [3, 1, 1]]), n[:, [3, 1, 1]])
    np.testing.assert_array_equal(np_of(x[1, ember.tensor([[0, 1], [2, 3]])]), n[1, [[0, 1], [2, 3]]])
    mask = x > 30
    np.testing.assert_array_equal(np_of(x[mask]), n[n > 30])
    np.testing.assert_array_equal(np_of(x[0][np_of(x[0, :, 0] > 4).tolist()]), n[0][n[0, :, 0] > 4])
    assert x[0, 0, 0].item() == 0.0 and x[ember.tensor(2)].shape == (4, 5)
    with pytest.raises(IndexError, match="out of bounds"):
        x[3]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(ValueError, match="positive"):
        x[::-1]
    with pytest.raises(TypeError, match="cannot index"):
        x["a"]


def test_setitem():
    x = ember.zeros(3, 4)
    x[0] = 1
    x[1, 1:3] = ember.tensor([2.0, 3.0])
    x[:, -1] = ember.tensor([7.0, 8.0, 9.0])
    x[2, 0] = 5.5
    assert x.tolist() == [[1, 1, 1, 7], [0, 2, 3, 8], [5.5, 0, 0, 9]]
    x[x > 6] = -1
    assert x.tolist() == [[1, 1, 1, -1], [0, 2, 3, -1], [5.5, 0, 0, -1]]
    x[x < 0] = ember.tensor(4.0)
    assert x[:, 3].tolist() == [4, 4, 4]
    x[...] = 0
    assert x.sum().item() == 0
    with pytest.raises(ember.Error, match="not supported"):
        x[ember.tensor([0, 1])] = 1.0


def test_operators_against_numpy():
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((3, 4)).astype(np.float32)
    b_np = rng.standard_normal((4,)).astype(np.float32) + 3  # broadcast, positive
    a, b = ember.from_numpy(a_np.copy()), ember.from_numpy(b_np.copy())
    cases = {
        "a + b": (a + b, a_np + b_np), "a - b": (a - b, a_np - b_np), "a * b": (a * b, a_np * b_np),
        "a / b": (a / b, a_np / b_np), "b ** 2": (b ** 2, b_np ** 2), "2 ** a": (2 ** a, 2.0 ** a_np),
        "1 + a": (1 + a, 1 + a_np), "1 - a": (1 - a, 1 - a_np), "2 * a": (2 * a, 2 * a_np),
        "1 / b": (1 / b, 1 / b_np), "-a": (-a, -a_np), "abs(a)": (abs(a), np.abs(a_np)),
        "a @ a.T": (a @ a.t(), a_np @ a_np.T), "a.exp()": (a.exp(), np.exp(a_np)),
        "b.log()": (b.log(), np.log(b_np)), "a.tanh()": (a.tanh(), np.tanh(a_np)),
        "a.relu()": (a.relu(), np.maximum(a_np, 0)), "a.sum(1)": (a.sum(1), a_np.sum(1)),
        "a.mean((0, 1))": (a.mean((0, 1)), a_np.mean()), "a.amax(0)": (a.amax(0), a_np.max(0)),
        "a.softmax(-1)": (a.softmax(-1), np.exp(a_np) / np.exp(a_np).sum(-1, keepdims=True)),
        "a.var()": (a.var(), a_np.var(ddof=1)), "a.clamp(-0.5, 0.5)": (a.clamp(-0.5, 0.5), np.clip(a_np, -0.5, 0.5)),
        "ember.where": (ember.where(a > 0, a, 0.0), np.where(a_np > 0, a_np, 0)),
        "cat": (ember.cat([a, a], 0), np.concatenate([a_np, a_np])),
        "stack": (ember.stack([b, b], 1), np.stack([b_np, b_np], 1)),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(np_of(got), want, rtol=1e-5, atol=1e-6, err_msg=name)
    assert ((a > 0) == ember.from_numpy(a_np > 0)).all().item()
    assert ((a > 0) & (a < 1)).dtype == ember.bool and (~(a > 0)).tolist() == (a_np <= 0).tolist()
    values, indices = a.max(1)
    np.testing.assert_array_equal(np_of(values), a_np.max(1))
    np.testing.assert_array_equal(np_of(indices), a_np.argmax(1))
    assert a.max().item() == pytest.approx(float(a_np.max()))


def test_in_place_operators_return_self():
    x = ember.ones(3)
    y = x
    x += 1
    x *= ember.tensor([1.0, 2.0, 3.0])
    x -= 0.5
    x /= 2
    assert x is y and x.tolist() == [0.75, 1.75, 2.75]
    assert x.add_(1) is x and x.zero_() is x and x.fill_(2) is x and x.tolist() == [2, 2, 2]
    assert x.clamp_(max=1.5) is x and x.tolist() == [1.5, 1.5, 1.5]


def test_values_and_printing():
    x = ember.tensor([[1.5, -2.0], [3.0, 4.25]])
    assert x.tolist() == [[1.5, -2.0], [3.0, 4.25]]
    assert ember.tensor([1, 2]).tolist() == [1, 2] and ember.tensor([True]).tolist() == [True]
    assert ember.tensor(7).item() == 7 and isinstance(ember.tensor(7).item(), int)
    assert float(ember.tensor(2.5)) == 2.5 and int(ember.tensor(3)) == 3
    assert bool(ember.tensor(1)) and not bool(ember.tensor(0.0))
    assert [1, 2, 3][ember.tensor(1)] == 2  # __index__
    with pytest.raises(ember.Error):
        bool(ember.ones(2))
    with pytest.raises(ember.Error, match="integer"):
        [1, 2][ember.tensor(1.0)]
    assert [r.tolist() for r in x] == [[1.5, -2.0], [3.0, 4.25]]
    # The C++ printer (operator<<), identical from Python.
    assert repr(x) == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]])"
    assert str(ember.tensor([1, 2, 3])) == "tensor([1, 2, 3])"
    assert repr(ember.zeros(0, 2)).startswith("tensor([]")
    assert len({x, x}) == 1  # hashable by identity, although == is elementwise


def test_empty_and_size_one_dims():
    e = ember.zeros(0, 4)
    assert (e + 1).shape == (0, 4) and e.sum().item() == 0 and e.sum(0).tolist() == [0, 0, 0, 0]
    assert e.tolist() == [] and np_of(e).shape == (0, 4)
    s = ember.ones(1, 4) + ember.ones(3, 1)
    assert s.shape == (3, 4) and s.sum().item() == 24
    assert ember.ones(1).item() == 1.0 and ember.ones(1, 1, 1).squeeze().shape == ()


def test_conversions():
    x = ember.tensor([1.7, -2.2])
    assert x.to(ember.int32).tolist() == [1, -2] and x.long().dtype == ember.int64
    assert x.double().dtype == ember.float64 and x.bfloat16().dtype == ember.bfloat16 and x.half().float().shape == (2,)
    assert x.type_as(ember.tensor([1])).dtype == ember.int64
