#!/usr/bin/python3
"""One worker of a short sync job whose dense table travels with a codec (issue 33 tests).

Usage: codec_train.py SERVERS JOB WORKER NUM_WORKERS CODEC STEPS
  SERVERS  comma-separated host:port of the parameter servers
  CODEC    none | fp16 (pushes and pulls) | topk (pushes, 1%; pulls fp16) | sign (pushes;
           pulls fp16) | int8 (pushes topk 1%; pulls int8) | dgc (int8's, with momentum
           correction 0.9 and a warm-up of 2 steps) | delta (dgc's, with delta pulls)
Logistic regression on synthetic data: 65536 features (a dense table of 256 rows of 256), the
label decided by the first 64 (the others small noise); each worker draws its own batches (seeded). Prints one line:
"RESULT codec=... steps=... seconds=... loss0=... loss=... accuracy=..." (accuracy on a held-out
set, after the last step). Needs the paramserver package on PYTHONPATH.
"""
import sys
import time

import numpy as np

import paramserver as ps

ROWS, DIM, SIGNAL = 256, 256, 64
NOISE = 1.0 / 64
BATCH = 64
CODECS = {
    "none": {},
    "fp16": {"push_codec": "fp16", "pull_codec": "fp16"},
    "topk": {"push_codec": "topk", "topk_ratio": 0.01, "pull_codec": "fp16"},
    "sign": {"push_codec": "sign", "pull_codec": "fp16"},
    "int8": {"push_codec": "topk", "topk_ratio": 0.01, "pull_codec": "int8"},
    "dgc": {"push_codec": "topk", "topk_ratio": 0.01, "topk_momentum": 0.9,
            "topk_warmup_steps": 2, "pull_codec": "int8"},
    "delta": {"push_codec": "topk", "topk_ratio": 0.01, "topk_momentum": 0.9,
              "topk_warmup_steps": 2, "pull_codec": "int8", "pull_delta": True},
}


def batch(rng, w_true, n):
    """The first SIGNAL features (std 1) decide the label; the others are small noise."""
    x = rng.standard_normal((n, ROWS * DIM), dtype=np.float32) * NOISE
    x[:, :SIGNAL] /= NOISE
    y = (x[:, :SIGNAL] @ w_true > 0).astype(np.float32)
    return x, y


def loss_and_grad(w, x, y):
    z = np.clip(x @ w, -30, 30)
    p = 1.0 / (1.0 + np.exp(-z))
    loss = float(np.mean(np.logaddexp(0, z) - y * z))
    return loss, (x.T @ (p - y) / len(y)).astype(np.float32)


def main(argv):
    if len(argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    servers, job, worker, workers, codec, steps = argv[1:]
    worker, workers, steps = int(worker), int(workers), int(steps)
    client = ps.Client(servers.split(","), job_id=job, worker_id=worker, num_workers=workers,
                       consistency="sync")
    table = client.create_table("w", kind="dense", rows=ROWS, dim=DIM,
                                optimizer=ps.Optimizer.sgd(1.0), **CODECS[codec])
    keys = np.arange(ROWS, dtype=np.uint64)
    w_true = np.random.default_rng(7).standard_normal(SIGNAL).astype(np.float32)
    rng = np.random.default_rng(100 + worker)
    w = table.pull(keys).reshape(-1)
    start = time.monotonic()
    loss0 = None
    for _ in range(steps):
        x, y = batch(rng, w_true, BATCH)
        loss, grad = loss_and_grad(w, x, y)
        loss0 = loss if loss0 is None else loss0
        [w] = client.push_pull(push=[(table, keys, grad.reshape(ROWS, DIM) / workers)],
                               pull=[(table, keys)])
        w = w.reshape(-1)
    seconds = time.monotonic() - start
    x, y = batch(np.random.default_rng(999), w_true, 2000)
    loss, _ = loss_and_grad(w, x, y)
    accuracy = float(np.mean((x @ w > 0) == (y > 0)))
    print(f"RESULT codec={codec} steps={steps} seconds={seconds:.2f} loss0={loss0:.4f} "
          f"loss={loss:.4f} accuracy={accuracy:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
