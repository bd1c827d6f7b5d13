#!/usr/bin/env python3
"""The built-in fashion_mlp model (784-128-10, ReLU, softmax cross-entropy averaged over the
batch, server-side Adam with learning rate 0.001, batch 64) in PyTorch, its parameters kept in
parameter servers by paramserver.torch.DenseParameters.

    python3 fashion_torch_mlp.py --servers=127.0.0.1:7100,127.0.0.1:7101 [--epochs=2]
"""

import argparse
import sys
import time

import numpy as np
import torch

import paramserver as ps
import paramserver.torch as pst
from fashion_softmax import load_fashion_mnist


def train(servers, epochs=2, batch_size=64, learning_rate=0.001, job_id="fashion-torch",
          seed=1, data=None, log=print):
    """Trains against `servers` in sync mode (one worker); returns the test accuracy."""
    torch.manual_seed(seed)
    train_x, train_y, test_x, test_y = data if data is not None else load_fashion_mnist()
    train_x, train_y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    loss_fn = torch.nn.CrossEntropyLoss()  # the batch mean, as the built-in model
    with ps.Client(servers, job_id=job_id, consistency="sync") as client:
        # Glorot-uniform weights, zero biases (the built-in model's initializers); Adam.
        params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.adam(learning_rate),
                                     prefix="mlp/", seed=seed)
        rng = np.random.default_rng(seed)
        # As the built-in runner: floor(examples / batch) steps per epoch.
        steps_per_epoch = len(train_x) // batch_size
        for epoch in range(epochs):
            start = time.monotonic()
            order = torch.from_numpy(rng.permutation(len(train_x)))
            loss_sum = 0.0
            for s in range(steps_per_epoch):
                batch = order[s * batch_size:(s + 1) * batch_size]
                loss = loss_fn(model(train_x[batch]), train_y[batch])
                model.zero_grad(set_to_none=True)
                loss.backward()
                params.push_pull()
                loss_sum += float(loss)
            with torch.no_grad():
                acc = float((model(test_x).argmax(1) == test_y).float().mean())
            log(f"epoch {epoch + 1}/{epochs}: train loss {loss_sum / steps_per_epoch:.4f}, "
                f"test accuracy {acc:.4f} ({time.monotonic() - start:.1f} s)")
        return acc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", required=True, help="host:port,host:port,...")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--job_id", default="fashion-torch")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    acc = train(args.servers.split(","), epochs=args.epochs, job_id=args.job_id)
    print(f"final test accuracy {100 * acc:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
