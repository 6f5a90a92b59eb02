"""nn.functional reference data: conv2d, conv_transpose2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm, layer_norm,
rms_norm, group_norm, interpolate, cross_entropy, nll_loss, mse_loss, l1_loss and binary_cross_entropy_with_logits, in float32 and float64.

Each case records the forward output AND the gradients: the last input is a cotangent `cot` (the gradient of
the output), attrs["grad"] lists the inputs (by position) that require grad, and "expected" is
[output, grad of each listed input...]. batch_norm also appends running_mean and running_var after the update.
Inputs include strided/padded/dilated/grouped (transposed) convolutions, ceil_mode pools, non-contiguous ("t") inputs,
ignore_index and label smoothing, and PyTorch's errors for bad shapes, channel mismatches and bad targets.

Attribute conventions read by tests/test_nn_functional.cpp: pairs are [h, w] lists; "stride" may be null
(the kernel size); "reduction" is "none" | "mean" | "sum"; "eps" may be null (rms_norm's dtype default).
"""
import numpy as np
import torch
import torch.nn.functional as F

from golden_lib import DTYPES, Recorder, Tensor, make

FLOATS = ["float32", "float64"]


def leaf(x):
    return x.detach().requires_grad_() if x is not None else None


def grads_of(out, leaves, cot):
    out.backward(cot)
    return [out.detach()] + [(x.grad if x.grad is not None else torch.zeros_like(x)) for x in leaves]


def with_grads(forward, grad_positions):
    """fn(*inputs, cot, **attrs): runs forward on leaves for the listed inputs, backward with cot."""

    def fn(*args, **attrs):
        *inputs, cot = args
        inputs = [leaf(x) if i in grad_positions else x for i, x in enumerate(inputs)]
        out = forward(*inputs, **{k: v for k, v in attrs.items() if k != "grad"})
        return grads_of(out, [inputs[i] for i in grad_positions], cot)

    return fn


def record(r, rng, op, name, forward, inputs, attrs, grad_positions, dtype):
    """Records forward + gradients; the cotangent is drawn for the output's shape (none when torch raises)."""
    attrs = dict(attrs, grad=list(grad_positions))
    kwargs = {k: v for k, v in attrs.items() if k != "grad"}
    try:
        with torch.no_grad():
            values = [x.value() if isinstance(x, Tensor) else x for x in inputs]
            shape = list(forward(*values, **kwargs).shape)
        cot = Tensor(make(shape, dtype, rng))
    except (RuntimeError, ValueError, IndexError, TypeError):
        cot = Tensor(make([], dtype, rng))
    r.case(op, name, with_grads(forward, grad_positions), list(inputs) + [cot], attrs)


def pair(v):
    return v if isinstance(v, (list, tuple)) else [v, v]


# --- the ops as torch calls, taking ember's attribute names -------------------------------------------------


def f_conv2d(x, w, b, stride, padding, dilation, groups):
    return F.conv2d(x, w, b, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups)


def f_conv1d(x, w, b, stride, padding, dilation, groups):
    return F.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)


def f_softplus(x, beta, threshold):
    return F.softplus(x, beta=beta, threshold=threshold)


def f_conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation):
    return F.conv_transpose2d(x, w, b, stride=tuple(stride), padding=tuple(padding),
                              output_padding=tuple(output_padding), groups=groups, dilation=tuple(dilation))


def f_max_pool2d(x, kernel, stride, padding, dilation, ceil_mode):
    return F.max_pool2d(x, tuple(kernel), None if stride is None else tuple(stride), tuple(padding), tuple(dilation),
                        ceil_mode=ceil_mode)


def f_avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad):
    return F.avg_pool2d(x, tuple(kernel), None if stride is None else tuple(stride), tuple(padding), ceil_mode=ceil_mode,
                        count_include_pad=count_include_pad)


def f_adaptive_avg_pool2d(x, output_size):
    return F.adaptive_avg_pool2d(x, tuple(output_size))


def f_layer_norm(x, w, b, normalized_shape, eps):
    return F.layer_norm(x, normalized_shape, w, b, eps)


def f_rms_norm(x, w, normalized_shape, eps):
    return F.rms_norm(x, normalized_shape, w, eps)


def f_cross_entropy(x, t, ignore_index, reduction, label_smoothing):
    return F.cross_entropy(x, t, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing)


def f_nll_loss(x, t, ignore_index, reduction):
    return F.nll_loss(x, t, ignore_index=ignore_index, reduction=reduction)


def f_mse_loss(x, t, reduction):
    return F.mse_loss(x, t, reduction=reduction)


def f_l1_loss(x, t, reduction):
    return F.l1_loss(x, t, reduction=reduction)


def f_bce(x, t, w, pw, reduction):
    return F.binary_cross_entropy_with_logits(x, t, w, reduction=reduction, pos_weight=pw)


def f_sdpa(q, k, v, mask, is_causal, scale, enable_gqa):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa)


def t_layout(shape, dtype, rng, **kw):
    """A non-contiguous input of `shape`: the last two dims stored transposed."""
    base = make(list(shape[:-2]) + [shape[-1], shape[-2]], dtype, rng, **kw)
    return Tensor(base, "t")


def build():
    rng = np.random.default_rng(11)
    r = Recorder()

    def T(shape, dtype, **kw):
        return Tensor(make(list(shape), dtype, rng, **kw))

    for dt in FLOATS:
        # --- conv2d: (x, w, b, cot) ------------------------------------------------------------------------
        conv = [
            # name, x, w shape, bias, stride, padding, dilation, groups
            ("basic", T([2, 3, 7, 7], dt), [4, 3, 3, 3], True, 1, 0, 1, 1),
            ("stride2_pad1", T([2, 3, 7, 8], dt), [4, 3, 3, 3], True, 2, 1, 1, 1),
            ("dilation2_pad2", T([1, 2, 8, 7], dt), [3, 2, 3, 3], True, 1, 2, 2, 1),
            ("grouped", T([2, 4, 6, 6], dt), [6, 2, 3, 3], True, [1, 2], [1, 0], 1, 2),
            ("depthwise", T([2, 3, 5, 5], dt), [3, 1, 3, 3], False, 1, 1, 1, 3),
            ("rect_kernel_nobias", T([2, 2, 6, 7], dt), [3, 2, 2, 3], False, [2, 1], [1, 1], [1, 2], 1),
            ("pointwise", T([2, 4, 5, 5], dt), [3, 4, 1, 1], True, 1, 0, 1, 1),
            ("unbatched", T([3, 6, 6], dt), [2, 3, 3, 3], True, 1, 1, 1, 1),
            ("transposed_input", t_layout([2, 3, 6, 5], dt, rng), [2, 3, 3, 3], True, 1, 1, 1, 1),
            ("stride3_all_padding", T([1, 2, 5, 5], dt), [2, 2, 3, 3], True, 3, 1, 1, 1),
        ]
        for name, x, wshape, bias, stride, padding, dilation, groups in conv:
            w = T(wshape, dt, low=-1.0, high=1.0)
            b = T([wshape[0]], dt) if bias else None
            grad = [0, 1, 2] if bias else [0, 1]
            attrs = {"stride": pair(stride), "padding": pair(padding), "dilation": pair(dilation), "groups": groups}
            record(r, rng, "conv2d", f"{name}_{dt}", f_conv2d, [x, w, b], attrs, grad, dt)
        if dt == "float32":
            bad = [
                ("channel_mismatch", [2, 3, 6, 6], [4, 2, 3, 3], 1, 0, 1),
                ("input_2d", [6, 6], [4, 1, 3, 3], 1, 0, 1),
                ("too_small", [1, 1, 2, 2], [1, 1, 3, 3], 1, 0, 1),
                ("groups_not_dividing_out", [1, 4, 5, 5], [3, 2, 3, 3], 1, 0, 2),
                ("weight_3d", [1, 2, 5, 5], [3, 2, 3], 1, 0, 1),
            ]
            for name, xs, ws, stride, padding, groups in bad:
                attrs = {"stride": pair(stride), "padding": pair(padding), "dilation": [1, 1], "groups": groups}
                record(r, rng, "conv2d", f"error_{name}", f_conv2d, [T(xs, dt), T(ws, dt), None], attrs, [0, 1], dt)

        # --- max_pool2d / avg_pool2d: (x, cot) ---------------------------------------------------------------
        pools = [
            # name, x, kernel, stride, padding, dilation, ceil_mode
            ("k2", T([2, 3, 6, 6], dt), 2, None, 0, 1, False),
            ("k3_s2_p1", T([2, 2, 7, 7], dt), 3, 2, 1, 1, False),
            ("k3_s2_ceil", T([1, 2, 8, 8], dt), 3, 2, 0, 1, True),
            ("k3_s2_p1_ceil", T([1, 2, 8, 7], dt), 3, 2, 1, 1, True),
            ("k2_s1_dilation2", T([1, 2, 6, 6], dt), 2, 1, 0, 2, False),
            ("rect", T([1, 2, 7, 9], dt), [2, 3], [2, 2], [1, 1], 1, True),
            ("unbatched", T([3, 5, 5], dt), 2, None, 0, 1, True),
            ("transposed_input", t_layout([2, 2, 6, 5], dt, rng), 3, 2, 1, 1, False),
        ]
        for name, x, k, s, p, d, ceil in pools:
            attrs = {"kernel": pair(k), "stride": None if s is None else pair(s), "padding": pair(p), "dilation": pair(d),
                     "ceil_mode": ceil}
            record(r, rng, "max_pool2d", f"{name}_{dt}", f_max_pool2d, [x], attrs, [0], dt)
        for name, x, k, s, p, d, ceil in pools:
            if d != 1:
                continue
            for include in (True, False):
                attrs = {"kernel": pair(k), "stride": None if s is None else pair(s), "padding": pair(p),
                         "ceil_mode": ceil, "count_include_pad": include}
                record(r, rng, "avg_pool2d", f"{name}_include{int(include)}_{dt}", f_avg_pool2d, [x], attrs, [0], dt)
        if dt == "float32":
            attrs = {"kernel": [2, 2], "stride": None, "padding": [2, 2], "dilation": [1, 1], "ceil_mode": False}
            record(r, rng, "max_pool2d", "error_padding_too_large", f_max_pool2d, [T([1, 1, 6, 6], dt)], attrs, [0], dt)
            attrs = {"kernel": [4, 4], "stride": None, "padding": [0, 0], "dilation": [1, 1], "ceil_mode": False}
            record(r, rng, "max_pool2d", "error_too_small", f_max_pool2d, [T([1, 1, 3, 3], dt)], attrs, [0], dt)
            attrs = {"kernel": [2, 2], "stride": None, "padding": [0, 0], "dilation": [1, 1], "ceil_mode": False}
            record(r, rng, "max_pool2d", "error_input_2d", f_max_pool2d, [T([6, 6], dt)], attrs, [0], dt)
            attrs = {"kernel": [3, 3], "stride": None, "padding": [2, 2], "ceil_mode": False, "count_include_pad": True}
            record(r, rng, "avg_pool2d", "error_padding_too_large", f_avg_pool2d, [T([1, 1, 6, 6], dt)], attrs, [0], dt)

        # --- adaptive_avg_pool2d: (x, cot) -------------------------------------------------------------------
        for name, x, size in [("7x7_to_3x2", T([2, 2, 7, 7], dt), [3, 2]), ("5x5_to_4x4", T([1, 3, 5, 5], dt), [4, 4]),
                              ("global", T([2, 3, 4, 5], dt), [1, 1]), ("unbatched", T([2, 6, 5], dt), [2, 3]),
                              ("transposed_input", t_layout([1, 2, 6, 7], dt, rng), [3, 3])]:
            record(r, rng, "adaptive_avg_pool2d", f"{name}_{dt}", f_adaptive_avg_pool2d, [x], {"output_size": size},
                   [0], dt)

        # --- batch_norm: (x, running_mean, running_var, weight, bias, cot) --------------------------------------
        def f_batch_norm(x, rm, rv, w, b, training, momentum, eps):
            return F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)

        def bn_case(name, x, channels, affine, training, momentum, eps=1e-5, stats=True):
            rm = make([channels], dt, rng, low=-0.5, high=0.5) if stats else None
            rv = make([channels], dt, rng, positive=True, high=2.0) if stats else None
            w = T([channels], dt) if affine else None
            b = T([channels], dt) if affine else None
            grad = [0, 3, 4] if affine else [0]
            attrs = {"training": training, "momentum": momentum, "eps": eps}

            def fn(*args, **kw):
                xv, rmv, rvv, wv, bv, cot = args
                rmv = rmv.clone() if rmv is not None else None
                rvv = rvv.clone() if rvv is not None else None
                inputs = [leaf(xv), rmv, rvv, leaf(wv) if affine else None, leaf(bv) if affine else None]
                out = f_batch_norm(*inputs, kw["training"], kw["momentum"], kw["eps"])
                result = grads_of(out, [inputs[i] for i in grad], cot)
                return result + ([rmv, rvv] if stats else [])

            with torch.no_grad():
                shape = list(x.value().shape)
            cot = Tensor(make(shape, dt, rng))
            r.case("batch_norm", f"{name}_{dt}", fn, [x, rm, rv, w, b, cot], dict(attrs, grad=grad))

        bn_case("train_2d", T([4, 3], dt), 3, True, True, 0.1)
        bn_case("train_4d", T([3, 2, 4, 4], dt, low=-1.0, high=5.0), 2, True, True, 0.3, eps=1e-3)
        bn_case("train_3d_no_affine", T([2, 3, 5], dt), 3, False, True, 0.1)
        bn_case("train_no_running_stats", T([4, 2, 3], dt), 2, True, True, 0.1, stats=False)
        bn_case("eval_4d", T([2, 3, 3, 3], dt), 3, True, False, 0.1)
        bn_case("transposed_input", t_layout([2, 3, 4, 5], dt, rng), 3, True, True, 0.1)
        if dt == "float32":
            bn_case("error_one_value_per_channel", T([1, 3], dt), 3, True, True, 0.1)

        # --- layer_norm: (x, weight, bias, cot); rms_norm: (x, weight, cot) -----------------------------------------
        ln = [
            ("last_dim", T([4, 5], dt), [5], True, 1e-5),
            ("last_two_dims", T([2, 3, 4], dt, low=2.0, high=6.0), [3, 4], True, 1e-5),
            ("no_affine", T([3, 6], dt), [6], False, 1e-3),
            ("transposed_input", t_layout([2, 4, 3], dt, rng), [3], True, 1e-5),
        ]
        for name, x, ns, affine, eps in ln:
            w = T(ns, dt) if affine else None
            b = T(ns, dt) if affine else None
            record(r, rng, "layer_norm", f"{name}_{dt}", f_layer_norm, [x, w, b], {"normalized_shape": ns, "eps": eps},
                   [0, 1, 2] if affine else [0], dt)
            record(r, rng, "rms_norm", f"{name}_{dt}", f_rms_norm, [x, w], {"normalized_shape": ns, "eps": None},
                   [0, 1] if affine else [0], dt)
        record(r, rng, "rms_norm", f"eps_given_{dt}", f_rms_norm, [T([3, 4], dt, low=-0.01, high=0.01), T([4], dt)],
               {"normalized_shape": [4], "eps": 1e-4}, [0, 1], dt)
        if dt == "float32":
            record(r, rng, "layer_norm", "error_shape_mismatch", f_layer_norm, [T([4, 5], dt), None, None],
                   {"normalized_shape": [4], "eps": 1e-5}, [0], dt)
            record(r, rng, "layer_norm", "error_weight_shape", f_layer_norm, [T([4, 5], dt), T([4], dt), None],
                   {"normalized_shape": [5], "eps": 1e-5}, [0], dt)

        # --- cross_entropy / nll_loss: (x, target, cot) ----------------------------------------------------------
        def targets(shape, classes, ignore=None):
            t = torch.from_numpy(rng.integers(0, classes, size=shape))
            if ignore is not None:
                flat = t.view(-1)
                flat[:: 3] = ignore
            return Tensor(t)

        ce = [
            # name, x, target, ignore_index, reduction, label_smoothing
            ("mean", T([5, 4], dt), targets([5], 4), -100, "mean", 0.0),
            ("sum", T([5, 4], dt), targets([5], 4), -100, "sum", 0.0),
            ("none", T([5, 4], dt), targets([5], 4), -100, "none", 0.0),
            ("ignore_index", T([6, 4], dt), targets([6], 4, ignore=-100), -100, "mean", 0.0),
            ("ignore_index_class", T([6, 3], dt), targets([6], 3, ignore=1), 1, "sum", 0.0),
            ("label_smoothing", T([5, 4], dt), targets([5], 4), -100, "mean", 0.1),
            ("smoothing_and_ignore", T([6, 5], dt), targets([6], 5, ignore=-1), -1, "mean", 0.25),
            ("smoothing_none", T([4, 3], dt), targets([4], 3, ignore=-100), -100, "none", 0.2),
            ("spatial", T([2, 4, 3], dt), targets([2, 3], 4), -100, "mean", 0.0),
            ("spatial_4d_smoothing", T([2, 3, 2, 2], dt), targets([2, 2, 2], 3, ignore=-100), -100, "sum", 0.1),
            ("unbatched", T([5], dt), Tensor(torch.tensor(3)), -100, "mean", 0.0),
            ("transposed_input", t_layout([4, 6], dt, rng), targets([4], 6), -100, "mean", 0.0),
            ("large_logits", T([3, 4], dt, low=-300.0, high=300.0), targets([3], 4), -100, "sum", 0.0),
            ("all_ignored", T([3, 4], dt), Tensor(torch.full([3], -100)), -100, "mean", 0.0),
        ]
        for name, x, t, ignore, reduction, smoothing in ce:
            attrs = {"ignore_index": ignore, "reduction": reduction, "label_smoothing": smoothing}
            record(r, rng, "cross_entropy", f"{name}_{dt}", f_cross_entropy, [x, t], attrs, [0], dt)
            if smoothing == 0.0:
                lp = Tensor(torch.log_softmax(x.value(), dim=1 if x.value().dim() > 1 else 0).contiguous())
                attrs = {"ignore_index": ignore, "reduction": reduction}
                record(r, rng, "nll_loss", f"{name}_{dt}", f_nll_loss, [lp, t], attrs, [0], dt)
        if dt == "float32":
            for name, x, t in [("target_too_large", T([3, 4], dt), Tensor(torch.tensor([0, 4, 1]))),
                               ("target_negative", T([3, 4], dt), Tensor(torch.tensor([0, -1, 1]))),
                               ("target_shape", T([3, 4], dt), targets([4], 4)),
                               ("spatial_target_shape", T([2, 4, 3], dt), targets([2, 4], 4))]:
                attrs = {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}
                record(r, rng, "cross_entropy", f"error_{name}", f_cross_entropy, [x, t], attrs, [0], dt)
                attrs = {"ignore_index": -100, "reduction": "mean"}
                record(r, rng, "nll_loss", f"error_{name}", f_nll_loss, [x, t], attrs, [0], dt)

        # --- mse_loss / l1_loss / bce_with_logits ---------------------------------------------------------------
        for reduction in ("mean", "sum", "none"):
            x, t = T([3, 4], dt), T([3, 4], dt)
            record(r, rng, "mse_loss", f"{reduction}_{dt}", f_mse_loss, [x, t], {"reduction": reduction}, [0, 1], dt)
            record(r, rng, "l1_loss", f"{reduction}_{dt}", f_l1_loss, [x, t], {"reduction": reduction}, [0, 1], dt)
        record(r, rng, "mse_loss", f"transposed_{dt}", f_mse_loss, [t_layout([3, 4], dt, rng), T([3, 4], dt)],
               {"reduction": "mean"}, [0, 1], dt)
        record(r, rng, "l1_loss", f"transposed_{dt}", f_l1_loss, [t_layout([3, 4], dt, rng), T([3, 4], dt)],
               {"reduction": "sum"}, [0, 1], dt)

        def probs(shape):
            return Tensor(torch.from_numpy(rng.uniform(0.0, 1.0, size=shape)).to(getattr(torch, dt)))

        bce = [
            ("plain", T([4, 3], dt, low=-20.0, high=20.0), None, None, "mean"),
            ("weight", T([4, 3], dt), T([3], dt, positive=True), None, "sum"),
            ("pos_weight", T([4, 3], dt), None, T([3], dt, positive=True), "mean"),
            ("both_none", T([2, 3], dt), T([2, 3], dt, positive=True), T([3], dt, positive=True), "none"),
            ("large_logits", T([2, 4], dt, low=-200.0, high=200.0), None, T([4], dt, positive=True), "sum"),
        ]
        for name, x, w, pw, reduction in bce:
            record(r, rng, "binary_cross_entropy_with_logits", f"{name}_{dt}", f_bce, [x, probs(list(x.value().shape)), w, pw],
                   {"reduction": reduction}, [0, 1], dt)
        if dt == "float32":
            record(r, rng, "binary_cross_entropy_with_logits", "error_shape", f_bce, [T([4, 3], dt), probs([3]), None, None],
                   {"reduction": "mean"}, [0], dt)
    # --- scaled_dot_product_attention: (q, k, v, mask, cot); attrs is_causal, scale, enable_gqa ---------------
    # Lengths cross the kernel's 64-row tiles (67, 131); masks broadcast; a bool mask leaves one query
    # row with no key (PyTorch gives zeros there).
    for dt in FLOATS:
        def qkv(b, hq, hk, length, keys, e, ev):
            return T([b, hq, length, e], dt), T([b, hk, keys, e], dt), T([b, hk, keys, ev], dt)

        def bool_mask(shape):
            return Tensor(torch.from_numpy(rng.random(shape) < 0.7))

        masked_row = torch.from_numpy(rng.random([1, 1, 5, 9]) < 0.7)
        masked_row[0, 0, 2, :] = False
        attention = [
            # name, (q, k, v), mask, is_causal, scale, enable_gqa
            ("basic", qkv(2, 3, 3, 5, 7, 4, 4), None, False, None, False),
            ("value_features", qkv(1, 2, 2, 6, 6, 8, 3), None, False, 0.3, False),
            ("causal", qkv(2, 2, 2, 9, 9, 4, 4), None, True, None, False),
            ("causal_more_keys", qkv(1, 2, 2, 4, 11, 4, 5), None, True, None, False),
            ("causal_more_queries", qkv(1, 1, 1, 11, 4, 4, 4), None, True, None, False),
            ("long", qkv(1, 1, 1, 67, 131, 4, 4), None, False, None, False),
            ("long_causal", qkv(1, 1, 1, 131, 131, 4, 4), None, True, None, False),
            ("single_query", qkv(2, 1, 1, 1, 70, 4, 4), None, False, None, False),
            ("gqa", qkv(1, 4, 2, 5, 6, 4, 4), None, False, None, True),
            ("gqa_causal", qkv(2, 6, 2, 7, 7, 4, 4), None, True, None, True),
            ("bool_mask", qkv(2, 2, 2, 5, 9, 4, 4), bool_mask([2, 2, 5, 9]), False, None, False),
            ("bool_mask_broadcast", qkv(2, 3, 3, 5, 9, 4, 4), bool_mask([5, 9]), False, None, False),
            ("key_padding_mask", qkv(2, 2, 2, 5, 9, 4, 4), bool_mask([2, 1, 1, 9]), False, None, False),
            ("float_mask", qkv(2, 2, 2, 5, 9, 4, 4), T([2, 1, 5, 9], dt), False, None, False),
            ("masked_row", qkv(1, 1, 1, 5, 9, 4, 4), Tensor(masked_row), False, None, False),
            ("no_heads_3d", (T([2, 5, 4], dt), T([2, 6, 4], dt), T([2, 6, 3], dt)), None, False, None, False),
            ("transposed_query", (t_layout([1, 2, 6, 4], dt, rng), T([1, 2, 6, 4], dt), T([1, 2, 6, 4], dt)), None,
             False, None, False),
            ("five_dims", (T([2, 1, 2, 3, 4], dt), T([2, 1, 2, 5, 4], dt), T([2, 1, 2, 5, 4], dt)), None, True,
             None, False),
        ]
        for name, (q, k, v), mask, is_causal, scale, gqa in attention:
            attrs = {"is_causal": is_causal, "scale": scale, "enable_gqa": gqa}
            record(r, rng, "scaled_dot_product_attention", f"{name}_{dt}", f_sdpa, [q, k, v, mask], attrs, [0, 1, 2],
                   dt)
        if dt == "float32":
            bad = [
                ("heads_differ", qkv(1, 4, 2, 3, 3, 4, 4), None, False, False),
                ("gqa_not_dividing", qkv(1, 3, 2, 3, 3, 4, 4), None, False, True),
                ("feature_mismatch", (T([1, 1, 3, 4], dt), T([1, 1, 3, 5], dt), T([1, 1, 3, 4], dt)), None, False,
                 False),
                ("mask_shape", qkv(1, 1, 1, 3, 4, 4, 4), bool_mask([3, 5]), False, False),
                ("mask_and_causal", qkv(1, 1, 1, 3, 3, 4, 4), bool_mask([3, 3]), True, False),
            ]
            for name, (q, k, v), mask, is_causal, gqa in bad:
                attrs = {"is_causal": is_causal, "scale": None, "enable_gqa": gqa}
                record(r, rng, "scaled_dot_product_attention", f"error_{name}", f_sdpa, [q, k, v, mask], attrs,
                       [0, 1, 2], dt)
    # --- conv_transpose2d: (x, w, b, cot); weight (C_in, C_out / groups, kH, kW) ----------------------------
    # After every other case, so their inputs do not change. output_padding needs stride or dilation above
    # it; "dilation2_outpad1_stride1" and "pointwise_dilated_outpad" have output_padding >= stride (rows no
    # kernel tap reaches), "direct_path" takes the direct kernels, "large_padding" pads by more than the kernel.
    for dt in FLOATS:
        conv_t = [
            # name, x, w shape, bias, stride, padding, output_padding, dilation, groups
            ("basic", T([2, 3, 5, 5], dt), [3, 2, 3, 3], True, 1, 0, 0, 1, 1),
            ("stride2_outpad1", T([2, 3, 4, 5], dt), [3, 4, 3, 3], True, 2, 1, 1, 1, 1),
            ("rect_stride_padding", T([1, 2, 6, 5], dt), [2, 3, 3, 2], True, [2, 1], [1, 2], [1, 0], 1, 1),
            ("dilation2_pad1", T([1, 2, 5, 6], dt), [2, 3, 3, 3], True, 1, 1, 0, 2, 1),
            ("dilation2_outpad1_stride1", T([1, 2, 4, 5], dt), [2, 2, 3, 3], True, 1, 0, 1, 2, 1),
            ("pointwise_dilated_outpad", T([2, 4, 5, 5], dt), [4, 3, 1, 1], True, 1, 0, 1, 2, 1),
            ("grouped", T([2, 4, 5, 4], dt), [4, 3, 3, 3], True, [2, 1], [1, 0], [1, 0], 1, 2),
            ("depthwise_stride2_nobias", T([1, 3, 4, 4], dt), [3, 1, 3, 3], False, 2, 1, 1, 1, 3),
            ("unbatched", T([3, 5, 6], dt), [3, 2, 3, 3], True, 2, 1, 1, 1, 1),
            ("stride3_outpad2_nobias", T([2, 2, 3, 3], dt), [2, 3, 2, 2], False, 3, 0, 2, 1, 1),
            ("transposed_input", t_layout([2, 3, 5, 4], dt, rng), [3, 2, 3, 3], True, 2, 1, 1, 1, 1),
            ("direct_path", T([1, 2, 6, 10], dt), [2, 3, 3, 3], True, 1, 1, 0, 1, 1),
            ("large_padding", T([1, 1, 6, 9], dt), [1, 2, 2, 3], True, 1, [2, 3], 0, 1, 1),
        ]
        for name, x, wshape, bias, stride, padding, output_padding, dilation, groups in conv_t:
            w = T(wshape, dt, low=-1.0, high=1.0)
            b = T([wshape[1] * groups], dt) if bias else None
            grad = [0, 1, 2] if bias else [0, 1]
            attrs = {"stride": pair(stride), "padding": pair(padding), "output_padding": pair(output_padding),
                     "groups": groups, "dilation": pair(dilation)}
            record(r, rng, "conv_transpose2d", f"{name}_{dt}", f_conv_transpose2d, [x, w, b], attrs, grad, dt)
        if dt == "float32":
            bad = [
                # name, x, w, bias shape, stride, padding, output_padding, dilation, groups
                ("output_padding_not_smaller", [1, 2, 4, 4], [2, 2, 3, 3], None, 2, 0, 2, 1, 1),
                ("output_padding_negative", [1, 2, 4, 4], [2, 2, 3, 3], None, 2, 0, -1, 1, 1),
                ("channel_mismatch", [1, 3, 4, 4], [2, 2, 3, 3], None, 1, 0, 0, 1, 1),
                ("groups_not_dividing_in", [1, 4, 4, 4], [4, 2, 3, 3], None, 1, 0, 0, 1, 3),
                ("output_too_small", [1, 1, 1, 1], [1, 1, 1, 1], None, 1, 1, 0, 1, 1),
                ("input_2d", [4, 4], [1, 1, 3, 3], None, 1, 0, 0, 1, 1),
                ("weight_3d", [1, 2, 4, 4], [2, 2, 3], None, 1, 0, 0, 1, 1),
                ("bias_shape", [1, 2, 4, 4], [2, 3, 3, 3], [2], 1, 0, 0, 1, 1),
            ]
            for name, xs, ws, bs, stride, padding, output_padding, dilation, groups in bad:
                attrs = {"stride": pair(stride), "padding": pair(padding), "output_padding": pair(output_padding),
                         "groups": groups, "dilation": pair(dilation)}
                b = T(bs, dt) if bs is not None else None
                record(r, rng, "conv_transpose2d", f"error_{name}", f_conv_transpose2d, [T(xs, dt), T(ws, dt), b],
                       attrs, [0, 1], dt)
    build_group_norm_and_interpolate(r)
    build_conv1d(r)
    build_softplus(r)
    build_rope(r)
    return r


def f_group_norm(x, w, b, num_groups, eps):
    return F.group_norm(x, num_groups, w, b, eps)


def f_interpolate(x, size, scale_factor, mode, align_corners):
    return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners)


def build_group_norm_and_interpolate(r):
    """group_norm: (x, weight, bias, cot); interpolate: (x, cot). Their own generator, so that the cases
    above keep their values."""
    rng = np.random.default_rng(12)

    def T(shape, dtype, **kw):
        return Tensor(make(shape, dtype, rng, **kw))

    for dt in FLOATS:
        gn = [
            # name, x, num_groups, affine, eps
            ("two_groups", T([2, 4, 3, 3], dt), 2, True, 1e-5),
            ("one_group", T([3, 6, 5], dt, low=2.0, high=6.0), 1, True, 1e-5),
            ("group_per_channel", T([2, 3, 4, 2], dt), 3, True, 1e-3),
            ("no_affine_2d", T([4, 8], dt), 2, False, 1e-3),
            ("transposed_input", t_layout([2, 4, 5, 3], dt, rng), 2, True, 1e-5),
            ("five_dims", T([1, 4, 2, 3, 2], dt), 2, True, 1e-5),
        ]
        for name, x, groups, affine, eps in gn:
            channels = x.value().shape[1]
            w = T([channels], dt) if affine else None
            b = T([channels], dt) if affine else None
            record(r, rng, "group_norm", f"{name}_{dt}", f_group_norm, [x, w, b], {"num_groups": groups, "eps": eps},
                   [0, 1, 2] if affine else [0], dt)
        if dt == "float32":
            record(r, rng, "group_norm", "error_groups_not_dividing", f_group_norm, [T([2, 6, 3], dt), None, None],
                   {"num_groups": 4, "eps": 1e-5}, [0], dt)
            record(r, rng, "group_norm", "error_weight_shape", f_group_norm, [T([2, 6, 3], dt), T([3], dt), None],
                   {"num_groups": 3, "eps": 1e-5}, [0], dt)

        up = [
            # name, x, size, scale_factor, mode, align_corners
            ("nearest_double", T([2, 3, 4, 5], dt), None, [2.0, 2.0], "nearest", None),
            ("nearest_size", T([1, 2, 5, 7], dt), [8, 3], None, "nearest", None),
            ("nearest_fraction", T([1, 2, 5, 4], dt), None, [1.7, 0.6], "nearest", None),
            ("nearest_1d", T([2, 3, 6], dt), [10], None, "nearest", None),
            ("nearest_3d", T([1, 2, 3, 2, 4], dt), None, [2.0, 1.5, 0.5], "nearest", None),
            ("bilinear_double", T([2, 3, 4, 5], dt), None, [2.0, 2.0], "bilinear", False),
            ("bilinear_size", T([1, 2, 5, 7], dt), [8, 3], None, "bilinear", False),
            ("bilinear_align_corners", T([1, 2, 5, 7], dt), [9, 4], None, "bilinear", True),
            ("bilinear_fraction", T([1, 1, 6, 5], dt), None, [1.3, 2.5], "bilinear", False),
            ("bilinear_to_one", T([1, 2, 4, 3], dt), [1, 1], None, "bilinear", True),
            ("bilinear_transposed_input", t_layout([2, 2, 3, 4], dt, rng), [6, 5], None, "bilinear", False),
            ("linear_1d", T([2, 3, 5], dt), [9], None, "linear", False),
            ("trilinear", T([1, 2, 3, 4, 2], dt), [5, 3, 4], None, "trilinear", True),
        ]
        for name, x, size, scale, mode, align in up:
            record(r, rng, "interpolate", f"{name}_{dt}", f_interpolate, [x],
                   {"size": size, "scale_factor": scale, "mode": mode, "align_corners": align}, [0], dt)
        if dt == "float32":
            bad = [
                ("error_align_corners_nearest", [1, 1, 4, 4], [8, 8], None, "nearest", True),
                ("error_bilinear_3d", [1, 1, 4], [8], None, "bilinear", False),
                ("error_both_size_and_scale", [1, 1, 4, 4], [8, 8], [2.0, 2.0], "nearest", None),
                ("error_size_count", [1, 1, 4, 4], [8, 8, 8], None, "nearest", None),
            ]
            for name, xs, size, scale, mode, align in bad:
                record(r, rng, "interpolate", name, f_interpolate, [T(xs, dt)],
                       {"size": size, "scale_factor": scale, "mode": mode, "align_corners": align}, [0], dt)


def build_conv1d(r):
    """conv1d: (x, w, b, cot); weight (C_out, C_in / groups, k). Its own generator, so that the cases
    above keep their values. "causal_depthwise" is Mamba's convolution (padding k - 1; the caller keeps
    the first L outputs)."""
    rng = np.random.default_rng(13)

    def T(shape, dtype, **kw):
        return Tensor(make(shape, dtype, rng, **kw))

    for dt in FLOATS:
        conv = [
            # name, x, w shape, bias, stride, padding, dilation, groups
            ("basic", T([2, 3, 7], dt), [4, 3, 3], True, 1, 0, 1, 1),
            ("stride2_padding1", T([2, 2, 9], dt), [3, 2, 3], True, 2, 1, 1, 1),
            ("dilation2_padding2", T([1, 3, 8], dt), [2, 3, 3], True, 1, 2, 2, 1),
            ("grouped", T([2, 4, 6], dt), [6, 2, 2], True, 1, 1, 1, 2),
            ("causal_depthwise", T([2, 5, 9], dt), [5, 1, 4], True, 1, 3, 1, 5),
            ("unbatched_nobias", T([3, 6], dt), [2, 3, 2], False, 1, 0, 1, 1),
            ("pointwise", T([2, 4, 5], dt), [3, 4, 1], True, 1, 0, 1, 1),
            ("transposed_input", t_layout([2, 6, 3], dt, rng), [4, 3, 3], True, 1, 1, 1, 1),
            ("kernel_spans_input", T([1, 2, 4], dt), [2, 2, 4], True, 3, 0, 1, 1),
        ]
        for name, x, wshape, bias, stride, padding, dilation, groups in conv:
            w = T(wshape, dt, low=-1.0, high=1.0)
            b = T([wshape[0]], dt) if bias else None
            attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
            record(r, rng, "conv1d", f"{name}_{dt}", f_conv1d, [x, w, b], attrs, [0, 1, 2] if bias else [0, 1], dt)
        if dt == "float32":
            bad = [
                # name, x, w, bias shape, stride, padding, dilation, groups
                ("input_4d", [1, 2, 3, 4], [2, 2, 3], None, 1, 0, 1, 1),
                ("weight_2d", [1, 2, 5], [2, 2], None, 1, 0, 1, 1),
                ("channel_mismatch", [1, 3, 5], [2, 2, 3], None, 1, 0, 1, 1),
                ("groups_not_dividing_out", [1, 4, 5], [3, 2, 3], None, 1, 0, 1, 2),
                ("kernel_longer_than_input", [1, 2, 3], [2, 2, 5], None, 1, 0, 1, 1),
                ("bias_shape", [1, 2, 5], [3, 2, 3], [2], 1, 0, 1, 1),
                ("stride_zero", [1, 2, 5], [3, 2, 3], None, 0, 0, 1, 1),
            ]
            for name, xs, ws, bs, stride, padding, dilation, groups in bad:
                attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
                b = T(bs, dt) if bs is not None else None
                record(r, rng, "conv1d", f"error_{name}", f_conv1d, [T(xs, dt), T(ws, dt), b], attrs, [0, 1], dt)


def build_softplus(r):
    """softplus: (x, cot), with inputs on both sides of the threshold. Its own generator."""
    rng = np.random.default_rng(14)

    def T(shape, dtype, **kw):
        return Tensor(make(shape, dtype, rng, **kw))

    for dt in FLOATS:
        cases = [
            # name, x, beta, threshold
            ("default", T([3, 5], dt, low=-30.0, high=30.0), 1.0, 20.0),
            ("beta2_threshold5", T([4, 6], dt, low=-6.0, high=6.0), 2.0, 5.0),
            ("small_beta", T([2, 3, 4], dt, low=-4.0, high=4.0), 0.5, 20.0),
            ("negative_beta", T([7], dt, low=-4.0, high=4.0), -1.5, 3.0),
            ("transposed_input", t_layout([3, 4], dt, rng, low=-25.0, high=25.0), 1.0, 20.0),
            ("empty", T([0, 3], dt), 1.0, 20.0),
        ]
        for name, x, beta, threshold in cases:
            record(r, rng, "softplus", f"{name}_{dt}", f_softplus, [x], {"beta": beta, "threshold": threshold}, [0], dt)


def f_rope(x, cos, sin, style):
    """Rotary position embedding written with torch ops: adjacent pairs as ggml's normal mode (GGUF Llama
    models), halves as Hugging Face's apply_rotary_pos_emb with rotate_half."""
    half = cos.shape[-1]
    c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (..., T, 1, R/2) against x (..., T, H, D)
    rotated, rest = x[..., : 2 * half], x[..., 2 * half :]
    if style == "adjacent":
        a, b = rotated[..., 0::2], rotated[..., 1::2]
        out = torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    else:
        cc, ss = torch.cat([c, c], -1), torch.cat([s, s], -1)
        out = rotated * cc + torch.cat([-rotated[..., half:], rotated[..., :half]], -1) * ss
    return torch.cat([out, rest], -1)


def build_rope(r):
    """rope: (x, cos, sin, cot), the angles of Llama's frequencies (base 10000) at given positions; the
    gradient of x only. Its own generator."""
    rng = np.random.default_rng(15)

    def T(shape, dtype, **kw):
        return Tensor(make(shape, dtype, rng, **kw))

    def angles(positions, rotated, dtype):
        inv = 10000.0 ** (-torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
        theta = torch.as_tensor(positions, dtype=torch.float64).unsqueeze(-1) * inv
        return Tensor(theta.cos().to(DTYPES[dtype])), Tensor(theta.sin().to(DTYPES[dtype]))

    for dt in FLOATS:
        cases = [
            # name, x, positions (T) or (B, T), rotated dims
            ("full", T([2, 5, 3, 8], dt), list(range(5)), 8),
            ("partial", T([1, 4, 2, 10], dt), [7, 8, 9, 10], 6),
            ("per_sequence", T([2, 3, 2, 4], dt), [[0, 1, 2], [5, 6, 7]], 4),
            ("unbatched", T([6, 2, 4], dt), list(range(100, 106)), 4),
            ("transposed_input", t_layout([2, 3, 4, 6], dt, rng), [0, 1, 2], 6),
            ("empty", T([0, 3, 2, 4], dt), [0, 1, 2], 4),
        ]
        for name, x, positions, rotated in cases:
            cos, sin = angles(positions, rotated, dt)
            for style in ["adjacent", "halves"]:
                record(r, rng, "rope", f"{name}_{style}_{dt}", f_rope, [x, cos, sin], {"style": style}, [0], dt)
