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
