"""An MNIST training loop written in Python (a Module subclass, ember.optim.Adam with the cosine
schedule, the DataLoader and the random shifts) gives the C++ CLI's results for the same seed:
`ember train mnist` runs the same ops in the same order, so the last batch's loss and the test
accuracy agree exactly."""

import json
import math
import subprocess

import ember
import ember.nn.functional as F
from ember import nn

SEED = 5
EPOCHS = 1
# apps/ember/train.cpp: the seed of the random shifts is the run's seed plus this constant.
SHIFT_SEED_OFFSET = 0x9E3779B97F4A7C15


class CNN(nn.Module):
    """ember::models::mnist_cnn(): the layers made in the same order draw the same initial weights."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def train_in_python(root: str) -> dict:
    ember.set_num_threads(2)
    ember.manual_seed(SEED)
    model = CNN()
    optimizer = ember.optim.Adam(model.parameters(), lr=3e-3)
    train = ember.data.MNIST(root, train=True)
    test = ember.data.MNIST(root, train=False)
    loader = ember.data.DataLoader(train, batch_size=64, shuffle=True, seed=SEED)
    schedule = ember.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(loader) * EPOCHS)
    background = (0.0 - ember.data.MNIST.mean) / ember.data.MNIST.std
    model.train()
    last_loss = None
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        for i, (images, labels) in enumerate(loader):
            images = ember.data.random_shift(images, 2, background, (SEED + SHIFT_SEED_OFFSET) % 2**64,
                                             (epoch << 32) + i)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            schedule.step()
            last_loss = loss.item()
    model.eval()
    correct = 0
    with ember.no_grad():
        for start in range(0, len(test), 1000):
            chunk = test.images[start:start + 1000]
            correct += (model(chunk).argmax(1) == test.labels[start:start + 1000]).sum().item()
    return {"final_loss": last_loss, "test_accuracy": correct / len(test), "train_samples": len(train)}


def test_python_loop_matches_the_cli(cli, data_dir):
    root = str(data_dir / "mnist")
    ours = train_in_python(root)
    out = subprocess.run([str(cli), "train", "mnist", "--model", "cnn", "--epochs", str(EPOCHS), "--seed", str(SEED),
                          "--threads", "2", "--data", root, "--json"], check=True, capture_output=True, text=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    assert theirs["train_samples"] == ours["train_samples"] == 4000
    assert math.isfinite(ours["final_loss"]) and ours["final_loss"] < 1.0
    assert ours["final_loss"] == theirs["final_loss"], (ours, theirs)
    assert ours["test_accuracy"] == theirs["test_accuracy"], (ours, theirs)
    assert ours["test_accuracy"] > 0.85
