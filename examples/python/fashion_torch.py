#!/usr/bin/python3
"""The Fashion-MNIST MLP in PyTorch, its parameters in the parameter servers: a program job.

Run by every worker daemon of a program job (deploy/jobs/fashion_torch.textproto):

    psctl submit deploy/jobs/fashion_torch.textproto

The job file declares the model's tables (one dense table per torch parameter, named after
it: fc1.weight 128 x 784, fc1.bias, fc2.weight 10 x 128, fc2.bias); the worker daemon starts
this script with the environment that paramserver.Session.from_env() reads. Each step the
worker pushes its gradients and pulls the new parameters (paramserver.torch.DenseParameters,
one round trip); the servers apply the optimizer of the job file (Adam). Worker w of n reads
the examples i with i % n == w of each epoch's shuffled order; in a job of dynamic data
assignment (data_assignment: DYNAMIC, ssp or async) it reads the batches the scheduler hands
it instead, for the job file's epochs (--epochs is then unused). After the last step every
worker evaluates on the 10,000 test images and reports the test accuracy (the job's result).

    fashion_torch.py [--epochs=5] [--batch=64] [--data_dir=/usr/share/datasets/fashion-mnist]
                     [--hidden=128 | --layers=784,4096,4096,10] [--steps=0] [--seed=1]

--layers gives every layer's width (the tables are then fc1 .. fcN, N = layers - 1, with
fcK.weight of layers[K] x layers[K-1]); --steps=N stops after N steps (0: the epochs' steps). At
the end each worker prints the median time of its steps ("median step ...").
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch

import paramserver as ps
import paramserver.torch as pst


def load_idx(path):
    """An IDX file (gzip'd) of Fashion-MNIST as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    images = load_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


class Mlp(torch.nn.Module):
    """Layers fc1 .. fcN of the given widths, ReLU between them."""

    def __init__(self, widths):
        super().__init__()
        self.num_layers = len(widths) - 1
        for k in range(self.num_layers):
            setattr(self, f"fc{k + 1}", torch.nn.Linear(widths[k], widths[k + 1]))

    def forward(self, x):
        for k in range(1, self.num_layers):
            x = torch.relu(getattr(self, f"fc{k}")(x))
        return getattr(self, f"fc{self.num_layers}")(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64, help="examples per step and worker")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", default="",
                   help="every layer's width, e.g. 784,4096,4096,10 (instead of --hidden)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)

    session = ps.Session.from_env()
    train_x, train_y = load(a.data_dir, "train")
    test_x, test_y = load(a.data_dir, "t10k")
    # The clocks per epoch are fixed by the job's workers at the start, so that every worker
    # runs the same steps whatever happens to the others.
    workers = session.num_workers
    steps_per_epoch = len(train_x) // (a.batch * workers)
    total = steps_per_epoch * a.epochs
    if a.steps > 0:
        total = min(total, a.steps)

    widths = [int(w) for w in a.layers.split(",")] if a.layers else [784, a.hidden, 10]
    model = Mlp(widths)
    # The job file's tables, one per parameter; the servers hold the initial values.
    params = pst.DenseParameters(session.client, model)
    loss_fn = torch.nn.CrossEntropyLoss()
    print(f"worker {session.worker_id} (rank {session.rank} of {workers}): {total} steps "
          f"of {a.batch} examples, {a.epochs} epochs", flush=True)
    start = time.monotonic()
    if session.dynamic_data:
        # data_assignment: DYNAMIC: the scheduler hands out the batches (the job file's epochs).
        seen, resync = 0, False
        for batch in session.batches(len(train_x), a.batch):
            idx = torch.from_numpy(batch.examples)
            try:
                if resync:  # the last step was cut short: its pull left the model incomplete
                    params.pull()
                    resync = False
                loss, accuracy = train_step(model, params, loss_fn, train_x[idx], train_y[idx])
            except ps.StepInterrupted:
                resync = True  # a server died: batches() recovers and hands the range again
                continue
            session.report(loss=loss, accuracy=accuracy, samples=len(idx))
            seen += 1
            if seen % 200 == 0:
                print(f"batch {seen} (step {batch.step + 1}) epoch {batch.epoch} loss {loss:.4f} "
                      f"{seen * a.batch / (time.monotonic() - start):.0f} samples/s", flush=True)
        print(f"this worker read {seen} batches", flush=True)
        return evaluate(session, model, params, loss_fn, test_x, test_y)
    order, order_epoch, resync = None, -1, False
    step_seconds = []
    for step in session.steps(total, steps_per_epoch):
        step_start = time.monotonic()
        epoch, in_epoch = divmod(step, steps_per_epoch)
        if epoch != order_epoch:
            order = torch.from_numpy(np.random.default_rng(a.seed + epoch).permutation(len(train_x)))
            order_epoch = epoch
        # This worker's share of the epoch's order (by its rank now: a worker that died leaves
        # its share to the others).
        rank, n = session.rank, session.num_workers
        mine = order[rank::n]
        first = (in_epoch * a.batch) % max(1, len(mine) - a.batch)
        idx = mine[first:first + a.batch]
        try:
            if resync:  # the last step was cut short: its pull left the model incomplete
                params.pull()
                resync = False
            loss, accuracy = train_step(model, params, loss_fn, train_x[idx], train_y[idx])
        except ps.StepInterrupted:
            resync = True  # a server died: steps() recovers and says which step to run
            continue
        session.report(loss=loss, accuracy=accuracy, samples=len(idx))
        step_seconds.append(time.monotonic() - step_start)
        if (step + 1) % 200 == 0:
            print(f"step {step + 1}/{total} epoch {epoch + 1} loss {loss:.4f} "
                  f"{(step + 1) * a.batch / (time.monotonic() - start):.0f} samples/s",
                  flush=True)
    if step_seconds:
        print(f"median step {np.median(step_seconds):.3f} s over {len(step_seconds)} steps "
              f"({a.batch} examples each)", flush=True)
    return evaluate(session, model, params, loss_fn, test_x, test_y)


def train_step(model, params, loss_fn, x, y):
    """One step on a batch: gradients pushed, parameters pulled. Returns (loss, accuracy)."""
    logits = model(x)
    loss = loss_fn(logits, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    params.push_pull()  # push the gradients, advance the clock, pull the new parameters
    return float(loss), float((logits.argmax(1) == y).float().mean())


def evaluate(session, model, params, loss_fn, test_x, test_y):
    """The test accuracy of the servers' parameters, reported as the job's result."""
    params.pull()
    with torch.no_grad():
        logits = model(test_x)
        test_loss = float(loss_fn(logits, test_y))
        test_accuracy = float((logits.argmax(1) == test_y).float().mean())
    session.report_evaluation(loss=test_loss, accuracy=test_accuracy)
    print(f"test accuracy {100 * test_accuracy:.2f}% test loss {test_loss:.4f} "
          f"({session.recoveries} recoveries)", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ps.Error as e:
        print(f"fashion_torch: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
