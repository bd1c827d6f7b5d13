#!/usr/bin/python3
"""A plain gRPC client of ps_server built from the .proto (no paramserver code), for
tests/wire_compat_test.sh: the server hand-builds its Pull and PushPull answers and the C++
client hand-encodes its requests (common/wire.h); a client made from the .proto by protoc must
see no difference.

Usage: wire_compat_client.py STUBS_DIR ADDRESS
Checks, in one ASYNC job (worker 0), a dense table of 4096 rows x 256 (4 MiB: gRPC cuts it into
many slices) and a sparse table of dim 64, with SGD (learning rate 0.5) from zeros:
  - Push then Pull of every dense row: each value is -0.5 x the gradient, exactly;
  - PushPull: the push applied, the pull at the new clock sees it;
  - Pull of new sparse keys: rows of zeros, in request order; a pull of no keys;
  - garbage bytes as a Pull, Push or PushPull request: INVALID_ARGUMENT, and the rows are intact.
Prints one line per check; exit 0 if all passed.
"""
import struct
import sys


def main():
    stubs, address = sys.argv[1], sys.argv[2]
    sys.path.insert(0, stubs)
    import grpc
    from ps.v1 import parameter_server_pb2 as pb
    from ps.v1 import parameter_server_pb2_grpc as pbg
    from ps.v1 import types_pb2 as t

    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1),
                                                      ("grpc.max_send_message_length", -1)])
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = pbg.ParameterServerStub(channel)
    job, rows, dim, sdim = "wire-compat", 4096, 256, 64
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    stub.ConfigureJob(pb.ConfigureJobRequest(
        job_id=job, consistency=t.ConsistencySpec(mode=t.ConsistencySpec.ASYNC),
        worker_ids=[0], membership_epoch=1), timeout=10)
    sgd = t.OptimizerSpec(kind=t.OptimizerSpec.SGD, learning_rate=0.5)
    stub.CreateTable(pb.CreateTableRequest(spec=t.TableSpec(
        table_id=71, name="compat_dense", job_id=job, kind=t.DENSE, dim=dim, num_rows=rows,
        optimizer=sgd)), timeout=10)
    stub.CreateTable(pb.CreateTableRequest(spec=t.TableSpec(
        table_id=72, name="compat_sparse", job_id=job, kind=t.SPARSE, dim=sdim,
        optimizer=sgd)), timeout=10)

    keys = struct.pack("<%dQ" % rows, *range(rows))
    grad = [float((i % 1000) - 500) for i in range(rows * dim)]  # halves are exact
    gbytes = struct.pack("<%df" % len(grad), *grad)
    stub.Push(pb.PushRequest(job_id=job, worker_id=0, request_id=1, clock=0,
                             blocks=[t.KeyBlock(table_id=71, keys=keys, values=gbytes)]),
              timeout=30)
    r = stub.Pull(pb.PullRequest(job_id=job, worker_id=0, clock=0,
                                 blocks=[t.KeyBlock(table_id=71, keys=keys)]), timeout=30)
    got = struct.unpack("<%df" % (rows * dim), r.blocks[0].values)
    check(len(r.blocks) == 1 and r.blocks[0].table_id == 71 and
          all(g == -0.5 * x for g, x in zip(got, grad)),
          "dense push then pull of %d rows x %d: values = -0.5 x gradient" % (rows, dim))

    # Rows in reverse order: the answer follows the request's key order.
    rev = struct.pack("<%dQ" % rows, *reversed(range(rows)))
    r = stub.PushPull(pb.PushPullRequest(
        push=pb.PushRequest(job_id=job, worker_id=0, request_id=2, clock=0,
                            blocks=[t.KeyBlock(table_id=71, keys=keys, values=gbytes)]),
        advance_clock=True, clock_parts=1, pull_blocks=[t.KeyBlock(table_id=71, keys=rev)]),
        timeout=30)
    got = struct.unpack("<%df" % (rows * dim), r.blocks[0].values)
    ok = True
    for k in (0, 1, rows // 2, rows - 1):
        want = [-1.0 * x for x in grad[k * dim:(k + 1) * dim]]
        ok = ok and list(got[(rows - 1 - k) * dim:(rows - k) * dim]) == want
    check(ok, "pushpull: both pushes applied, rows answered in the request's (reversed) order")

    skeys = [2**40 + 7, 3, 2**63 + 1]
    r = stub.Pull(pb.PullRequest(job_id=job, worker_id=0, clock=1, blocks=[
        t.KeyBlock(table_id=72, keys=struct.pack("<3Q", *skeys)),
        t.KeyBlock(table_id=71, keys=b"")]), timeout=30)
    check(len(r.blocks) == 2 and r.blocks[0].values == bytes(3 * sdim * 4) and
          r.blocks[1].table_id == 71 and r.blocks[1].values == b"",
          "sparse pull of 3 new keys: rows of zeros; an empty block answers empty")

    for method in ("Pull", "Push", "PushPull"):
        raw = channel.unary_unary("/ps.v1.ParameterServer/" + method,
                                  request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
        try:
            raw(b"\x0a\xff\xff\xff\x0f garbage", timeout=10)
            check(False, "garbage %s request refused" % method)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in e.details(),
                  "garbage %s request: %s %s" % (method, e.code().name, e.details()))
    r = stub.Pull(pb.PullRequest(job_id=job, worker_id=0, clock=1,
                                 blocks=[t.KeyBlock(table_id=71, keys=keys[:8 * 4])]), timeout=30)
    got = struct.unpack("<%df" % (4 * dim), r.blocks[0].values)
    check(list(got) == [-1.0 * x for x in grad[:4 * dim]],
          "the server still serves and the rows are intact")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
