#!/usr/bin/python3
"""A small program job for the tests of program jobs (tests/program_jobs_test.sh).

It trains nothing useful: each step pulls and pushes rows of the job's declared table "w"
(dense, dim 4) through paramserver.Session, and reports a loss. --mode picks how it behaves:
  ok          runs --steps steps, reports an evaluation, exits 0
  crash       after --at steps kills itself with SIGSEGV
  exit3       after --at steps exits with status 3 (after a line on stderr)
  hang        after --at steps sleeps without reporting (progress_timeout ends it)
  nan         after --at steps reports a NaN loss
  undeclared  after --at steps uses a table the job file does not declare
  flood       writes --flood_mb MiB to stderr, then runs like ok
  slow        like ok, sleeping --sleep seconds per step (cancel and kill tests)
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
    p.add_argument("--checkpoint_at", type=int, default=-1,
                   help="at this step, ask for a checkpoint (session.request_checkpoint)")
    a = p.parse_args()
    print(f"probe pid {os.getpid()} mode {a.mode}", flush=True)
    if a.mode == "flood":
        chunk = ("x" * 1023 + "\n").encode()
        for _ in range(a.flood_mb * 1024):
            sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
    session = ps.Session.from_env()
    w = session.table("w")
    keys = np.arange(w.rows, dtype=np.uint64)
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
        values = w.pull(keys)
        w.push(keys, np.full_like(values, 0.01))
        session.report(loss=float(np.abs(values).mean()), samples=len(keys), probe=step)
        if a.sleep > 0:
            time.sleep(a.sleep)
    session.report_evaluation(accuracy=0.5, probe_done=1)
    print("probe done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
