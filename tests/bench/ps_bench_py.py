#!/usr/bin/python3
"""ps_bench's Python line: pushes or pulls one dense table through the paramserver binding.

Run by ps_bench (workloads py_push_dense, py_pull_dense) against the servers and table it set
up, so the figure sits beside the C++ client's in the same run. Prints one line:
"ops=N seconds=S" and then one request latency per line in microseconds.
"""
import argparse
import sys
import time

import numpy as np
import paramserver


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--servers", required=True, help="host:port,... in shard-map order")
    p.add_argument("--job_id", required=True)
    p.add_argument("--worker_id", type=int, default=0)
    p.add_argument("--table_id", type=int, required=True, help="a dense table ps_bench created")
    p.add_argument("--op", choices=["push", "pull"], required=True)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--min_ops", type=int, default=1)
    p.add_argument("--max_part_bytes", type=int, default=2 << 20)
    p.add_argument("--channels_per_server", type=int, default=2)
    a = p.parse_args()
    paramserver.tune_process()  # as ps_bench and the daemons do: the figures compare

    client = paramserver.Client(a.servers.split(","), job_id=a.job_id, worker_id=a.worker_id,
                                configure_job=False, max_part_bytes=a.max_part_bytes,
                                channels_per_server=a.channels_per_server)
    table = client.table(a.table_id)
    keys = np.arange(table.rows, dtype=np.uint64)
    grads = np.full((table.rows, table.dim), 1e-3, dtype=np.float32)
    out = np.zeros((table.rows, table.dim), dtype=np.float32)
    if a.op == "push":
        issue = lambda: client.push(table, keys, grads)
    else:
        issue = lambda: client.pull(table, keys, out=out)
    issue()  # warm-up, as ps_bench's clients do
    latencies = []
    start = time.perf_counter()
    end = start + a.seconds
    while time.perf_counter() < end or len(latencies) < a.min_ops:
        t0 = time.perf_counter()
        issue()
        latencies.append((time.perf_counter() - t0) * 1e6)
    seconds = time.perf_counter() - start
    client.close()
    print(f"ops={len(latencies)} seconds={seconds:.6f}")
    print("\n".join(f"{v:.1f}" for v in latencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
