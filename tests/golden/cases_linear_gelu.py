"""Reference data for linear_gelu = gelu(linear(x, weight, bias), approximate): both GELU forms,
with and without bias, x of rank 1-3, shapes that leave partial register tiles and cross packed
blocks of k (k = 300: two blocks; m = 37 and n = 21 or 40: edge tiles), transposed operands, float64, and errors."""
import numpy as np
import torch.nn.functional as F

from golden_lib import Recorder, Tensor, make


def linear_gelu(x, w, b=None, approximate="none"):
    return F.gelu(F.linear(x, w, b), approximate=approximate)


def build():
    rng = np.random.default_rng(11)
    r = Recorder()
    for approximate in ["none", "tanh"]:
        attrs = {"approximate": approximate}
        for dtype in ["float32", "float64"]:
            big = [((37, 300), 21), ((13, 64), 40)] if dtype == "float32" else []
            for xs, out in [((5,), 4), ((3, 5), 4), ((2, 3, 5), 7)] + big:
                shape = "x".join(map(str, xs))
                x = Tensor(make(list(xs), dtype, rng))
                w = Tensor(make([out, xs[-1]], dtype, rng, low=-0.2, high=0.2))
                b = Tensor(make([out], dtype, rng))
                r.case("linear_gelu", f"{approximate}/{dtype}/{shape}->{out}", linear_gelu, [x, w], attrs)
                r.case("linear_gelu", f"{approximate}/{dtype}/{shape}->{out}/bias", linear_gelu, [x, w, b], attrs)
        r.case("linear_gelu", f"{approximate}/float32/x-t", linear_gelu,
               [Tensor(make([40, 19], "float32", rng), "t"), Tensor(make([33, 40], "float32", rng, low=-0.3, high=0.3)),
                Tensor(make([33], "float32", rng))], attrs)
        r.case("linear_gelu", f"{approximate}/float32/weight-t", linear_gelu,
               [Tensor(make([19, 40], "float32", rng)), Tensor(make([40, 33], "float32", rng, low=-0.3, high=0.3), "t"),
                Tensor(make([33], "float32", rng))], attrs)
    r.case("linear_gelu", "shape-mismatch", linear_gelu,
           [Tensor(make([3, 5], "float32", rng)), Tensor(make([4, 6], "float32", rng))])
    return r
