#!/usr/bin/python3
"""A plain gRPC client built from the .proto (no paramserver code): one call with the TLS
material and token given, for tests/security_test.sh. It plays a hostile tenant too: the calls
below the first two are what a process holding the cluster token (but no node secret and no
admin token) could try against a job that is not its own.

Usage: security_client.py STUBS_DIR ADDRESS JOB WORKER_ID TABLE_ID [--ca F --cert F --key F]
                          [--token T] [--call CALL] [--target HOST:PORT] [--count N]
                          [--dim N] [--source JOB --scheduler HOST:PORT --lookup_token T]
ADDRESS is a ps_server's for the calls from push to restore_from below, the scheduler's for
the others. Push and pushpull send rows of --dim floats; without it they describe the table
first (with --token) to learn its dim.
  push               a zero gradient to the first row of dense TABLE_ID as WORKER_ID of JOB
  describe           only describes the table
  pull               pulls the first row of TABLE_ID as WORKER_ID of JOB
  pushpull           a zero gradient and a pull of the first row in one PushPull
  clock              moves WORKER_ID of JOB to clock 2^40
  create_table       CreateTable in JOB (a dense table of id 3999999)
  checkpoint         Checkpoint of JOB (id 2^40, under the server's checkpoint root's name
                     with a suffix)
  await_checkpoint   AwaitCheckpoint of JOB's checkpoint 1
  configure          ConfigureJob of JOB: every slot unowned, shard epoch 2^40
  restore            Restore of JOB: a rollback to its initial values, shard epoch 2^40
  restore_from       as JOB's program: sets JOB up on the server (ConfigureJob, tables shaped and
                     named as --source's, which start at TABLE_ID), then Restores JOB from
                     --source's latest complete checkpoint (a restore order it wrote itself),
                     and says whether JOB's rows changed. What it needs to know (--source's table
                     shapes and checkpoint files, which an attacker could guess) it looks up with
                     --lookup_token at --scheduler and ADDRESS; what it sends, it sends with
                     --token.
  register_bad       Register a SERVER at --target (an address that does not parse)
  register_taken     Register a SERVER at --target (a live server's address), without its secret
  heartbeat          Heartbeat as node WORKER_ID without its node secret
  begin_checkpoint   BeginCheckpoint of JOB at clock 2^62, as no worker of it
  finish_checkpoint  FinishCheckpoint COMPLETE of JOB's checkpoint TABLE_ID: rows 2^64-1, no
                     server receipts (--nan: NaN write seconds)
  restore_failure    ReportRestoreFailure of JOB's current shard epoch, as no worker of it
  flood              --count registrations of workers as fast as they go
Prints "OK ..." (exit 0), "REFUSED <grpc code>: <message>" (exit 1).
"""
import argparse
import sys


def channel_of(a, grpc, address=None):
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    address = address or a.address
    if a.ca:
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(a.ca),
            private_key=read(a.key) if a.key else None,
            certificate_chain=read(a.cert) if a.cert else None)
        return grpc.secure_channel(address, creds)
    return grpc.insecure_channel(address)


def data_plane(a, channel, metadata):
    from ps.v1 import parameter_server_pb2 as pb
    from ps.v1 import parameter_server_pb2_grpc as pbg
    from ps.v1 import types_pb2
    stub = pbg.ParameterServerStub(channel)
    if a.call == "describe" or (a.call in ("push", "pushpull") and a.dim == 0):
        desc = stub.DescribeTable(pb.DescribeTableRequest(table_id=a.table_id), timeout=5,
                                  metadata=metadata)
        if a.call == "describe":
            return f"table {a.table_id}: {desc.spec.num_rows} rows of dim {desc.spec.dim}"
        a.dim = desc.spec.dim
    first_row = types_pb2.KeyBlock(table_id=a.table_id, keys=(0).to_bytes(8, "little"))
    if a.call == "pull":
        resp = stub.Pull(pb.PullRequest(job_id=a.job, worker_id=a.worker_id, blocks=[first_row]),
                         timeout=5, metadata=metadata)
        return f"pulled {len(resp.blocks[0].values)} bytes of table {a.table_id}"
    if a.call == "clock":
        stub.Clock(pb.ClockRequest(job_id=a.job, worker_id=a.worker_id, clock=2**40), timeout=5,
                   metadata=metadata)
        return f"worker {a.worker_id} of {a.job} moved to clock 2^40"
    if a.call == "create_table":
        spec = types_pb2.TableSpec(table_id=3999999, name="intruder", job_id=a.job,
                                   kind=types_pb2.DENSE, dim=4, num_rows=8)
        spec.optimizer.kind = types_pb2.OptimizerSpec.SGD
        spec.optimizer.learning_rate = 0.1
        stub.CreateTable(pb.CreateTableRequest(spec=spec), timeout=5, metadata=metadata)
        return f"table 3999999 created in {a.job}"
    if a.call == "checkpoint":
        stub.Checkpoint(pb.CheckpointRequest(job_id=a.job, checkpoint_id=2**40, clock=0,
                                             path=a.target, shard_epoch=1),
                        timeout=5, metadata=metadata)
        return f"checkpoint of {a.job} begun at {a.target}"
    if a.call == "await_checkpoint":
        resp = stub.AwaitCheckpoint(pb.AwaitCheckpointRequest(job_id=a.job, checkpoint_id=1),
                                    timeout=5, metadata=metadata)
        return f"checkpoint 1 of {a.job}: done {resp.done}, receipt {resp.receipt[:8]}..."
    if a.call == "configure":
        stub.ConfigureJob(pb.ConfigureJobRequest(job_id=a.job, owned_slots=bytes(128),
                                                 shard_epoch=2**40, worker_ids=[0]),
                          timeout=5, metadata=metadata)
        return f"job {a.job} configured with no slot at shard epoch 2^40"
    if a.call == "restore":
        from ps.v1 import checkpoint_pb2 as ck
        order = ck.RestoreOrder(shard_epoch=2**40, checkpoint_id=0, rollback=True,
                                slots=bytes([255] * 128), reason="hostile")
        stub.Restore(pb.RestoreRequest(job_id=a.job, order=order), timeout=5,
                     metadata=metadata)
        return f"job {a.job} rolled back"
    dim = a.dim
    req = pb.PushRequest(job_id=a.job, worker_id=a.worker_id, request_id=987654321, clock=0)
    req.blocks.append(types_pb2.KeyBlock(table_id=a.table_id, keys=(0).to_bytes(8, "little"),
                                         values=bytes(4 * dim)))
    if a.call == "pushpull":
        stub.PushPull(pb.PushPullRequest(push=req, pull_blocks=[first_row]), timeout=5,
                      metadata=metadata)
        return f"push-pulled 1 row of table {a.table_id} as worker {a.worker_id}"
    stub.Push(req, timeout=5, metadata=metadata)
    return f"pushed 1 row of table {a.table_id} as worker {a.worker_id}"


def restore_from(a, channel, metadata, grpc):
    """JOB's program loads --source's checkpoint into JOB's own tables (see the usage)."""
    from ps.v1 import checkpoint_pb2 as ck
    from ps.v1 import parameter_server_pb2 as pb
    from ps.v1 import parameter_server_pb2_grpc as pbg
    from ps.v1 import scheduler_pb2 as sp
    from ps.v1 import scheduler_pb2_grpc as spg
    from ps.v1 import types_pb2
    lookup = [("authorization", "Bearer " + a.lookup_token)]
    stub = pbg.ParameterServerStub(channel)
    # What it needs to know: the source's tables and its latest complete checkpoint.
    specs = []
    for table_id in range(a.table_id, a.table_id + 16):
        try:
            specs.append(stub.DescribeTable(pb.DescribeTableRequest(table_id=table_id),
                                            timeout=5, metadata=lookup).spec)
        except grpc.RpcError:
            break
    sched = spg.SchedulerStub(channel_of(a, grpc, a.scheduler))
    complete = [c for c in sched.ListCheckpoints(sp.ListCheckpointsRequest(job_id=a.source),
                                                 timeout=5, metadata=lookup).checkpoints
                if c.state == ck.CHECKPOINT_COMPLETE]
    if not specs or not complete:
        raise SystemExit(f"SETUP: {a.source} has {len(specs)} tables from {a.table_id} and "
                         f"{len(complete)} complete checkpoints")
    source = complete[-1]
    # What it sends, as JOB's program: its own job on the server, with tables of the same names.
    everything = bytes([255] * 128)
    stub.ConfigureJob(pb.ConfigureJobRequest(
        job_id=a.job, consistency=types_pb2.ConsistencySpec(mode=types_pb2.ConsistencySpec.ASYNC),
        worker_ids=[a.worker_id], membership_epoch=1, owned_slots=everything, shard_epoch=1,
        caller_worker_id=a.worker_id, caller_clock=-1), timeout=5, metadata=metadata)
    tables = []
    # The table ids the scheduler gives job-N (N * 1000 + 1 on): a job's credential creates no
    # others (server/job_grants.h).
    number = int("".join(c for c in a.job if c.isdigit()) or "0")
    for i, spec in enumerate(specs):
        own = types_pb2.TableSpec()
        own.CopyFrom(spec)
        own.job_id = a.job
        own.table_id = number * 1000 + 1 + i
        stub.CreateTable(pb.CreateTableRequest(spec=own), timeout=5, metadata=metadata)
        if own.kind == types_pb2.DENSE:
            tables.append(own)

    def rows():
        req = pb.PullRequest(job_id=a.job, worker_id=a.worker_id, shard_epoch=1)
        for t in tables:
            keys = b"".join(k.to_bytes(8, "little") for k in range(min(t.num_rows, 4)))
            req.blocks.append(types_pb2.KeyBlock(table_id=t.table_id, keys=keys))
        return [b.values for b in stub.Pull(req, timeout=5, metadata=metadata).blocks]

    before = rows()
    order = ck.RestoreOrder(shard_epoch=1, source_job_id=a.source,
                            checkpoint_id=source.checkpoint_id, clock=source.clock,
                            rollback=True, slots=everything, reason="hostile")
    order.shards.extend(source.shards)
    try:
        resp = stub.Restore(pb.RestoreRequest(job_id=a.job, order=order), timeout=30,
                            metadata=metadata)
    except grpc.RpcError as e:
        changed = rows() != before
        print(f"REFUSED {e.code().name}: {e.details()}; {a.job}'s rows "
              f"{'CHANGED' if changed else 'unchanged'}")
        return 2 if changed else 1
    changed = rows() != before
    print(f"OK {a.job} restored {resp.rows} rows from checkpoint {source.checkpoint_id} of "
          f"{a.source}; its rows {'changed' if changed else 'unchanged'}")
    return 0


def control_plane(a, channel, metadata, grpc):
    from ps.v1 import checkpoint_pb2 as ck
    from ps.v1 import scheduler_pb2 as sp
    from ps.v1 import scheduler_pb2_grpc as spg
    stub = spg.SchedulerStub(channel)
    if a.call in ("register_bad", "register_taken"):
        resp = stub.Register(sp.RegisterRequest(role=sp.SERVER, address=a.target,
                                                hostname="intruder"),
                             timeout=5, metadata=metadata)
        return f"registered as node {resp.node_id} at {a.target}"
    if a.call == "flood":
        for i in range(a.count):
            stub.Register(sp.RegisterRequest(role=sp.WORKER, hostname=f"flood{i}"),
                          timeout=5, metadata=metadata)
        return f"{a.count} registrations accepted"
    if a.call == "heartbeat":
        stub.Heartbeat(sp.HeartbeatRequest(node_id=a.worker_id), timeout=5, metadata=metadata)
        return f"heartbeat accepted for node {a.worker_id}"
    try:  # the job's shard epoch, for the calls below (a job's credential may not ask)
        job = stub.GetJob(sp.GetJobRequest(job_id=a.job), timeout=5, metadata=metadata)
    except grpc.RpcError:
        job = sp.JobInfo(shard_epoch=1)
    if a.call == "begin_checkpoint":
        info = stub.BeginCheckpoint(
            sp.BeginCheckpointRequest(job_id=a.job, clock=2**62, shard_epoch=job.shard_epoch),
            timeout=5, metadata=metadata)
        return f"checkpoint {info.checkpoint_id} begun"
    if a.call == "finish_checkpoint":
        req = sp.FinishCheckpointRequest(job_id=a.job, checkpoint_id=a.table_id,
                                         write_seconds=float("nan") if a.nan else 1.0)
        for _ in range(max(1, len(job.server_addresses))):
            req.shards.append(ck.CheckpointShard(rows=2**64 - 1, bytes=2**64 - 1))
        info = stub.FinishCheckpoint(req, timeout=5, metadata=metadata)
        return f"checkpoint {info.checkpoint_id} is now {info.state}"
    if a.call == "restore_failure":
        stub.ReportRestoreFailure(
            sp.ReportRestoreFailureRequest(job_id=a.job, shard_epoch=job.shard_epoch,
                                           checkpoint_id=1, error="hostile", code=13),
            timeout=5, metadata=metadata)
        return f"restore failure of {a.job} accepted"
    raise ValueError(a.call)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("stubs")
    p.add_argument("address")
    p.add_argument("job")
    p.add_argument("worker_id", type=int)
    p.add_argument("table_id", type=int)
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--token")
    p.add_argument("--target", default="")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--nan", action="store_true")
    p.add_argument("--dim", type=int, default=0)
    p.add_argument("--source", default="")
    p.add_argument("--scheduler", default="")
    p.add_argument("--lookup_token", default="")
    p.add_argument("--call", default="push",
                   choices=["push", "describe", "pull", "pushpull", "clock", "create_table",
                            "checkpoint", "await_checkpoint", "configure", "restore",
                            "restore_from",
                            "register_bad", "register_taken", "heartbeat", "begin_checkpoint",
                            "finish_checkpoint", "restore_failure", "flood"])
    a = p.parse_args()
    sys.path.insert(0, a.stubs)
    import grpc
    channel = channel_of(a, grpc)
    metadata = [("authorization", "Bearer " + a.token)] if a.token else None
    if a.call == "restore_from":
        return restore_from(a, channel, metadata, grpc)
    try:
        if a.call in ("push", "describe", "pull", "pushpull", "clock", "create_table",
                      "checkpoint", "await_checkpoint", "configure", "restore"):
            said = data_plane(a, channel, metadata)
        else:
            said = control_plane(a, channel, metadata, grpc)
    except grpc.RpcError as e:
        print(f"REFUSED {e.code().name}: {e.details()}")
        return 1
    print(f"OK {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
