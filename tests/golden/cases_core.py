"""Core reference data: type promotion, broadcasting, printing, dtype conversion and creation."""
import json
import os

import numpy as np
import torch

from golden_lib import ALL_DTYPES, DTYPES, FLOAT_DTYPES, HERE, Recorder, Tensor, encode, make


class CoreRecorder(Recorder):
    def __init__(self):
        super().__init__()
        self.promotion = []
        self.broadcast = []
        self.prints = []

    def write(self, area):
        path = os.path.join(HERE, f"{area}.json")
        with open(path, "w") as f:
            json.dump({"generator": f"torch {torch.__version__}", "promotion": self.promotion,
                       "broadcast": self.broadcast, "print": self.prints, "cases": self.cases}, f,
                      separators=(",", ":"))
        print(f"{path}: {len(self.promotion)} promotions, {len(self.broadcast)} broadcasts, "
              f"{len(self.prints)} prints, {len(self.cases)} cases")


def build():
    rng = np.random.default_rng(1)
    r = CoreRecorder()

    # result_type for every dtype pair in every tier combination, and against Python scalars.
    for a in ALL_DTYPES:
        for b in ALL_DTYPES:
            for a_dim, b_dim in [(1, 1), (1, 0), (0, 1), (0, 0)]:
                ta = torch.zeros([2] if a_dim else [], dtype=DTYPES[a])
                tb = torch.zeros([2] if b_dim else [], dtype=DTYPES[b])
                r.promotion.append({"a": a, "a_dim": a_dim, "b": b, "b_dim": b_dim,
                                    "result": str(torch.result_type(ta, tb)).replace("torch.", "")})
        for scalar in [True, 2, 2.5]:
            for a_dim in [1, 0]:
                ta = torch.zeros([2] if a_dim else [], dtype=DTYPES[a])
                r.promotion.append({"a": a, "a_dim": a_dim, "scalar": scalar,
                                    "result": str(torch.result_type(ta, scalar)).replace("torch.", "")})

    # Broadcasting: random shape pairs, compatible or not.
    for _ in range(300):
        nd_a, nd_b = rng.integers(0, 5, size=2)
        a = [int(x) for x in rng.choice([1, 2, 3, 4], size=nd_a)]
        b = [int(x) for x in rng.choice([1, 2, 3, 4], size=nd_b)]
        for i in range(1, min(nd_a, nd_b) + 1):  # make most pairs compatible
            if rng.random() < 0.8:
                b[-i] = a[-i] if rng.random() < 0.5 else 1
        try:
            result = list(torch.broadcast_shapes(tuple(a), tuple(b)))
        except RuntimeError:
            result = None
        r.broadcast.append({"a": a, "b": b, "result": result})

    # Printing: exact repr strings.
    print_tensors = [
        torch.tensor([1.0, 2.0, 3.0]),
        torch.tensor([[0.1234, -1.5], [3.0, 4.25]]),
        torch.tensor([1e-5, 1.0, 100.0]),
        torch.tensor([1e10, 1.0]),
        torch.tensor([float("nan"), float("inf"), -1.0, 2.0]),
        torch.tensor([1, -20, 300]),
        torch.tensor([True, False]),
        torch.tensor(3.5),
        torch.tensor(7),
        torch.arange(12, dtype=torch.float64).reshape(2, 2, 3),
        torch.arange(2000, dtype=torch.float32).reshape(40, 50) / 7,
        torch.arange(30, dtype=torch.float32) * 1.5,
        torch.zeros(0, 3),
        torch.zeros(0, dtype=torch.int64),
        torch.tensor([1, 2], dtype=torch.int8),
        torch.tensor([0.5, 1.25], dtype=torch.float16),
        torch.tensor([0.5, 1.25], dtype=torch.bfloat16),
        torch.arange(1500, dtype=torch.int64),
        torch.tensor([-0.0, 0.0, 1.0]),
        torch.zeros(2, 3),
    ]
    for t in print_tensors:
        r.prints.append({"tensor": encode(t), "text": repr(t)})

    # Conversions between every pair of dtypes (values representable in both, as PyTorch defines).
    for src in ALL_DTYPES:
        base = make([3, 4], src, rng, low=-5, high=5) if src != "uint8" else make([3, 4], src, rng)
        if src in FLOAT_DTYPES:
            base = torch.round(base.float() * 4).to(DTYPES[src]) / 4  # exactly representable everywhere
        for dst in ALL_DTYPES:
            r.case("to", f"{src}->{dst}", lambda x, dtype: x.to(DTYPES[dtype]), [Tensor(base)], {"dtype": dst})
            r.case("to", f"{src}->{dst}/t", lambda x, dtype: x.to(DTYPES[dtype]), [Tensor(base.t().contiguous(), "t")],
                   {"dtype": dst})

    # Creation.
    for args in [(5,), (2, 9), (1, 10, 3), (0.5, 2.0, 0.25), (10, 0, -3), (-1.0, 1.0, 0.3)]:
        r.case("arange", f"arange{args}", lambda *a: torch.arange(*a), list(args))
    for start, end, steps in [(0.0, 1.0, 5), (-2.0, 3.0, 11), (1.0, 1.0, 1), (0.0, 10.0, 0), (3.0, -3.0, 7)]:
        r.case("linspace", f"linspace({start},{end},{steps})", lambda s, e, n: torch.linspace(s, e, n),
               [start, end, steps])
    for n, m in [(3, 3), (2, 4), (4, 2), (0, 0)]:
        r.case("eye", f"eye({n},{m})", lambda a, b: torch.eye(a, b), [n, m])
    return r
