"""nn module reference data: what the modules add to the functional math. BatchNorm2d's running
statistics and outputs over several training batches then eval (momentum 0.1 and None, i.e. the
cumulative average), Linear's output and gradients (contiguous and transposed inputs), and the
per-step losses and final weights of a small MLP trained with hand-written SGD. Weights are inputs,
so ember loads the same ones; everything is float64."""
import numpy as np
import torch

from golden_lib import Recorder, Tensor, make


def batch_norm_sequence(x1, x2, x3, x_eval, weight, bias, momentum):
    bn = torch.nn.BatchNorm2d(x1.shape[1], momentum=momentum).double()
    with torch.no_grad():
        bn.weight.copy_(weight)
        bn.bias.copy_(bias)
    outputs = [bn(x1), bn(x2), bn(x3)]
    bn.eval()
    outputs.append(bn(x_eval))
    return outputs + [bn.running_mean, bn.running_var]


def linear_with_grads(x, weight, bias, grad):
    lin = torch.nn.Linear(weight.shape[1], weight.shape[0]).double()
    with torch.no_grad():
        lin.weight.copy_(weight)
        lin.bias.copy_(bias)
    x = x.detach().clone().requires_grad_()
    y = lin(x)
    (y * grad).sum().backward()
    return [y, lin.weight.grad, lin.bias.grad, x.grad]


def mlp_sgd(x, target, w1, b1, w2, b2, lr, steps):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    with torch.no_grad():
        for p, value in zip(model.parameters(), [w1, b1, w2, b2]):
            p.copy_(value)
    losses = []
    for _ in range(steps):
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
        losses.append(loss.detach())
    return [torch.stack(losses)] + [p.detach() for p in model.parameters()]


def build():
    rng = np.random.default_rng(23)
    r = Recorder()

    batches = [Tensor(make((4, 3, 2, 3), "float64", rng)) for _ in range(4)]
    affine = [Tensor(make((3,), "float64", rng, positive=True)), Tensor(make((3,), "float64", rng))]
    for momentum in [0.1, None]:
        r.case("batch_norm2d", f"momentum={momentum}", batch_norm_sequence, batches + affine,
               {"momentum": momentum})

    for view in ["contiguous", "t"]:
        x = Tensor(make((5, 4), "float64", rng)) if view == "contiguous" else Tensor(make((4, 5), "float64", rng), "t")
        r.case("linear", view, linear_with_grads,
               [x, Tensor(make((3, 4), "float64", rng)), Tensor(make((3,), "float64", rng)),
                Tensor(make((5, 3), "float64", rng))])

    x = Tensor(make((16, 4), "float64", rng))
    target = Tensor(torch.from_numpy(rng.integers(0, 3, size=(16,))))
    weights = [Tensor(make(s, "float64", rng, low=-0.5, high=0.5)) for s in [(8, 4), (8,), (3, 8), (3,)]]
    r.case("mlp_sgd", "tanh-mlp", mlp_sgd, [x, target] + weights, {"lr": 0.5, "steps": 8})
    return r
