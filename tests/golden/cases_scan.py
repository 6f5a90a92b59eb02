"""selective_scan reference data: Mamba's selective scan as a plain sequential loop in PyTorch (the
reference ember's kernel is checked against), in float32 and float64.

Each case's inputs are u, delta (batch, channels, length), A (channels, state), B, C (batch, state,
length) and the cotangent of the output; "expected" is [y, du, ddelta, dA, dB, dC]; attrs["chunk"]
is the chunk ember's forward saves states at (the values do not depend on it).
"""
import numpy as np
import torch

from golden_lib import Recorder, Tensor, make

FLOATS = ["float32", "float64"]


def scan_ref(u, delta, A, B, C):
    """h_t = exp(delta_t A) h_t-1 + delta_t u_t B_t, y_t = C_t . h_t, one step at a time."""
    batch, channels, length = u.shape
    h = torch.zeros(batch, channels, A.shape[1], dtype=u.dtype)
    ys = []
    for t in range(length):
        decay = torch.exp(delta[:, :, t, None] * A[None])
        h = decay * h + delta[:, :, t, None] * u[:, :, t, None] * B[:, None, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    return torch.stack(ys, dim=-1)


def with_grads(u, delta, A, B, C, cot, chunk):
    leaves = [x.detach().requires_grad_() for x in (u, delta, A, B, C)]
    y = scan_ref(*leaves)
    y.backward(cot)
    return [y.detach()] + [x.grad for x in leaves]


def build():
    rng = np.random.default_rng(31)
    r = Recorder()
    for dt in FLOATS:
        def T(shape, **kw):
            return Tensor(make(shape, dt, rng, **kw))

        cases = [
            # name, batch, channels, length, state, chunk
            ("one_vector_of_state", 2, 3, 9, 16, 4),
            ("state_not_a_vector", 1, 4, 7, 5, 3),
            ("two_vectors_of_state", 2, 2, 6, 32, 64),
            ("more_channels_than_a_block", 1, 20, 5, 4, 2),
            ("chunk_of_one", 1, 2, 5, 3, 1),
        ]
        for name, batch, channels, length, state, chunk in cases:
            u = T([batch, channels, length])
            delta = T([batch, channels, length], low=0.01, high=0.5)  # softplus(.) in Mamba: positive, small
            A = T([channels, state], low=-2.0, high=-0.1)  # -exp(A_log): negative
            B = T([batch, state, length])
            C = T([batch, state, length])
            cot = T([batch, channels, length])
            r.case("selective_scan", f"{name}_{dt}",
                   lambda *x, chunk: with_grads(*x, chunk), [u, delta, A, B, C, cot], {"chunk": chunk})
    return r
