#!/usr/bin/env python3
"""Softmax regression on Fashion-MNIST with paramserver and numpy only.

The model (a 784x10 weight table and a 1x10 bias table) lives in the parameter servers, which
apply Adam; this program computes the gradients with numpy. Each step is one round trip:
push_pull pushes the batch's gradients, advances the clock and pulls the new values straight
into the arrays the next step uses.

    python3 fashion_softmax.py --servers=127.0.0.1:7100,127.0.0.1:7101 [--epochs=8]
"""

import argparse
import gzip
import math
import os
import sys
import time

import numpy as np

import paramserver as ps

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_fashion_mnist(data_dir=None):
    """(train_x, train_y, test_x, test_y): float32 pixels / 255 of shape (n, 784), int64
    labels."""
    data_dir = data_dir or os.environ.get("PS_FASHION_MNIST_DIR", DEFAULT_DATA_DIR)

    def images(name):
        raw = _read_idx(os.path.join(data_dir, name))
        return raw.reshape(raw.shape[0], -1).astype(np.float32) / np.float32(255.0)

    def labels(name):
        return _read_idx(os.path.join(data_dir, name)).astype(np.int64)

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def softmax_grad(x, y, w, b):
    """Gradients of the batch-mean softmax cross-entropy of x @ w + b."""
    z = x @ w + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= np.float32(len(y))
    return x.T @ p, p.sum(axis=0, keepdims=True)


def accuracy(x, y, w, b):
    return float(np.mean((x @ w + b).argmax(axis=1) == y))


def train(servers, epochs=8, batch_size=64, learning_rate=0.002, job_id="fashion-softmax",
          seed=1, data=None, log=print):
    """Trains against `servers`; returns the test accuracy."""
    train_x, train_y, test_x, test_y = data if data is not None else load_fashion_mnist()
    classes = 10
    features = train_x.shape[1]
    with ps.Client(servers, job_id=job_id, consistency="sync") as client:
        adam = ps.Optimizer.adam(learning_rate)
        w_table = client.create_table("softmax/w", kind="dense", rows=features, dim=classes,
                                      optimizer=adam)
        b_table = client.create_table("softmax/b", kind="dense", rows=1, dim=classes,
                                      optimizer=adam)
        w_keys = np.arange(features, dtype=np.uint64)
        b_keys = np.zeros(1, dtype=np.uint64)
        w = np.empty((features, classes), np.float32)
        b = np.empty((1, classes), np.float32)
        client.pull_many([(w_table, w_keys, w), (b_table, b_keys, b)])
        rng = np.random.default_rng(seed)
        steps_per_epoch = len(train_x) // batch_size
        total = steps_per_epoch * epochs
        step = 0
        for epoch in range(epochs):
            start = time.monotonic()
            order = rng.permutation(len(train_x))
            for s in range(steps_per_epoch):
                batch = order[s * batch_size:(s + 1) * batch_size]
                grad_w, grad_b = softmax_grad(train_x[batch], train_y[batch], w, b)
                # A cosine learning-rate schedule, down to 5% of the rate.
                client.set_learning_rate_scale(
                    0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * step / total)))
                client.push_pull(push=[(w_table, w_keys, grad_w), (b_table, b_keys, grad_b)],
                                 pull=[(w_table, w_keys, w), (b_table, b_keys, b)])
                step += 1
            log(f"epoch {epoch + 1}/{epochs}: test accuracy {accuracy(test_x, test_y, w, b):.4f} "
                f"({time.monotonic() - start:.1f} s)")
        return accuracy(test_x, test_y, w, b)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--servers", required=True, help="host:port,host:port,...")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=float, default=0.002)
    parser.add_argument("--job_id", default="fashion-softmax")
    args = parser.parse_args(argv)
    acc = train(args.servers.split(","), epochs=args.epochs, batch_size=args.batch_size,
                learning_rate=args.learning_rate, job_id=args.job_id)
    print(f"final test accuracy {100 * acc:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
