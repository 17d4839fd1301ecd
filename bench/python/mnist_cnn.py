"""The zoo's mnist-cnn (src/model/mnist_cnn.cpp) written in PyTorch, for bench/imported_vs_zoo.sh:
the same network imported with `pipetrain export` against `--model mnist-cnn`."""
from torch import nn


def mnist_cnn(classes=10):
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 200), nn.ReLU()),
        nn.Sequential(nn.Linear(200, 200), nn.ReLU()),
        nn.Linear(200, classes))
