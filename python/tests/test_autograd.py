"""Autograd from Python: backward and grad against hand-derived values, tensor hooks taking Python
callables, no_grad / enable_grad as context managers and decorators, autograd.grad, gradcheck of
Python-composed functions in float64, and errors from a hook reaching the caller."""

import math

import numpy as np
import pytest

import ember


def test_backward_values():
    x = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum() + (2 * x).mean()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0, 3.0]) + 2 / 3, rtol=1e-6)
    assert x.is_leaf and not y.is_leaf and y.grad_fn is not None and x.grad_fn is None
    assert "sum" in repr(y.grad_fn) or "add" in repr(y.grad_fn)
    x.grad = None
    assert x.grad is None
    (x.exp() * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0, 2.0, 3.0]), rtol=1e-6)
    x.grad.zero_()
    (x ** 3).sum().backward()
    assert x.grad.tolist() == pytest.approx([3.0, 12.0, 27.0])


def test_matmul_and_broadcast_gradients():
    a = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    b = ember.randn(4, dtype=ember.float64, requires_grad=True)
    out = (a @ b.unsqueeze(1)).sum() + (a * b).sum()
    out.backward()
    an, bn = a.detach().numpy(), b.detach().numpy()
    np.testing.assert_allclose(a.grad.numpy(), np.tile(bn, (3, 1)) * 2, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), an.sum(0) * 2, rtol=1e-12)


def test_hooks_take_python_callables():
    x = ember.ones(3, requires_grad=True)
    seen = []
    handle = x.register_hook(lambda g: seen.append(g.tolist()))
    (x * 2).sum().backward()
    assert seen == [[2.0, 2.0, 2.0]]
    handle.remove()
    x.grad = None
    doubled = x.register_hook(lambda g: g * 10)  # a returned tensor replaces the gradient
    (x * 2).sum().backward()
    assert x.grad.tolist() == [20.0, 20.0, 20.0] and seen == [[2.0, 2.0, 2.0]]
    doubled.remove()
    y = x * 3
    y.retain_grad()
    y.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0, 1.0]


def test_hook_errors_reach_the_caller():
    x = ember.ones(2, requires_grad=True)

    def bad(grad):
        raise KeyError("from the hook")

    x.register_hook(bad)
    with pytest.raises(KeyError, match="from the hook"):
        (x * 2).sum().backward()
    z = ember.ones(2, requires_grad=True)
    z.register_hook(lambda g: "not a tensor")
    with pytest.raises(TypeError, match="must return a tensor or None"):
        z.sum().backward()


def test_grad_modes():
    x = ember.ones(2, requires_grad=True)
    with ember.no_grad():
        assert not ember.is_grad_enabled()
        y = x * 2
        with ember.enable_grad():
            assert (x * 2).requires_grad
    assert ember.is_grad_enabled() and not y.requires_grad

    @ember.no_grad()
    def infer(t):
        return t * 2

    assert not infer(x).requires_grad
    with pytest.raises(ValueError):
        with ember.no_grad():
            raise ValueError("restored on the way out")
    assert ember.is_grad_enabled()


def test_autograd_grad_and_errors():
    x = ember.tensor([2.0], requires_grad=True)
    y = ember.tensor([5.0], requires_grad=True)
    (gx,) = ember.autograd.grad([(x * x).sum()], [x])
    assert gx.tolist() == [4.0]
    gx, gy = ember.autograd.grad([(x * 3).sum()], [x, y], allow_unused=True)
    assert gx.tolist() == [3.0] and gy is None
    with pytest.raises(ember.Error, match=r"\[backward\]|\[autograd|requires grad|does not require"):
        ember.ones(2).sum().backward()


def test_gradcheck_of_python_functions():
    ember.manual_seed(0)
    x = ember.randn(3, 4, dtype=ember.float64, requires_grad=True)
    w = ember.randn(5, 4, dtype=ember.float64, requires_grad=True)
    f = lambda a, b: ember.nn.functional.linear(a, b).tanh().softmax(-1).log().sum(0)  # noqa: E731
    assert ember.autograd.gradcheck(f, [x, w])
    g = lambda a: (a[:, 1:3] * a[::2].sum(0)[1:3]).sum()  # noqa: E731  indexing in the graph
    assert ember.autograd.gradcheck(g, [x])
