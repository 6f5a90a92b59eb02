"""Every op of the committed PyTorch reference data (tests/golden/*.json, made by
tests/golden/make_golden.py), run through the Python bindings: elementwise, reductions, linear
algebra, shape ops and sorting, on every dtype and layout the data holds (contiguous, transposed,
strided, broadcast), including the cases PyTorch rejects (ember must raise ember.Error)."""

import json

import numpy as np
import pytest

import ember
from conftest import GOLDEN

NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int64": np.int64, "int32": np.int32,
         "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}
# (rtol, atol) per result dtype: float32 kernels use SIMD transcendental approximations and
# reassociated sums; the half types round every result.
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (2e-4, 2e-5), "float16": (4e-3, 2e-3),
             "bfloat16": (3e-2, 2e-2)}


def decode_array(t: dict) -> np.ndarray:
    raw = bytes.fromhex(t["data"])
    if t["dtype"] == "bfloat16":  # the top half of a float32
        bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(t["shape"])
    return np.frombuffer(raw, dtype=NUMPY[t["dtype"]]).reshape(t["shape"]).copy()


def apply_view(x: ember.Tensor, view):
    if view in (None, "contiguous"):
        return x
    if view == "t":
        return x.transpose(-1, -2)
    if view == "step2":
        return x[::2]
    return x.expand(*view["expand"])


def to_ember(value):
    if value is None:
        return None
    if isinstance(value, list):
        return [to_ember(v) for v in value]
    if "scalar" in value:
        return value["scalar"]
    base = ember.from_numpy(decode_array(value))
    if value["dtype"] == "bfloat16":
        base = base.to(ember.bfloat16)
    return apply_view(base, value.get("view"))


def as_float64(t: ember.Tensor) -> np.ndarray:
    if t.dtype in (ember.bfloat16, ember.float16):
        t = t.to(ember.float32)
    return t.contiguous().numpy().astype(np.float64) if t.dtype != ember.bool else t.numpy()


def check(actual: ember.Tensor, expected: dict, name: str) -> None:
    assert actual.dtype == getattr(ember, expected["dtype"]), f"{name}: dtype {actual.dtype} != {expected['dtype']}"
    assert list(actual.shape) == expected["shape"], f"{name}: shape {actual.shape} != {expected['shape']}"
    want = decode_array(expected)
    if expected["dtype"] in TOLERANCE:
        rtol, atol = TOLERANCE[expected["dtype"]]
        np.testing.assert_allclose(as_float64(actual), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=name)
    else:
        np.testing.assert_array_equal(actual.numpy(), want, err_msg=name)


def decoded(x, attrs):
    decode = attrs.get("decode")
    return x if decode is None else x.to(ember.float32) / decode[0] + decode[1]


def reduce_dims(attrs):
    dims = attrs.get("dims")
    return None if dims is None or dims == [] else dims


def run(op: str, inputs: list, a: dict):
    """The case's call through the Python API, with PyTorch's argument names."""
    F = ember.nn.functional
    if op == "gelu_tanh":
        return ember.gelu(inputs[0], approximate="tanh")
    if op in ("clamp",):
        return ember.clamp(*inputs)
    if op in ("sum", "mean", "prod", "amax", "amin", "all", "any", "logsumexp"):
        x = decoded(inputs[0], a)
        dims = reduce_dims(a)
        if op == "logsumexp":
            return ember.logsumexp(x, a["dims"], keepdim=a["keepdim"])
        return getattr(x, op)(dim=dims, keepdim=a["keepdim"])
    if op in ("var", "std"):
        return getattr(decoded(inputs[0], a), op)(dim=reduce_dims(a), correction=a["correction"],
                                                  keepdim=a["keepdim"])
    if op == "norm":
        p = {"inf": float("inf"), "-inf": float("-inf")}.get(a["p"], a["p"])
        return decoded(inputs[0], a).norm(p=p, dim=reduce_dims(a), keepdim=a["keepdim"])
    if op in ("argmax", "argmin"):
        return getattr(decoded(inputs[0], a), op)(dim=a["dim"], keepdim=a["keepdim"])
    if op in ("softmax", "log_softmax"):
        return getattr(decoded(inputs[0], a), op)(a["dim"])
    if op == "linear":
        return F.linear(*inputs)
    if op in ("tril", "triu"):
        return getattr(inputs[0], op)(a["diagonal"])
    if op == "cumsum":
        dtype = getattr(ember, a["dtype"]) if a.get("dtype") else None
        return inputs[0].cumsum(a["dim"], dtype=dtype)
    if op == "sort":
        return list(inputs[0].sort(dim=a["dim"], descending=a["descending"], stable=a["stable"]))
    if op == "argsort":
        return inputs[0].argsort(dim=a["dim"], descending=a["descending"], stable=a["stable"])
    if op in ("topk", "topk_values"):
        out = inputs[0].topk(a["k"], dim=a["dim"], largest=a["largest"], sorted=a["sorted"])
        return list(out) if op == "topk" else out.values
    if op in ("cat", "stack"):
        return getattr(ember, op)(inputs[0], dim=a["dim"])
    if op == "split":
        return ember.split(inputs[0], a["split"], dim=a["dim"])
    if op == "chunk":
        return ember.chunk(inputs[0], a["chunks"], dim=a["dim"])
    if op == "repeat":
        return inputs[0].repeat(*a["repeats"])
    if op == "tile":
        return ember.tile(inputs[0], a["reps"])
    if op == "flip":
        return inputs[0].flip(a["dims"])
    if op == "roll":
        return ember.roll(inputs[0], a["shifts"], a["dims"] or None)
    if op == "pad":
        value = float(a["value"]) if isinstance(a["value"], str) else a["value"]  # "nan", "inf"
        return F.pad(inputs[0], a["pads"], value=value)
    if op in ("index_select", "gather"):
        return getattr(inputs[0], op)(a["dim"], inputs[1])
    if op == "scatter_add":
        return ember.scatter_add(inputs[0], a["dim"], inputs[1], inputs[2])
    if op == "one_hot":
        return F.one_hot(inputs[0], a["num_classes"])
    if op == "embedding":
        return F.embedding(inputs[1], inputs[0])
    assert not a, f"unmapped attributes for {op}: {a}"
    return getattr(ember, op)(*inputs)


def cases(area: str):
    with open(GOLDEN / f"{area}.json") as f:
        return [pytest.param(c, id=f"{c['op']}/{c['name']}") for c in json.load(f)["cases"]]


@pytest.mark.parametrize("area", ["elementwise", "reduce", "linalg", "shape", "sort"])
def test_golden_area(area):
    """One test per area (thousands of cases: one pytest item each would dominate the run time)."""
    failures, count = [], 0
    for param in cases(area):
        case = param.values[0]
        name = f"{area}:{case['op']}/{case['name']}"
        count += 1
        try:
            inputs = [to_ember(i) for i in case["inputs"]]
            if case["error"]:
                with pytest.raises(ember.Error):
                    run(case["op"], inputs, case["attrs"])
                continue
            result = run(case["op"], inputs, case["attrs"])
            expected = case["expected"]
            if case["op"] == "topk" and not case["attrs"]["sorted"]:
                # Unsorted top-k: any order. The same values, and the indices point at them.
                dim = case["attrs"]["dim"]
                values, indices = result
                np.testing.assert_array_equal(np.sort(as_float64(values), axis=dim),
                                              np.sort(decode_array(expected[0]).astype(np.float64), axis=dim),
                                              err_msg=name)
                assert inputs[0].gather(dim, indices).eq(values).all().item(), name
                continue
            if isinstance(expected, list):
                assert len(result) == len(expected), f"{name}: {len(result)} results, expected {len(expected)}"
                for r, e in zip(result, expected):
                    check(r, e, name)
            else:
                check(result, expected, name)
        except (AssertionError, ember.Error, TypeError, pytest.fail.Exception) as e:
            failures.append(f"{name}: {str(e).strip().splitlines()[0][:300]}")
    assert count > 100
    assert not failures, f"{len(failures)} of {count} cases failed:\n" + "\n".join(failures[:40])


NN_ATTRIBUTE_NAMES = {"kernel": "kernel_size"}  # the reference's names -> the functional's


def call_nn(op, inputs, kwargs):
    """The functional with the reference's inputs (the norms' weight and bias come after their
    shape or group count, as in torch.nn.functional)."""
    F = ember.nn.functional
    if op in ("layer_norm", "group_norm"):
        x, weight, bias = inputs
        first = kwargs.pop("normalized_shape" if op == "layer_norm" else "num_groups")
        return getattr(F, op)(x, first, weight, bias, **kwargs)
    if op == "rms_norm":
        x, weight = inputs
        return F.rms_norm(x, kwargs.pop("normalized_shape"), weight, **kwargs)
    return getattr(F, op)(*inputs, **kwargs)


def test_golden_nn_with_gradients():
    """The layers' functions (conv, pooling, norms, losses, attention, interpolation) with their
    gradients: the last input is the output's cotangent, attrs["grad"] the inputs that need grad,
    and the expected values are [output, each gradient...] (batch_norm: then the running stats)."""
    failures, count = [], 0
    F = ember.nn.functional
    for param in cases("nn"):
        case = param.values[0]
        name = f"nn:{case['op']}/{case['name']}"
        count += 1
        try:
            *inputs, cot = [to_ember(i) for i in case["inputs"]]
            attrs = dict(case["attrs"])
            positions = attrs.pop("grad")
            kwargs = {NN_ATTRIBUTE_NAMES.get(k, k): v for k, v in attrs.items()}
            leaves = [inputs[i].detach().requires_grad_() for i in positions]
            for i, leaf in zip(positions, leaves):
                inputs[i] = leaf
            if case["error"]:
                with pytest.raises(ember.Error):
                    call_nn(case["op"], inputs, kwargs)
                continue
            out = call_nn(case["op"], inputs, kwargs)
            out.backward(cot)
            results = [out.detach()] + [leaf.grad if leaf.grad is not None else ember.zeros_like(leaf)
                                        for leaf in leaves]
            if case["op"] == "batch_norm":  # the updated running statistics, where there are some
                results += [stats for stats in inputs[1:3] if stats is not None]
            assert len(results) == len(case["expected"]), f"{name}: {len(results)} results"
            for got, want in zip(results, case["expected"]):
                check(got, want, name)
        except (AssertionError, ember.Error, TypeError, pytest.fail.Exception) as e:
            failures.append(f"{name}: {str(e).strip().splitlines()[0][:300]}")
    assert count > 100
    assert not failures, f"{len(failures)} of {count} cases failed:\n" + "\n".join(failures[:40])
