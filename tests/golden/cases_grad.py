"""Gradient reference data: what PyTorch's backward gives where an op is not differentiable in the
ordinary sense, so finite differences cannot decide (ties of max/min/maximum/minimum, clamp at its
bounds, abs/relu/sign at 0, norms at 0, prod with zeros, std of constant rows, pow at 0), plus a few
smooth ops whose gradients are pinned to PyTorch's values.

Each case's inputs are the op's float64 inputs, then the upstream gradient (same shape as the output);
"attrs" holds the op's arguments and "wrt" the indices of the inputs that require grad. "expected" is
the list of their gradients (torch.autograd.grad). Read by tests/test_gradcheck.cpp (GoldenGrad).
"""
import torch

from golden_lib import Recorder

INF = float("inf")


def t(values):
    return torch.tensor(values, dtype=torch.float64)


def upstream_like(out):
    # distinct, non-trivial weights so a gradient routed to the wrong element shows
    return torch.arange(1, out.numel() + 1, dtype=torch.float64).reshape(out.shape) / 4 + 0.5


def grad_case(rec, op, name, fn, inputs, wrt, attrs=None):
    attrs = attrs or {}
    leaves = [x.clone().requires_grad_(i in wrt) for i, x in enumerate(inputs)]
    out = fn(*leaves, **attrs)
    upstream = upstream_like(out)

    def grads(*values, wrt, **kw):
        xs = [v.clone().requires_grad_(i in wrt) for i, v in enumerate(values[:-1])]
        y = fn(*xs, **kw)
        return list(torch.autograd.grad(y, [xs[i] for i in wrt], values[-1]))

    rec.case(op, name, grads, list(inputs) + [upstream], dict(attrs, wrt=list(wrt)))


def build():
    rec = Recorder()
    a = t([[1.0, 2.0, 3.0, -1.0], [0.5, 0.5, 2.0, 4.0]])
    b = t([[1.0, 5.0, 3.0, -2.0], [0.5, 0.0, 2.0, 4.0]])
    grad_case(rec, "maximum", "ties", lambda x, y: torch.maximum(x, y), [a, b], [0, 1])
    grad_case(rec, "minimum", "ties", lambda x, y: torch.minimum(x, y), [a, b], [0, 1])
    grad_case(rec, "maximum", "broadcast ties", lambda x, y: torch.maximum(x, y), [a, t([1.0, 2.0, 2.0, 4.0])], [0, 1])

    x = t([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 1.0], [-1.0, 5.0, 0.0, 5.0]])
    for dims, keepdim in [([1], False), ([0], True), ([], False)]:
        grad_case(rec, "amax", f"ties dims={dims} keepdim={keepdim}",
                  lambda v, dims, keepdim: torch.amax(v, tuple(dims) if dims else (0, 1), keepdim=keepdim),
                  [x], [0], {"dims": dims, "keepdim": keepdim})
        grad_case(rec, "amin", f"ties dims={dims} keepdim={keepdim}",
                  lambda v, dims, keepdim: torch.amin(v, tuple(dims) if dims else (0, 1), keepdim=keepdim),
                  [x], [0], {"dims": dims, "keepdim": keepdim})

    z = t([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0], [-3.0, 3.0, 1.0]])
    for p in [2.0, 1.0, "inf", 3.0, 1.5, 0.5]:  # PyTorch leaves p = 0 out of the graph
        grad_case(rec, "norm", f"zeros and ties p={p}",
                  lambda v, p, dims: torch.linalg.vector_norm(v, INF if p == "inf" else p, dim=tuple(dims)),
                  [z], [0], {"p": p, "dims": [1]})

    k = t([[-1.0, 0.0, 2.0], [0.0, -0.0, 3.5]])
    grad_case(rec, "abs", "at zero", torch.abs, [k], [0])
    grad_case(rec, "relu", "at zero", torch.relu, [k], [0])
    grad_case(rec, "sign", "at zero", torch.sign, [k], [0])

    c = t([-1.0, -0.5, 0.0, 0.5, 1.0, 0.25])
    grad_case(rec, "clamp", "at the bounds", lambda v, lo, hi: torch.clamp(v, lo, hi), [c], [0], {"lo": -0.5, "hi": 0.5})
    grad_case(rec, "clamp", "min above max", lambda v, lo, hi: torch.clamp(v, lo, hi), [c], [0], {"lo": 0.5, "hi": -0.5})
    grad_case(rec, "clamp", "min only", lambda v, lo, hi: torch.clamp(v, lo, hi), [c], [0], {"lo": 0.0, "hi": None})
    xs = t([-1.0, 0.0, 1.0, 2.0, 0.5, 3.0])
    lo = t([-1.0, 0.5, 1.0, 3.0, 0.5, 0.0])
    hi = t([0.0, 0.5, 2.0, 1.0, 0.5, 3.0])
    grad_case(rec, "clamp_tensor", "ties and min above max", lambda v, l, h: torch.clamp(v, l, h), [xs, lo, hi], [0, 1, 2])
    grad_case(rec, "clamp_tensor_min", "ties", lambda v, l: torch.clamp(v, min=l), [xs, lo], [0, 1])
    grad_case(rec, "clamp_tensor_max", "ties", lambda v, h: torch.clamp(v, max=h), [xs, hi], [0, 1])

    pz = t([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]])
    grad_case(rec, "prod", "zeros dim 1", lambda v, dims: torch.prod(v, dims[0]), [pz], [0], {"dims": [1]})
    grad_case(rec, "prod", "zeros dim 0", lambda v, dims: torch.prod(v, dims[0]), [pz], [0], {"dims": [0]})
    grad_case(rec, "prod", "one zero overall", lambda v, dims: torch.prod(v), [t([[2.0, 0.0], [3.0, -1.0]])], [0], {"dims": []})
    grad_case(rec, "prod", "two zeros overall", lambda v, dims: torch.prod(v), [pz], [0], {"dims": []})

    s = t([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    grad_case(rec, "std", "constant row", lambda v, dims: torch.std(v, dims[0]), [s], [0], {"dims": [1]})
    grad_case(rec, "var", "rows", lambda v, dims: torch.var(v, dims[0]), [s], [0], {"dims": [1]})

    base = t([0.0, 0.0, 2.0, 0.0, 3.0])
    expo = t([0.0, 2.0, 0.0, 1.5, -1.0])
    grad_case(rec, "pow", "tensor tensor at zero", torch.pow, [base, expo], [0, 1])
    grad_case(rec, "pow_scalar_base", "zero base", lambda e, base: torch.pow(base, e), [t([0.0, 1.0, 2.0])], [0], {"base": 0.0})
    grad_case(rec, "pow_scalar_base", "base 2.5", lambda e, base: torch.pow(base, e), [t([-1.0, 0.0, 2.0])], [0], {"base": 2.5})
    grad_case(rec, "pow_scalar_exponent", "zero exponent", lambda v, e: torch.pow(v, e), [t([0.0, 1.0, -2.0])], [0], {"e": 0.0})
    grad_case(rec, "pow_scalar_exponent", "exponent 2 at zero", lambda v, e: torch.pow(v, e), [t([0.0, 1.0, -2.0])], [0], {"e": 2.0})

    g = t([[-3.0, -0.5, 0.0, 0.5, 2.0, 6.0]])
    gelu = lambda v, approximate: torch.nn.functional.gelu(v, approximate=approximate)  # noqa: E731
    grad_case(rec, "gelu", "erf", gelu, [g], [0], {"approximate": "none"})
    grad_case(rec, "gelu", "tanh", gelu, [g], [0], {"approximate": "tanh"})
    grad_case(rec, "silu", "values", torch.nn.functional.silu, [g], [0])
    grad_case(rec, "logsumexp", "with -inf", lambda v, dims: torch.logsumexp(v, dims),
              [t([[-INF, 0.0, 1.0], [2.0, 2.0, 2.0]])], [0], {"dims": [1]})
    sm = t([[1.0, 2.0, 3.0], [-1.0, 0.0, 5.0]])
    grad_case(rec, "softmax", "dim 1", lambda v, dim: torch.softmax(v, dim), [sm], [0], {"dim": 1})
    grad_case(rec, "log_softmax", "dim 0", lambda v, dim: torch.log_softmax(v, dim), [sm], [0], {"dim": 0})
    return rec
