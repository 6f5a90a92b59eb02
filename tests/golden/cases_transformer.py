"""Transformer reference data: torch.nn.MultiheadAttention, TransformerEncoderLayer and
TransformerEncoder with fixed random weights, loaded into ember's modules by their state-dict names.
Each case records the output (and the attention weights when asked for), the gradients of the
inputs and of every parameter (in the order of attrs["param_names"]) under the loss
sum(output * grad) (+ sum(weights^2) when the weights are returned, so their backward is tested).

MultiheadAttention: self-attention in both layouts, cross-attention with kdim/vdim (separate
q/k/v_proj_weight), bool and float key_padding_mask, bool and float attn_mask in 2-D and 3-D,
need_weights averaged, per head and off (ember's flash path), is_causal with its mask, unbatched
input, bias=False. Encoder layers: relu and gelu, post- and pre-norm, batch_first, with masks; a
two-layer encoder with a final norm. Modules are in eval mode (dropout off); the MHA fast path is
disabled (with gradients it is never taken anyway). No query row is fully masked (PyTorch gives NaN
there). Everything is float64 except the cases named "float32".

    .venv/bin/python tests/golden/make_golden.py transformer
"""
import numpy as np
import torch

from golden_lib import Recorder

E, HEADS, L, S, N = 8, 2, 5, 7, 3

torch.backends.mha.set_fastpath_enabled(False)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_()


def load(module, names, params):
    module.load_state_dict(dict(zip(names, params)), strict=True)
    module.eval()


def param_grads(module, names):
    grads = dict(module.named_parameters())
    return [grads[name].grad for name in names]


def mha(query, key, value, key_padding_mask, attn_mask, grad, *params, param_names, embed_dim, num_heads,
        batch_first, kdim, vdim, bias, need_weights, average_attn_weights, is_causal):
    m = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=batch_first, kdim=kdim,
                                    vdim=vdim).to(query.dtype)
    load(m, param_names, params)
    q = leaf(query)
    k = q if key is None else leaf(key)
    v = q if value is None else leaf(value)
    out, weights = m(q, k, v, key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
                     average_attn_weights=average_attn_weights, is_causal=is_causal)
    loss = (out * grad).sum()
    if need_weights:
        loss = loss + (weights * weights).sum()
    loss.backward()
    result = [out] + ([weights] if need_weights else []) + [q.grad]
    if key is not None:
        result += [k.grad, v.grad]
    return result + param_grads(m, param_names)


def encoder_layer(nhead, dim_feedforward, activation, norm_first, batch_first, bias):
    return torch.nn.TransformerEncoderLayer(E, nhead, dim_feedforward=dim_feedforward, dropout=0.1,
                                            activation=activation, batch_first=batch_first, norm_first=norm_first,
                                            bias=bias)


def encoder(src, src_mask, key_padding_mask, grad, *params, param_names, nhead, dim_feedforward, activation,
            norm_first, batch_first, bias, is_causal, num_layers, final_norm):
    layer = encoder_layer(nhead, dim_feedforward, activation, norm_first, batch_first, bias)
    if num_layers == 0:
        m = layer
    else:
        norm = torch.nn.LayerNorm(E) if final_norm else None
        m = torch.nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)
    m = m.to(src.dtype)
    load(m, param_names, params)
    x = leaf(src)
    if num_layers == 0:
        out = m(x, src_mask=src_mask, src_key_padding_mask=key_padding_mask, is_causal=is_causal)
    else:
        out = m(x, mask=src_mask, src_key_padding_mask=key_padding_mask, is_causal=is_causal)
    (out * grad).sum().backward()
    return [out, x.grad] + param_grads(m, param_names)


def random_params(module, rng, dtype):
    names, values = [], []
    for name, p in module.state_dict().items():
        names.append(name)
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "norm.weight":
            data = rng.uniform(0.5, 1.5, size=tuple(p.shape))
        else:
            data = rng.uniform(-0.5, 0.5, size=tuple(p.shape))
        values.append(torch.from_numpy(data).to(dtype))
    return names, values


def padding_mask(rng, batch, length, as_float=False):
    """(batch, length) bool, true = padding; key 0 is never padding."""
    mask = rng.random((batch, length)) < 0.35
    mask[:, 0] = False
    mask = torch.from_numpy(mask)
    if as_float:
        return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask, -1e4) + torch.from_numpy(
            rng.uniform(-0.5, 0.5, size=mask.shape))
    return mask


def bool_attn_mask(rng, shape):
    """true = not allowed; key 0 is always allowed, so no row is fully masked."""
    mask = rng.random(shape) < 0.4
    mask[..., 0] = False
    return torch.from_numpy(mask)


def float_attn_mask(rng, shape):
    return torch.from_numpy(rng.normal(0.0, 1.0, size=shape))


def uniform(rng, shape, dtype=torch.float64):
    return torch.from_numpy(rng.uniform(-1.0, 1.0, size=shape)).to(dtype)


def build():
    rng = np.random.default_rng(2024)
    r = Recorder()

    def mha_case(name, *, batch_first=False, kdim=None, vdim=None, bias=True, cross=False, unbatched=False,
                 target_len=L, kpm=None, attn_mask=None, need_weights=True, average=True, is_causal=False):
        module = torch.nn.MultiheadAttention(E, HEADS, bias=bias, batch_first=batch_first, kdim=kdim, vdim=vdim)
        names, params = random_params(module, rng, torch.float64)
        source_len = S if cross else target_len

        def shaped(length, features):
            if unbatched:
                return (length, features)
            return (N, length, features) if batch_first else (length, N, features)

        query = uniform(rng, shaped(target_len, E))
        key = uniform(rng, shaped(source_len, kdim or E)) if cross else None
        value = uniform(rng, shaped(source_len, vdim or E)) if cross else None
        grad = uniform(rng, shaped(target_len, E))
        attrs = {"param_names": names, "embed_dim": E, "num_heads": HEADS, "batch_first": batch_first, "kdim": kdim,
                 "vdim": vdim, "bias": bias, "need_weights": need_weights, "average_attn_weights": average,
                 "is_causal": is_causal}
        r.case("mha", name, mha, [query, key, value, kpm, attn_mask, grad] + params, attrs)

    mha_case("self")
    mha_case("self/batch_first", batch_first=True)
    mha_case("self/no_weights", need_weights=False)
    mha_case("self/batch_first/per_head", batch_first=True, average=False)
    mha_case("self/no_bias", bias=False, need_weights=False)
    mha_case("cross/kdim_vdim", cross=True, kdim=6, vdim=4)
    mha_case("cross/kdim_vdim/batch_first/no_weights", cross=True, kdim=6, vdim=4, batch_first=True,
             need_weights=False)
    mha_case("cross/same_dims", cross=True, batch_first=True)
    for need in [True, False]:
        tag = "weights" if need else "no_weights"
        mha_case(f"cross/kpm_bool/{tag}", cross=True, kpm=padding_mask(rng, N, S), need_weights=need)
        mha_case(f"cross/kpm_float/{tag}", cross=True, batch_first=True, kpm=padding_mask(rng, N, S, True),
                 need_weights=need)
        mha_case(f"cross/attn_bool_2d/{tag}", cross=True, attn_mask=bool_attn_mask(rng, (L, S)), need_weights=need)
        mha_case(f"cross/attn_float_2d/{tag}", cross=True, attn_mask=float_attn_mask(rng, (L, S)),
                 need_weights=need)
        mha_case(f"cross/attn_bool_3d/{tag}", cross=True, batch_first=True,
                 attn_mask=bool_attn_mask(rng, (N * HEADS, L, S)), need_weights=need)
        mha_case(f"cross/attn_float_3d/{tag}", cross=True, attn_mask=float_attn_mask(rng, (N * HEADS, L, S)),
                 need_weights=need, average=False)
        mha_case(f"cross/attn_bool_and_kpm_bool/{tag}", cross=True, attn_mask=bool_attn_mask(rng, (L, S)),
                 kpm=padding_mask(rng, N, S), need_weights=need)
        mha_case(f"cross/attn_float_and_kpm_bool/{tag}", cross=True, batch_first=True,
                 attn_mask=float_attn_mask(rng, (N * HEADS, L, S)), kpm=padding_mask(rng, N, S), need_weights=need)
        causal_float = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
        causal_bool = torch.ones(L, L, dtype=torch.bool).triu(1)
        mha_case(f"self/causal_float/{tag}", attn_mask=causal_float, is_causal=True, need_weights=need)
        mha_case(f"self/causal_bool/{tag}", batch_first=True, attn_mask=causal_bool, is_causal=True,
                 need_weights=need)
        mha_case(f"self/causal_and_kpm/{tag}", attn_mask=causal_bool, kpm=padding_mask(rng, N, L), is_causal=True,
                 need_weights=need)
        mha_case(f"unbatched/self/{tag}", unbatched=True, need_weights=need)
        mha_case(f"unbatched/cross/masks/{tag}", unbatched=True, cross=True, kdim=6, vdim=4,
                 kpm=padding_mask(rng, 1, S)[0], attn_mask=bool_attn_mask(rng, (HEADS, L, S)), need_weights=need,
                 average=need)

    def encoder_case(name, *, num_layers=0, final_norm=False, activation="relu", norm_first=False, batch_first=False,
                     bias=True, src_mask=None, kpm=None, is_causal=False, dtype=torch.float64, unbatched=False):
        layer = encoder_layer(HEADS, 16, activation, norm_first, batch_first, bias)
        if num_layers == 0:
            module = layer
        else:
            module = torch.nn.TransformerEncoder(layer, num_layers, norm=torch.nn.LayerNorm(E) if final_norm else None,
                                                 enable_nested_tensor=False)
        names, params = random_params(module, rng, dtype)
        if unbatched:
            shape = (L, E)
        else:
            shape = (N, L, E) if batch_first else (L, N, E)
        src, grad = uniform(rng, shape, dtype), uniform(rng, shape, dtype)
        if src_mask is not None and src_mask.is_floating_point():
            src_mask = src_mask.to(dtype)
        attrs = {"param_names": names, "nhead": HEADS, "dim_feedforward": 16, "activation": activation,
                 "norm_first": norm_first, "batch_first": batch_first, "bias": bias, "is_causal": is_causal,
                 "num_layers": num_layers, "final_norm": final_norm}
        r.case("encoder", name, encoder, [src, src_mask, kpm, grad] + params, attrs)

    for activation in ["relu", "gelu"]:
        for norm_first in [False, True]:
            encoder_case(f"layer/{activation}/norm_first={norm_first}", activation=activation, norm_first=norm_first)
    encoder_case("layer/relu/kpm/batch_first", batch_first=True, kpm=padding_mask(rng, N, L))
    encoder_case("layer/gelu/norm_first/mask_and_kpm", activation="gelu", norm_first=True,
                 src_mask=float_attn_mask(rng, (L, L)), kpm=padding_mask(rng, N, L))
    encoder_case("layer/relu/causal", src_mask=torch.nn.Transformer.generate_square_subsequent_mask(L),
                 is_causal=True)
    encoder_case("layer/relu/no_bias", bias=False, kpm=padding_mask(rng, N, L))
    encoder_case("layer/gelu/unbatched", activation="gelu", unbatched=True)
    encoder_case("layer/relu/float32", batch_first=True, kpm=padding_mask(rng, N, L), dtype=torch.float32)
    encoder_case("encoder/2_layers/final_norm", num_layers=2, final_norm=True, kpm=padding_mask(rng, N, L))
    encoder_case("encoder/2_layers/norm_first/causal", num_layers=2, final_norm=True, norm_first=True,
                 batch_first=True, activation="gelu",
                 src_mask=torch.nn.Transformer.generate_square_subsequent_mask(L), is_causal=None)
    encoder_case("encoder/2_layers/float32", num_layers=2, final_norm=True, batch_first=True,
                 kpm=padding_mask(rng, N, L), dtype=torch.float32)
    return r
