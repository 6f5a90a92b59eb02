"""The benchmark rows timed from Python through ember's bindings (name ending in _py): the same
work as a C++ row (its `cpp` name), so the table shows the cost of calling ember from Python beside
PyTorch and NumPy called from Python, and beside ember's own C++ time for that row (the `cpp`
column: `x cpp` >= 0.95 means within 5% of C++). Imports ember from the build (scripts/bench puts
<build>/python on PYTHONPATH)."""

from __future__ import annotations

from typing import Callable


def dispatch_add() -> Callable[[], object]:
    import ember
    a, b = ember.randn(4, 4), ember.randn(4, 4)
    return lambda: a + b


def train_step_cnn() -> Callable[[], object]:
    """The C++ row's step (bench_workloads.cpp train_step_cnn: the MNIST CNN, SGD with momentum,
    one fixed batch of 64) with the model written as a Python Module subclass."""
    import ember
    import ember.nn.functional as F
    from ember import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 5)
            self.conv2 = nn.Conv2d(16, 32, 5)
            self.fc = nn.Linear(512, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc(x.flatten(1))

    ember.manual_seed(0)
    model = CNN()
    optimizer = ember.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = ember.randn(64, 1, 28, 28), ember.randint(0, 10, (64,))

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step


# name -> (the ember side's setup, the C++ row it mirrors: its FLOPs and bytes, and its peers)
ROWS = {
    "dispatch_add_f32_4x4_py": (dispatch_add, "dispatch_add_f32_4x4"),
    "train_step_cnn_py": (train_step_cnn, "train_step_cnn"),
}
