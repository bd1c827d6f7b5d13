"""create_table(..., disk_tier=True) against real ps_server processes with --tier_roots."""

import numpy as np
import pytest

import paramserver as ps
from conftest import Cluster


@pytest.fixture(scope="module")
def tier_cluster(tmp_path_factory):
    """Two servers with a disk tier under their own temporary root."""
    root = tmp_path_factory.mktemp("tier_root")
    c = Cluster(tmp_path_factory.mktemp("tier_servers"), num_servers=2,
                extra_flags=[f"--tier_roots={root}"])
    try:
        c.start()
        yield c
    finally:
        c.stop()


def train(table, keys, steps):
    grad = np.linspace(-0.5, 0.5, len(keys) * 4, dtype=np.float32).reshape(len(keys), 4)
    for step in range(steps):
        batch = np.ascontiguousarray(keys[step % 3::3])
        table.pull(batch)
        table.push(batch, np.ascontiguousarray(grad[step % 3::3]) * (step + 1))
    return table.pull(keys)


def test_a_tiered_table_with_a_small_cap_trains_as_an_uncapped_one(tier_cluster, job_id):
    # Two jobs with a table of the same name (so the same initial values): one capped at 40
    # rows per server over a disk tier, one uncapped.
    clients = [ps.Client(tier_cluster.addresses, job_id=f"{job_id}-{kind}", rpc_timeout=30.0)
               for kind in ("tiered", "plain")]
    try:
        init = ps.Initializer.uniform(-1.0, 1.0, seed=3)
        tiered = clients[0].create_table("emb", kind="sparse", dim=4, initializer=init,
                                         optimizer="adam", eviction={"max_rows": 40},
                                         disk_tier=True)
        plain = clients[1].create_table("emb", kind="sparse", dim=4, initializer=init,
                                        optimizer="adam")
        keys = np.arange(1000, 1600, dtype=np.uint64)
        np.testing.assert_array_equal(train(tiered, keys, 9), train(plain, keys, 9))
    finally:
        for c in clients:
            c.close()


def test_a_tier_without_a_cap_is_refused(tier_cluster, job_id):
    c = ps.Client(tier_cluster.addresses, job_id=job_id, rpc_timeout=30.0)
    try:
        with pytest.raises(ValueError, match="tier.disk needs eviction.max_rows"):
            c.create_table("t", kind="sparse", dim=1, disk_tier=True)
    finally:
        c.close()


def test_a_server_without_tier_roots_refuses_a_tiered_table(client):
    with pytest.raises(Exception, match="--tier_roots"):
        client.create_table("t", kind="sparse", dim=1, eviction={"max_rows": 10}, disk_tier=True)


def test_torch_embedding_creates_a_tiered_table(tier_cluster, job_id):
    torch = pytest.importorskip("torch")
    import paramserver.torch as pst

    c = ps.Client(tier_cluster.addresses, job_id=job_id, rpc_timeout=30.0)
    try:
        emb = pst.Embedding(c, "temb", 2, initializer=ps.Initializer.constant(1.0),
                            optimizer=ps.Optimizer.sgd(0.5), eviction={"max_rows": 4},
                            disk_tier=True)
        ids = torch.arange(100)
        emb(ids).sum().backward()
        emb.flush()
        # 100 rows trained on two servers capped at 4 each: all kept, on disk.
        np.testing.assert_array_equal(emb.table.pull(np.arange(100, dtype=np.uint64)),
                                      np.full((100, 2), 0.5, np.float32))
        with pytest.raises(ValueError, match="not to an existing Table"):
            pst.Embedding(emb.table, disk_tier=True)
    finally:
        c.close()


def test_table_prefetch_reads_rows_back_and_changes_no_value(tier_cluster, job_id):
    clients = [ps.Client(tier_cluster.addresses, job_id=f"{job_id}-{kind}", rpc_timeout=30.0)
               for kind in ("tiered", "plain")]
    try:
        init = ps.Initializer.uniform(-1.0, 1.0, seed=5)
        tiered = clients[0].create_table("emb", kind="sparse", dim=4, initializer=init,
                                         optimizer="adagrad", eviction={"max_rows": 40},
                                         disk_tier=True)
        plain = clients[1].create_table("emb", kind="sparse", dim=4, initializer=init,
                                        optimizer="adagrad")
        keys = np.arange(5000, 5600, dtype=np.uint64)
        train(tiered, keys, 6)
        train(plain, keys, 6)
        # A prefetch is a request: wait() returns None. Repeated keys, any integer array.
        batch = np.concatenate([keys[:30], keys[:30]]).astype(np.int64)
        request = tiered.prefetch(batch)
        assert request.wait() is None
        np.testing.assert_array_equal(tiered.pull(keys[:30]), plain.pull(keys[:30]))
        # Not waited for, then pushed and pulled: the same training as without.
        tiered.prefetch(keys[30:60])
        np.testing.assert_array_equal(train(tiered, keys, 3), train(plain, keys, 3))
        # The client's form; a table without a disk tier takes it as a no-op; bad keys are
        # refused.
        assert clients[0].prefetch(tiered, keys[100:110]).wait() is None
        assert plain.prefetch(keys[:10]).wait() is None
        with pytest.raises(ValueError):
            tiered.prefetch(np.array([-1], dtype=np.int64))
    finally:
        for c in clients:
            c.close()


class CountingTable:
    """Wraps a Table, counting its pulls (plain and background) and prefetches."""

    def __init__(self, table):
        self.table = table
        self.pulls = self.background_pulls = self.prefetches = 0

    def __getattr__(self, name):
        return getattr(self.table, name)

    def pull(self, keys, out=None):
        self.pulls += 1
        return self.table.pull(keys, out)

    def pull_async(self, keys, out=None):
        self.background_pulls += 1
        return self.table.pull_async(keys, out)

    def prefetch(self, keys):
        self.prefetches += 1
        return self.table.prefetch(keys)


def test_torch_embedding_prefetch_trains_as_without(tier_cluster, job_id):
    torch = pytest.importorskip("torch")
    import paramserver.torch as pst

    clients = [ps.Client(tier_cluster.addresses, job_id=f"{job_id}-{kind}", rpc_timeout=30.0)
               for kind in ("tiered", "plain")]
    try:
        def embedding(c, tiered):
            return pst.Embedding(c, "pemb", 3, initializer=ps.Initializer.uniform(-1, 1, seed=2),
                                 optimizer=ps.Optimizer.sgd(0.1),
                                 eviction={"max_rows": 8} if tiered else None, disk_tier=tiered)

        tiered, plain = embedding(clients[0], True), embedding(clients[1], False)
        counting = CountingTable(tiered.table)
        tiered.table = counting
        batches = [torch.arange(i * 20, i * 20 + 40) % 150 for i in range(8)]
        for step, ids in enumerate(batches):
            for emb in (tiered, plain):
                out = emb(ids)
                (out * out).sum().backward()
                emb.flush()
            if step + 1 < len(batches):
                # Before the next forward: announced only (odd steps), or pulled in the background.
                tiered.prefetch(batches[step + 1], pull=step % 2 == 0)
        assert counting.prefetches == (len(batches) - 1) // 2  # the pull=False ones only
        assert counting.background_pulls == len(batches) // 2
        assert counting.pulls == 1 + (len(batches) - 1) // 2  # the first forward, the odd ones
        all_ids = np.arange(150, dtype=np.uint64)
        np.testing.assert_array_equal(counting.pull(all_ids), plain.table.pull(all_ids))
        tiered.prefetch(torch.tensor([], dtype=torch.int64))  # nothing to do
    finally:
        for c in clients:
            c.close()
