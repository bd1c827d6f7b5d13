#!/usr/bin/python3
"""A direct Pull from one ps_server, as a worker of a job would send it (issue 14 tests).

Usage: ps_pull.py STUBS_DIR ADDRESS JOB TABLE_ID SHARD_EPOCH SERVER_INDEX NUM_SERVERS [OWNERS]
  STUBS_DIR     where `protoc --python_out --grpc_out` put ps/v1/*_pb2*.py (see gen_stubs)
  SHARD_EPOCH   the map the pull claims to route with (0: none; the server's own view decides)
  SERVER_INDEX  which of the job's servers ADDRESS is in that map; NUM_SERVERS: how many
  OWNERS        the map's slot owners, comma-separated (1024 entries); absent: slot s % n
Pulls up to 16 rows of TABLE_ID (a dense table: DescribeTable gives its rows) whose slots the
map gives to SERVER_INDEX. Prints one line: "SERVED <rows> rows ..." (exit 0), "REFUSED
<grpc code>: <message>" (exit 1), or "ERROR ..." (exit 2: no answer, nothing to pull).
"""
import sys

MASK = (1 << 64) - 1
NUM_SLOTS = 1024


def slot_of(table_id, key):  # common/shard_map.h SlotOf
    z = (key + 0x9E3779B97F4A7C15 * (table_id + 1)) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z = z ^ (z >> 31)
    return z % NUM_SLOTS


def main(argv):
    if len(argv) not in (8, 9):
        print(__doc__, file=sys.stderr)
        return 2
    stubs, address, job, table_id, epoch, index, n = argv[1:8]
    table_id, epoch, index, n = int(table_id), int(epoch), int(index), int(n)
    owners = [int(x) for x in argv[8].split(",")] if len(argv) == 9 and argv[8] else None
    sys.path.insert(0, stubs)
    import grpc  # noqa: E402
    from ps.v1 import parameter_server_pb2 as pb  # noqa: E402
    from ps.v1 import parameter_server_pb2_grpc as pbg  # noqa: E402
    from ps.v1 import types_pb2  # noqa: E402

    stub = pbg.ParameterServerStub(grpc.insecure_channel(address))
    try:
        desc = stub.DescribeTable(pb.DescribeTableRequest(table_id=table_id), timeout=5)
    except grpc.RpcError as e:
        print(f"ERROR DescribeTable: {e.code().name}: {e.details()}")
        return 2
    owner = (lambda s: owners[s]) if owners else (lambda s: s % n)
    keys = [k for k in range(desc.spec.num_rows) if owner(slot_of(table_id, k)) == index][:16]
    if not keys:
        print(f"ERROR no row of table {table_id} lies in server {index}'s slots")
        return 2
    req = pb.PullRequest(job_id=job, worker_id=0, clock=0, shard_epoch=epoch)
    req.blocks.append(types_pb2.KeyBlock(
        table_id=table_id, keys=b"".join(k.to_bytes(8, "little") for k in keys)))
    try:
        resp = stub.Pull(req, timeout=5)
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            print(f"ERROR Pull: {e.code().name}: {e.details()}")
            return 2
        print(f"REFUSED {e.code().name}: {e.details()}")
        return 1
    values = sum(len(b.values) for b in resp.blocks) // 4
    print(f"SERVED {len(keys)} rows ({values} floats) of table {table_id}, keys {keys[:4]}..., "
          f"min_clock {resp.min_clock}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
