#!/usr/bin/python3
"""A click-through-rate model in PyTorch whose parameters live in the parameter servers.

Wide & deep over the data of ctr_data.py (26 categorical fields, millions of possible ids with
power-law frequencies, 8 dense features, labels from a hidden teacher):
  - wide: one weight per id, in a sparse table (`ctr_wide`, dim 1, Adagrad);
  - deep: an 8-float embedding per id in a sparse table (`ctr_emb`, dim 8, Adagrad); the 26
    embeddings, their 325 pairwise dot products (the field interactions, as in DLRM) and the
    dense features go into an MLP 541-64-32-1 whose weights are dense tables (Adam), through
    paramserver.torch.Embedding and paramserver.torch.DenseParameters.
Each worker trains on its own stream of the data (worker w reads batches (w, step)); the
servers apply the optimizers. At the end worker 0 prints the held-out AUC beside the
teacher's (the best any model can reach on this data).

    ctr_torch.py --servers=host:port,host:port [--worker=0 --workers=1]
                 [--consistency=sync|ssp|async] [--steps=400] [--batch=1024] [--device=auto]
    ctr_torch.py --session [--steps=400] [--batch=1024] [--device=auto]

--device: where the model computes, "cpu", "cuda" (cuda:0), "cuda:N" or "auto" (a CUDA device
when PyTorch sees one, else the CPU). The program is the same on both: the model and each
batch move with .to(device); paramserver.torch brings the pulled rows and parameters to the
device through pinned host buffers and the gradients back. After each step the embeddings
prefetch the next batch's rows (Embedding.prefetch), so its pull overlaps the making of the
next batch.

With --session it is a program job's program (deploy/jobs/ctr_torch.textproto): the worker
daemon names the job, the worker and the servers, the job file declares the tables (with the
optimizers above), the loop is paramserver.Session.steps() (it resumes by itself after a
server is lost), and the progress (loss, samples/s, keys pulled per second, the share of the
step time spent waiting on the servers) and the result (auc, teacher_auc) go to psctl status.

Prints progress lines ("step 100/400 loss 0.44 ...") and, on worker 0, a last line
"auc 0.8812 teacher_auc 0.8990". With --digest it also reports params_digest, 48 bits of a hash
of the parameters the held-out set reads (tests/tier_job_test.sh compares runs with it).
Exits 0 on success, 1 on an error.
"""

import argparse
import hashlib
import os
import sys
import time

import numpy as np
import torch

import paramserver as ps
import paramserver.torch as pst

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctr_data  # noqa: E402


# Adagrad for the sparse tables. The loss is a batch mean, so a row's gradient is about
# 1/batch of an example's: against the server's default initial accumulator (0.1) the squared
# gradients of most rows would stay negligible all run, leaving plain SGD steps of
# lr * g / sqrt(0.1), far too small; a tiny accumulator lets Adagrad scale each row's steps
# by that row's own gradients from its first update.
SPARSE_OPTIMIZER = ps.Optimizer.adagrad(0.1, initial_accumulator=1e-5)
DENSE_OPTIMIZER = ps.Optimizer.adam(0.002)


class WideAndDeep(torch.nn.Module):
    def __init__(self, client, emb_dim=8, hidden=(64, 32)):
        super().__init__()
        self.wide = pst.Embedding(client, "ctr_wide", 1, initializer=ps.Initializer.zeros(),
                                  optimizer=SPARSE_OPTIMIZER)
        self.emb = pst.Embedding(client, "ctr_emb", emb_dim,
                                 initializer=ps.Initializer.normal(0.05, seed=7),
                                 optimizer=SPARSE_OPTIMIZER)
        fields = ctr_data.NUM_FIELDS
        # (2, 325): f < g. A buffer, so that .to(device) moves it with the model.
        self.register_buffer("pairs", torch.triu_indices(fields, fields, offset=1))
        layers = []
        width = fields * emb_dim + self.pairs.shape[1] + ctr_data.NUM_DENSE
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        layers.append(torch.nn.Linear(width, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, keys, dense):
        keys = _ids(keys).to(dense.device)  # the embeddings answer on the ids' device
        wide = self.wide(keys).sum(dim=(1, 2))
        emb = self.emb(keys)  # (n, fields, emb_dim)
        dots = torch.bmm(emb, emb.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return wide + self.mlp(torch.cat([emb.flatten(1), dots, dense], dim=1))[:, 0]

    def prefetch(self, keys, device):
        """Starts pulling the embedding rows of a later batch's `keys` in the background."""
        keys = _ids(keys).to(device)
        self.wide.prefetch(keys)
        self.emb.prefetch(keys)


def _ids(keys):
    """The ids tensor of a batch's keys (uint64, non-negative: field << 40 | id)."""
    return torch.from_numpy(keys.view(np.int64))


def train_step(model, dense_params, data, stream, step, batch, loss_fn, device):
    """One step of stream `stream`'s batch `step` on `device`: forward, backward (the
    embeddings' backward pushes their rows' gradients), then the MLP's push_pull (push its
    gradients, advance the clock, pull it), then the prefetch of the next batch's rows: after
    the clock has advanced, so that the prefetched rows are those a pull would see (in sync
    mode, every worker's updates of this step). Returns the batch's loss."""
    ids, dense, labels = data.batch(stream, step, batch)
    keys = ctr_data.keys_of(ids)
    logits = model(keys, torch.from_numpy(dense).to(device))
    loss = loss_fn(logits, torch.from_numpy(labels).to(device))
    model.mlp.zero_grad(set_to_none=True)
    loss.backward()
    dense_params.push_pull()
    model.prefetch(ctr_data.keys_of(data.batch(stream, step + 1, batch)[0]), device)
    return float(loss)


def train(model, dense_params, data, worker, steps, batch, log_every, device):
    """The training loop: `steps` batches of worker `worker`'s stream, one clock tick each."""
    loss_fn = torch.nn.BCEWithLogitsLoss()
    start = time.monotonic()
    running = 0.0
    comm0 = pst.communication()
    for step in range(steps):
        running += train_step(model, dense_params, data, worker, step, batch, loss_fn, device)
        if (step + 1) % log_every == 0 or step + 1 == steps:
            elapsed = time.monotonic() - start
            comm = pst.communication()
            print(f"step {step + 1}/{steps} loss {running / (step % log_every + 1):.4f} "
                  f"samples/s {(step + 1) * batch / elapsed:.0f} "
                  f"keys/s {(comm['keys_pulled'] - comm0['keys_pulled']) / elapsed:.0f} "
                  f"communication {100 * (comm['seconds'] - comm0['seconds']) / elapsed:.0f}%",
                  flush=True)
            running = 0.0


def train_session(session, model, dense_params, data, steps, batch, log_every, device):
    """The same loop as a program job's: Session.steps() gives the steps (it resumes after a
    restart or a lost server by itself), and each step's figures go to psctl status."""
    loss_fn = torch.nn.BCEWithLogitsLoss()
    start, comm0, last = time.monotonic(), pst.communication(), (time.monotonic(), 0.0)
    resync = False
    for step in session.steps(steps):
        # Each worker's stream is its rank's: a worker that joins in a dead one's place goes on
        # with that stream, and a redone step (after a rollback) reads the same batch again.
        try:
            if resync:  # the last step was cut short: its pull left the MLP incomplete
                dense_params.pull()
                resync = False
            loss = train_step(model, dense_params, data, session.rank, step, batch, loss_fn,
                              device)
        except ps.StepInterrupted:
            resync = True  # a server died: steps() recovers and says which step to run
            continue
        now, comm = time.monotonic(), pst.communication()
        elapsed = now - start
        session.report(loss=loss, samples=batch,
                       keys_pulled_per_s=(comm["keys_pulled"] - comm0["keys_pulled"]) / elapsed,
                       communication_share=(comm["seconds"] - comm0["seconds"]) / elapsed)
        if (step + 1) % log_every == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps} loss {loss:.4f} "
                  f"samples/s {(step + 1) * batch / elapsed:.0f} "
                  f"keys/s {(comm['keys_pulled'] - comm0['keys_pulled']) / elapsed:.0f} "
                  f"communication {100 * (comm['seconds'] - comm0['seconds']) / elapsed:.0f}%",
                  flush=True)


def evaluate(model, data, examples, device):
    """(model's AUC, teacher's AUC) on the held-out set of `examples` examples."""
    ids, dense, labels = test = data.test_set(examples)
    scores = []
    with torch.no_grad():
        for i in range(0, len(ids), 4096):
            scores.append(model(ctr_data.keys_of(ids[i:i + 4096]),
                                torch.from_numpy(dense[i:i + 4096]).to(device)).cpu().numpy())
    return ctr_data.auc(labels, np.concatenate(scores)), data.teacher_auc(test)


def parameter_digest(model, data, examples, device):
    """A 48-bit digest (an integer, exact as a float) of the parameters the held-out set reads:
    the wide and deep rows of its keys, pulled in order, and the MLP's values. Two runs whose
    digests are equal ended with these parameters bit for bit equal (barring a 2^-48 chance)."""
    ids = data.test_set(examples)[0]
    h = hashlib.sha256()
    with torch.no_grad():
        for i in range(0, len(ids), 4096):
            keys = _ids(ctr_data.keys_of(ids[i:i + 4096])).to(device)
            h.update(model.wide(keys).cpu().numpy().tobytes())
            h.update(model.emb(keys).cpu().numpy().tobytes())
        for _, p in sorted(model.mlp.named_parameters()):
            h.update(p.detach().cpu().numpy().tobytes())
    return int.from_bytes(h.digest()[:6], "big")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", help="host:port,... in shard-map order")
    p.add_argument("--session", action="store_true",
                   help="a program job's program: the worker daemon names everything else")
    p.add_argument("--job_id", default="ctr")
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--consistency", default="sync", choices=["sync", "ssp", "async"])
    p.add_argument("--staleness", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--test_examples", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log_every", type=int, default=100)
    p.add_argument("--device", default="auto",
                   help="cpu, cuda, cuda:N or auto (cuda when PyTorch sees a device, else cpu)")
    p.add_argument("--digest", action="store_true",
                   help="also report params_digest: 48 bits of a hash of the parameters the "
                   "held-out set reads (tests compare two runs with it)")
    a = p.parse_args()
    if not a.session and not a.servers:
        p.error("give --servers (standalone) or --session (a program job)")
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                          if a.device == "auto" else a.device)

    data = ctr_data.CtrData(a.seed)
    session = ps.Session.from_env() if a.session else None
    client = session.client if session else ps.Client(
        a.servers.split(","), job_id=a.job_id, worker_id=a.worker, num_workers=a.workers,
        consistency=a.consistency, staleness=a.staleness)
    model = WideAndDeep(client).to(device)
    dense_params = pst.DenseParameters(client, model.mlp, optimizer=DENSE_OPTIMIZER,
                                       prefix="ctr_mlp/", seed=a.seed)
    if session:
        train_session(session, model, dense_params, data, a.steps, a.batch, a.log_every, device)
        dense_params.pull()
    else:
        train(model, dense_params, data, a.worker, a.steps, a.batch, a.log_every, device)
    if session or a.worker == 0:
        auc, teacher_auc = evaluate(model, data, a.test_examples, device)
        print(f"auc {auc:.4f} teacher_auc {teacher_auc:.4f}", flush=True)
        digest = {}
        if a.digest:
            digest["params_digest"] = parameter_digest(model, data, a.test_examples, device)
            print(f"params_digest {digest['params_digest']:012x}", flush=True)
        if session:
            session.report_evaluation(auc=auc, teacher_auc=teacher_auc, **digest)
    if not session:
        client.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ps.Error as e:
        print(f"ctr_torch: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
