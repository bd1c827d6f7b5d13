#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Run from anywhere: python3 tests/fuzz/make_corpus.py (needs protoc, which the build needs
too). Deterministic: running it again rewrites the same files. Regression inputs of fixed
findings (corpus/<target>/regression-*) are kept as they are.
"""
import os
import shutil
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def encode(message, text):
    """Serializes the textproto `text` of ps.v1.`message` with protoc --encode."""
    return subprocess.run(
        ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--encode=ps.v1." + message,
         "ps/v1/parameter_server.proto", "ps/v1/checkpoint.proto", "ps/v1/job.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def field(data):
    """A field of fuzz_input.h: [length u16 LE][bytes]."""
    assert len(data) < 65536
    return struct.pack("<H", len(data)) + data


def keys(*ks):
    return "".join("\\%03o" % b for b in struct.pack("<%dQ" % len(ks), *ks))


def floats(*vs):
    return "".join("\\%03o" % b for b in struct.pack("<%df" % len(vs), *vs))


def octal(data):
    return "".join("\\%03o" % b for b in data)


def bitmap(slots):
    b = bytearray(128)
    for s in slots:
        b[s // 8] |= 1 << (s % 8)
    return bytes(b)


def crc32c(crc, data):
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def write(target, seeds):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if not name.startswith("regression-"):
            os.remove(os.path.join(folder, name))
    for name, data in seeds.items():
        assert len(data) < 4096, name
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def codecs():
    order = encode("RestoreOrder", """
        shard_epoch: 2 checkpoint_id: 7 clock: 40 slots: "%s"
        shards { server_index: 0 path: "/ckpt/job/7/server-0" slots: "%s" }
        shards { server_index: 1 path: "/ckpt/job/7/server-1" slots: "%s" }
        reason: "server 1 dead" """ % (octal(bitmap(range(512, 1024))), octal(bitmap(range(512))),
                                       octal(bitmap(range(512, 1024)))))
    return {
        "keys": b"\x00" + struct.pack("<3Q", 0, 1, 2**64 - 1),
        "values": b"\x00" + struct.pack("<4f", 0.5, -1.0, 3e38, 1e-45),
        "bitmap-all": b"\x01" + b"\xff" * 128,
        "bitmap-half": b"\x01" + bitmap(range(0, 1024, 2)),
        "shard-map": b"\x02" + b"# two servers\n127.0.0.1:7100 0-511\nhost:7101 512-1023\n",
        "shard-map-ranges": b"\x02" + b"a:1 0-99,200-1023\nb:2 100-199\n",
        "restore-order": b"\x03" + order,
        # A pull answer for 3 keys of dim 2, cut into slices of 5 bytes (the piece byte + 1).
        "pull-answer": b"\x04\x04" + encode("PullResponse", """
            blocks { table_id: 1 values: "%s" } min_clock: -3 wait_micros: 12""" %
                                                floats(1, 2, 3, 4, 5, 6)),
        # A push of two blocks, slices of 3 bytes (piece byte 4: PushRequest, (4 / 2) + 1).
        "push-request": b"\x05\x04" + encode("PushRequest", """
            job_id: "job-1" worker_id: 2 request_id: 99 clock: -1 shard_epoch: 3 lr_scale: 0.5
            blocks { table_id: 1 keys: "%s" values: "%s" }
            blocks { table_id: 2 keys: "%s" values: "%s" }""" % (
                keys(4, 5), floats(1, 2, 3, 4), keys(7), floats(float("nan"), 1))),
        # A PushPull (odd piece byte), slices of 8 bytes.
        "pushpull-request": b"\x05\x0f" + encode("PushPullRequest", """
            push { job_id: "j" worker_id: 1 request_id: 5 clock: 2
                   blocks { table_id: 1 keys: "%s" values: "%s" } }
            advance_clock: true clock_parts: 2 pull_blocks { table_id: 1 keys: "%s" }""" % (
                keys(1), floats(0.25, -0.5), keys(1, 2))),
        # Value blocks: [codec][n u16][bytes]. fp16 of 4 values, topk 2 of 8, sign of 10, int8
        # of 300 (two chunks).
        "value-fp16": b"\x06\x01" + struct.pack("<H4H", 4, 0x3c00, 0xbc00, 0x7bff, 0x0001),
        "value-topk": b"\x06\x03" + struct.pack("<HII2I2f", 8, 8, 2, 1, 6, -5.0, 3.0),
        "value-sign": b"\x06\x04" + struct.pack("<Hf", 10, 0.5) + b"\x05\x02",
        "value-int8": b"\x06\x05" + struct.pack("<H2f", 300, 0.01, 0.002)
                      + bytes((i * 7) % 255 - 127 & 0xff for i in range(300)),
    }


def job_spec():
    seeds = {}
    for name in sorted(os.listdir(os.path.join(ROOT, "deploy", "jobs"))):
        with open(os.path.join(ROOT, "deploy", "jobs", name), "rb") as f:
            seeds[name] = f.read()
    seeds["spam-ssp.textproto"] = (
        b'model: "spam_logreg" num_workers: 3 hash_bits: 18 consistency { mode: SSP staleness: 2 }\n'
        b'optimizer { kind: FTRL learning_rate: 0.05 }\n'
        b'checkpoint { every_steps: 100 keep_last: 2 root: "/srv/ckpt/./spam/" }\n'
        b'from_checkpoint { job_id: "job-3" checkpoint_id: 4 } recovery: ROLLBACK\n')
    seeds["mlp-schedule.textproto"] = (
        b'model: "fashion_mlp" num_workers: 1 layers: [784, 64, 32, 10] epochs: 3\n'
        b'lr_schedule { kind: COSINE final_fraction: 0.1 } data_dir: "/data//fashion/"\n'
        b'evaluate: false seed: 42\n')
    seeds["binary.pb"] = encode("JobSpec", 'model: "spam_logreg" num_workers: 2 hash_bits: 4')
    return seeds


# fuzz_checkpoint_reader's target tables: table 1 "weights" dense 8 x 4, adam (12 floats a
# row); table 2 "embeddings" sparse dim 2, sgd.
META = """format_version: 1 job_id: "job" checkpoint_id: 3 clock: 10
  tables { table_id: 1 name: "weights" kind: DENSE dim: 4 num_rows: 8 optimizer { kind: ADAM } }
  tables { table_id: 2 name: "embeddings" kind: SPARSE dim: 2 optimizer { kind: SGD } }"""


def slot_seed(flags, slot, meta, rows, record_rows=None, record_crc=None):
    crc, body = 0, b""
    for table, key, updates, values in rows:
        k = struct.pack(">HIQ", slot, table, key)
        v = struct.pack("<q", updates) + struct.pack("<%df" % len(values), *values)
        crc = crc32c(crc32c(crc, k), v)
        body += field(k) + field(v)
    record = struct.pack(">QI", len(rows) if record_rows is None else record_rows,
                         crc if record_crc is None else record_crc)
    return bytes([flags]) + struct.pack("<H", slot) + field(meta) + field(record) + body


def checkpoint_reader():
    meta = encode("CheckpointShardMeta", META)
    renamed = encode("CheckpointShardMeta", META.replace("table_id: 1", "table_id: 5"))
    dense = [(1, k, 3, [0.25] * 12) for k in (0, 3)]
    sparse = [(2, k, 1, [0.5, -0.5]) for k in (17, 99999)]
    return {
        "empty-slot": slot_seed(0, 0, meta, []),
        "dense-rows": slot_seed(0, 12, meta, dense),
        "sparse-rows": slot_seed(0, 700, meta, sparse),
        "both-tables": slot_seed(2, 1023, meta, dense + sparse),
        "renamed-remap": slot_seed(3, 40, renamed, [(5, 1, 2, [1.0] * 12)] + sparse),
        "no-meta": slot_seed(0, 9, b"", dense),
        "old-format": slot_seed(0, 9, encode("CheckpointShardMeta", "format_version: 7"), []),
    }


PUSH, PULL, PUSHPULL, CLOCK, CONFIGURE, CREATE, DESCRIBE, CHECKPOINT, AWAIT, RESTORE = range(10)


def request(rpc, message, text):
    return bytes([rpc]) + field(encode(message, text))


def data_plane():
    dense_push = 'blocks { table_id: 1 keys: "%s" values: "%s" }' % (keys(0, 7), floats(*[0.1] * 8))
    sparse = 'blocks { table_id: 2 keys: "%s" values: "%s" }' % (keys(5, 1 << 40), floats(1, 2, 3, 4))
    pull = 'blocks { table_id: 1 keys: "%s" } blocks { table_id: 2 keys: "%s" }' % (
        keys(1, 2), keys(5, 6, 7))
    sync = 'job_id: "job" consistency { mode: SYNC } worker_ids: [1, 2] membership_epoch: 2'
    seeds = {
        "push": request(PUSH, "PushRequest",
                        'job_id: "job" worker_id: 1 request_id: 1 %s %s' % (dense_push, sparse)),
        "pull": request(PULL, "PullRequest", 'job_id: "job" worker_id: 2 %s' % pull),
        "pushpull": request(PUSHPULL, "PushPullRequest",
                            'push { job_id: "job" worker_id: 1 request_id: 9 lr_scale: 0.5 %s }'
                            ' advance_clock: true clock_parts: 1 pull_blocks { table_id: 2 keys: "%s" }'
                            % (sparse, keys(5))),
        "clock": request(CLOCK, "ClockRequest", 'job_id: "job" worker_id: 1 clock: 3'),
        "describe": request(DESCRIBE, "DescribeTableRequest", "table_id: 2"),
        "create-table": request(CREATE, "CreateTableRequest",
                                'spec { table_id: 3 name: "bias" job_id: "job" kind: DENSE dim: 1 '
                                'num_rows: 10 optimizer { kind: MOMENTUM } }'),
        "checkpoint": request(CHECKPOINT, "CheckpointRequest",
                              'job_id: "job" checkpoint_id: 1 clock: 0 path: "/tmp/ckpt/1"'),
        "await": request(AWAIT, "AwaitCheckpointRequest", 'job_id: "job" checkpoint_id: 1'),
        "restore-empty": request(RESTORE, "RestoreRequest",
                                 'job_id: "job" order { shard_epoch: 1 slots: "%s" reason: "x" }'
                                 % octal(bitmap(range(100)))),
        "restore-rollback": request(RESTORE, "RestoreRequest",
                                    'job_id: "job" order { shard_epoch: 1 rollback: true clock: 2 }'),
        "shards": request(CONFIGURE, "ConfigureJobRequest",
                          'job_id: "job" consistency { mode: ASYNC } worker_ids: [1, 2] '
                          'membership_epoch: 1 owned_slots: "%s" shard_epoch: 2 caller_clock: -1'
                          % octal(bitmap(range(0, 1024, 3)))),
        "sync-round": (request(CONFIGURE, "ConfigureJobRequest", sync)
                       + request(PUSH, "PushRequest",
                                 'job_id: "job" worker_id: 1 request_id: 1 %s' % dense_push)
                       + request(PUSH, "PushRequest",
                                 'job_id: "job" worker_id: 2 request_id: 1 %s' % dense_push)
                       + request(CLOCK, "ClockRequest", 'job_id: "job" worker_id: 1 clock: 1')
                       + request(CLOCK, "ClockRequest", 'job_id: "job" worker_id: 2 clock: 1')
                       + request(PULL, "PullRequest", 'job_id: "job" worker_id: 1 clock: 1 %s' % pull)),
        "ssp-wait": (request(CONFIGURE, "ConfigureJobRequest",
                             'job_id: "job" consistency { mode: SSP staleness: 1 } '
                             'worker_ids: [1, 2] membership_epoch: 3')
                     + request(CLOCK, "ClockRequest", 'job_id: "job" worker_id: 1 clock: 5')
                     + request(PULL, "PullRequest", 'job_id: "job" worker_id: 1 clock: 5 %s' % pull)),
        "new-job": (request(CONFIGURE, "ConfigureJobRequest",
                            'job_id: "other" consistency { mode: ASYNC } worker_ids: 4 '
                            'membership_epoch: 1')
                    + request(CREATE, "CreateTableRequest",
                              'spec { table_id: 40 job_id: "other" kind: SPARSE dim: 8 '
                              'initializer { kind: NORMAL stddev: 0.1 } optimizer { kind: FTRL } }')
                    + request(PUSH, "PushRequest",
                              'job_id: "other" worker_id: 4 request_id: 1 blocks { table_id: 40 '
                              'keys: "%s" values: "%s" }' % (keys(3), floats(*[1.0] * 8)))),
    }
    return seeds


def main():
    write("fuzz_codecs", codecs())
    write("fuzz_job_spec", job_spec())
    write("fuzz_checkpoint_reader", checkpoint_reader())
    write("fuzz_data_plane", data_plane())


if __name__ == "__main__":
    main()
