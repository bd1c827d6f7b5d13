#!/usr/bin/python3
"""A hostile program job (tests/isolation_test.sh): a program of job A that tries to reach job B.

It holds what a worker daemon gives any program (its job's credential in PS_CLUSTER_TOKEN, its
own agent in PS_AGENT) and what the test tells it about B (paths and a pid an attacker could
find or guess). Each attempt prints one line, "hostile: REFUSED <attempt>: <how>" or
"hostile: OPEN <attempt>: <what it got>", then it exits 0.

  --server HOST:PORT        a parameter server
  --squat_table N           CreateTable of its own job with table id N (a later job's)
  --squat_checkpoint PATH   Checkpoint of its own job into PATH (another job's folder)
  --token_file PATH         read the worker daemon's cluster token file
  --tls_key_file PATH       read the worker daemon's TLS key
  --environ_pid PID         read /proc/PID/environ of B's program (its credential)
  --agent PATH              call B's agent socket (GetAssignment)
  --checkpoint_dir PATH     read B's checkpoint files (a shard folder)
  --work_dir PATH           list B's program's folder
  --leave_behind SECONDS    first leave a process behind (double fork, a session of its own)
                            that sleeps this long: the worker must end it with the run
With PS_TLS_CA (and PS_TLS_CERT, PS_TLS_KEY) set it dials the server with TLS, as the client
library would. Needs the gRPC stubs of proto/ps/v1 on PYTHONPATH (the test makes them).
"""
import argparse
import os
import socket
import sys
import time

import grpc

from ps.v1 import agent_pb2, agent_pb2_grpc
from ps.v1 import parameter_server_pb2 as pb
from ps.v1 import parameter_server_pb2_grpc as pb_grpc
from ps.v1 import types_pb2


def say(verdict, what, how):
    print(f"hostile: {verdict} {what}: {how}", flush=True)


def rpc(what, call):
    try:
        call()
        say("OPEN", what, "the call was served")
    except grpc.RpcError as e:
        say("REFUSED", what, f"{e.code().name}: {e.details()}")


def read(what, path, listing=False):
    try:
        if listing:
            got = f"{len(os.listdir(path))} entries"
        else:
            with open(path, "rb") as f:
                got = f"{len(f.read())} bytes"
        say("OPEN", what, f"read {path}: {got}")
    except OSError as e:
        say("REFUSED", what, f"{type(e).__name__}: {e.strerror}")


def leave_behind(seconds):
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(seconds)
            os._exit(0)
        os._exit(0)
    os.close(w)
    pid = os.read(r, 32).decode()
    os.wait()
    print(f"hostile: left pid {pid} behind", flush=True)


def main():
    p = argparse.ArgumentParser()
    for flag in ("server", "token_file", "tls_key_file", "agent", "checkpoint_dir", "work_dir",
                 "squat_checkpoint"):
        p.add_argument("--" + flag, default="")
    p.add_argument("--squat_table", type=int, default=0)
    p.add_argument("--environ_pid", type=int, default=0)
    p.add_argument("--leave_behind", type=int, default=0)
    a = p.parse_args()
    job = os.environ["PS_JOB_ID"]
    metadata = [("authorization", "Bearer " + os.environ.get("PS_CLUSTER_TOKEN", ""))]
    print(f"hostile: job {job}, uid {os.getuid()}, gid {os.getgid()}, groups {os.getgroups()}",
          flush=True)
    if os.environ.get("PS_TLS_CA"):  # the copies its worker made for it
        def pem(name):
            path = os.environ.get(name, "")
            return open(path, "rb").read() if path else None
        channel = grpc.secure_channel(a.server, grpc.ssl_channel_credentials(
            pem("PS_TLS_CA"), pem("PS_TLS_KEY"), pem("PS_TLS_CERT")))
    else:
        channel = grpc.insecure_channel(a.server)
    stub = pb_grpc.ParameterServerStub(channel)
    if a.leave_behind:
        leave_behind(a.leave_behind)
    if a.squat_table:
        spec = types_pb2.TableSpec(table_id=a.squat_table, name="squat", job_id=job,
                                   kind=types_pb2.DENSE, dim=4, num_rows=8)
        rpc("table_squat", lambda: stub.CreateTable(pb.CreateTableRequest(spec=spec), timeout=10,
                                                    metadata=metadata))
    if a.squat_checkpoint:
        rpc("checkpoint_squat", lambda: stub.Checkpoint(
            pb.CheckpointRequest(job_id=job, checkpoint_id=2, clock=0, path=a.squat_checkpoint,
                                 shard_epoch=1), timeout=10, metadata=metadata))
    if a.token_file:
        read("token_file", a.token_file)
    if a.tls_key_file:
        read("tls_key", a.tls_key_file)
    if a.environ_pid:
        read("environ", f"/proc/{a.environ_pid}/environ")
    if a.agent:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(a.agent)
            how = "connected"
        except OSError as e:
            how = f"connect: {e.strerror}"
        finally:
            s.close()
        agent = agent_pb2_grpc.WorkerAgentStub(grpc.insecure_channel("unix:" + a.agent))
        try:
            agent.GetAssignment(agent_pb2.GetAssignmentRequest(), timeout=10)
            say("OPEN", "agent", f"{how}; GetAssignment answered")
        except grpc.RpcError as e:
            say("REFUSED", "agent", f"{how}; GetAssignment {e.code().name}")
    if a.checkpoint_dir:
        read("checkpoint_files", a.checkpoint_dir, listing=True)
        read("checkpoint_file", os.path.join(a.checkpoint_dir, "CURRENT"))
    if a.work_dir:
        read("work_dir", a.work_dir, listing=True)
    print("hostile: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
