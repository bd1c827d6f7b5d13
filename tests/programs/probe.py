#!/usr/bin/python3
"""A small program job for the tests of program jobs (tests/program_jobs_test.sh).

It trains nothing useful: each step pulls and pushes every row of the job's declared table "w"
(dense, dim 4; --tables names others to step on too) through paramserver.Session, and reports a
loss. --mode picks how it behaves:
  ok          runs --steps steps, reports an evaluation, exits 0
  crash       after --at steps kills itself with SIGSEGV
  exit3       after --at steps exits with status 3 (after a line on stderr)
  hang        after --at steps sleeps without reporting (progress_timeout ends it)
  nan         after --at steps reports a NaN loss
  undeclared  after --at steps uses a table the job file does not declare
  flood       writes --flood_mb MiB to stderr, then runs like ok
  slow        like ok, sleeping --sleep seconds per step (cancel and kill tests)
  guard       like slow (the sleep before each step's pull), pulling into an array filled with
              NaN first: a pull that returns must have written every row, else the program
              saw an undefined buffer and exits 5; StepInterrupted (a server died) skips the
              rest of the step; prints "probe: N steps interrupted" at the end
  data        a job of dynamic data assignment: steps on the batches the scheduler hands out
              (session.batches of --examples examples in ranges of --batch), sleeping
              --sleep seconds per step on the worker of id --slow_worker (else none), and
              appends "epoch index example..." per batch to --record (suffixed .<worker id>);
              --crash_at=N: the worker of id 0 SIGKILLs itself when handed its N-th batch
              (before stepping on it) in its first start
--checkpoint_at=N asks for a checkpoint at step N (on the worker of rank 0).
Every mode prints "probe pid N" first (tests find the process by it).
"""
import argparse
import os
import signal
import sys
import time

import numpy as np

import paramserver as ps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="ok")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--at", type=int, default=5)
    p.add_argument("--flood_mb", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--examples", type=int, default=1000)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--slow_worker", type=int, default=-1)
    p.add_argument("--record", default="")
    p.add_argument("--crash_at", type=int, default=-1)
    p.add_argument("--checkpoint_at", type=int, default=-1,
                   help="at this step, ask for a checkpoint (session.request_checkpoint)")
    p.add_argument("--tables", default="w",
                   help="comma-separated declared tables each step pulls and pushes (modes ok, "
                        "slow; the others use the first only); the first reports the loss")
    a = p.parse_args()
    print(f"probe pid {os.getpid()} mode {a.mode}", flush=True)
    if a.mode == "flood":
        chunk = ("x" * 1023 + "\n").encode()
        for _ in range(a.flood_mb * 1024):
            sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
    session = ps.Session.from_env()
    names = a.tables.split(",")
    w = session.table(names[0])
    keys = np.arange(w.rows, dtype=np.uint64)
    if a.mode == "data":
        return read_batches(session, w, keys, a)
    if a.mode == "guard":
        return guard_steps(session, w, keys, a)
    stepped = [(w, keys)] + [(t, np.arange(t.rows, dtype=np.uint64))
                             for t in (session.table(name) for name in names[1:])]
    for step in session.steps(a.steps):
        if step == a.checkpoint_at and session.rank == 0:
            session.request_checkpoint()
        if step == a.at:
            if a.mode == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if a.mode == "exit3":
                print("probe: giving up with status 3", file=sys.stderr, flush=True)
                sys.exit(3)
            if a.mode == "hang":
                time.sleep(3600)
            if a.mode == "nan":
                session.report(loss=float("nan"))
            if a.mode == "undeclared":
                session.client.create_table("not_declared", kind="sparse", dim=4)
        losses = []
        for t, t_keys in stepped:
            values = t.pull(t_keys)
            t.push(t_keys, np.full_like(values, 0.01))
            losses.append(float(np.abs(values).mean()))
        session.report(loss=losses[0], samples=len(keys), probe=step)
        if a.sleep > 0:
            time.sleep(a.sleep)
    session.report_evaluation(accuracy=0.5, probe_done=1)
    print("probe done", flush=True)
    return 0


def guard_steps(session, w, keys, a):
    """Never uses a pulled array that the pull did not fill (tests/step_interrupt_test.sh)."""
    interrupted = 0
    for step in session.steps(a.steps):
        time.sleep(a.sleep)  # a server killed now fails this step's pull
        values = np.full((len(keys), w.dim), np.nan, dtype=np.float32)
        try:
            w.pull(keys, out=values)
            pulled = True
            if not np.isnan(values).any():
                w.push(keys, np.full_like(values, 0.01))
        except ps.StepInterrupted as e:
            pulled = False
            interrupted += 1
            print(f"probe: step {step} interrupted: {e}", flush=True)
            assert session.step_interrupted, "StepInterrupted but step_interrupted is False"
            session.report(loss=float("nan"))  # ignored in an interrupted step
        if pulled and np.isnan(values).any():
            print(f"probe: step {step}: a pull returned with {int(np.isnan(values).sum())} "
                  "values it did not write (an undefined buffer)", file=sys.stderr, flush=True)
            return 5
        if not pulled:
            continue
        session.report(loss=float(np.abs(values).mean()), samples=len(keys), probe=step)
    session.report_evaluation(accuracy=0.5, probe_done=1)
    print(f"probe: {interrupted} steps interrupted, {session.recoveries} recoveries", flush=True)
    print("probe done", flush=True)
    return 0


def read_batches(session, w, keys, a):
    sleep = a.sleep if session.worker_id == a.slow_worker else 0.0
    record = open(f"{a.record}.{session.worker_id}", "a") if a.record else None
    first_start = not os.path.exists(f"{a.record}.crashed")
    n = 0
    for batch in session.batches(a.examples, a.batch):
        if n == a.crash_at and session.worker_id == 0 and first_start:
            open(f"{a.record}.crashed", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        values = w.pull(keys)
        w.push(keys, np.full_like(values, 0.01))
        session.report(loss=float(np.abs(values).mean()), samples=len(batch))
        if record:
            record.write(f"{batch.epoch} {batch.index} "
                         + " ".join(str(int(e)) for e in batch.examples) + "\n")
            record.flush()
        n += 1
        if sleep > 0:
            time.sleep(sleep)
    session.report_evaluation(accuracy=0.5, probe_done=1)
    print(f"probe done: {n} batches", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
