#!/usr/bin/python3
"""A plain gRPC client of ps_server built from the .proto (no paramserver code): one call with
the TLS material and token given, for tests/security_test.sh.

Usage: security_client.py STUBS_DIR ADDRESS JOB WORKER_ID TABLE_ID [--ca F --cert F --key F]
                          [--token T] [--call push|describe]
Pushes a zero gradient to the first row of dense TABLE_ID as WORKER_ID of JOB (or only
describes the table). Prints "OK ..." (exit 0), "REFUSED <grpc code>: <message>" (exit 1).
"""
import argparse
import sys


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
    p.add_argument("--call", default="push", choices=["push", "describe"])
    a = p.parse_args()
    sys.path.insert(0, a.stubs)
    import grpc
    from ps.v1 import parameter_server_pb2 as pb
    from ps.v1 import parameter_server_pb2_grpc as pbg
    from ps.v1 import types_pb2

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    if a.ca:
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(a.ca),
            private_key=read(a.key) if a.key else None,
            certificate_chain=read(a.cert) if a.cert else None)
        channel = grpc.secure_channel(a.address, creds)
    else:
        channel = grpc.insecure_channel(a.address)
    metadata = [("authorization", "Bearer " + a.token)] if a.token else None
    stub = pbg.ParameterServerStub(channel)
    try:
        desc = stub.DescribeTable(pb.DescribeTableRequest(table_id=a.table_id), timeout=5,
                                  metadata=metadata)
        if a.call == "describe":
            print(f"OK table {a.table_id}: {desc.spec.num_rows} rows of dim {desc.spec.dim}")
            return 0
        dim = desc.spec.dim
        req = pb.PushRequest(job_id=a.job, worker_id=a.worker_id, request_id=987654321,
                             clock=0)
        req.blocks.append(types_pb2.KeyBlock(table_id=a.table_id,
                                             keys=(0).to_bytes(8, "little"),
                                             values=bytes(4 * dim)))
        stub.Push(req, timeout=5, metadata=metadata)
    except grpc.RpcError as e:
        print(f"REFUSED {e.code().name}: {e.details()}")
        return 1
    print(f"OK pushed 1 row of table {a.table_id} as worker {a.worker_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
