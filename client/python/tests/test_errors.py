"""Bad input and failures: each raises a specific exception naming the problem, and leaves the
servers serving and the rows unchanged."""

import time

import numpy as np
import pytest

import paramserver as ps


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


@pytest.fixture
def table(client):
    """A sparse table of dim 4 with rows 1, 2, 3 set to known values."""
    t = client.create_table("t", kind="sparse", dim=4, initializer=ps.Initializer.constant(1.0),
                            optimizer=ps.Optimizer.sgd(1.0))
    t.push(u64(1, 2, 3), np.arange(12, dtype=np.float32).reshape(3, 4))
    return t


def expected_rows():
    return np.float32(1.0) - np.arange(12, dtype=np.float32).reshape(3, 4)


def assert_unchanged(table):
    np.testing.assert_array_equal(table.pull(u64(1, 2, 3)), expected_rows())


def test_exception_hierarchy():
    assert issubclass(ps.Error, RuntimeError)
    assert issubclass(ps.InvalidArgumentError, ps.Error)
    assert issubclass(ps.InvalidArgumentError, ValueError)
    for cls in (ps.NotFoundError, ps.UnavailableError, ps.DeadlineExceededError,
                ps.FailedPreconditionError, ps.AlreadyExistsError, ps.CancelledError):
        assert issubclass(cls, ps.Error) and cls.__module__ == "paramserver"
    # A step cut short by a server's death (program jobs): tests/step_interrupt_test.sh.
    assert issubclass(ps.StepInterrupted, ps.AbortedError)
    assert ps.StepInterrupted.__module__ == "paramserver"


def test_float64_grads(table):
    with pytest.raises(TypeError, match=r"grads must be a float32 array of shape \(3, 4\), "
                                        r"got dtype float64"):
        table.push(u64(1, 2, 3), np.ones((3, 4), np.float64))
    assert_unchanged(table)


def test_int32_keys(table):
    with pytest.raises(TypeError, match=r"keys must be a 1-D array of uint64.*got dtype int32"):
        table.pull(np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError, match="uint64.*got dtype int32"):
        table.push(np.array([1, 2, 3], np.int32), np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="float64"):
        table.pull(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="must be a numpy array.*got list"):
        table.pull([1, 2, 3])
    assert_unchanged(table)


def test_wrong_out_dtype(table):
    with pytest.raises(TypeError, match=r"out must be a float32 array.*got dtype float64"):
        table.pull(u64(1, 2, 3), out=np.zeros((3, 4)))
    assert_unchanged(table)


def test_wrong_grads_shape(table):
    with pytest.raises(ValueError, match=r"grads must have shape \(3, 4\) \(3 keys, table dim 4\), "
                                         r"got shape \(3, 5\)"):
        table.push(u64(1, 2, 3), np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"got shape \(2, 4\)"):
        table.push(u64(1, 2, 3), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"got shape \(12,\)"):
        table.push(u64(1, 2, 3), np.ones(12, np.float32))
    with pytest.raises(ValueError, match=r"out must have shape \(3, 4\).*got shape \(4, 3\)"):
        table.pull(u64(1, 2, 3), out=np.zeros((4, 3), np.float32))
    assert_unchanged(table)


def test_2d_keys(table):
    with pytest.raises(ValueError, match=r"keys must be a 1-D array, got shape \(3, 1\)"):
        table.pull(u64(1, 2, 3).reshape(3, 1))
    assert_unchanged(table)


def test_non_contiguous_arrays(table):
    wide = np.ones((3, 8), np.float32)
    with pytest.raises(ValueError, match="grads must be C-contiguous"):
        table.push(u64(1, 2, 3), wide[:, ::2])
    with pytest.raises(ValueError, match="grads must be C-contiguous"):
        table.push(u64(1, 2, 3), np.ones((4, 3), np.float32).T)
    with pytest.raises(ValueError, match="keys must be C-contiguous"):
        table.pull(u64(1, 9, 2, 9, 3)[::2])
    out = np.zeros((4, 3), np.float32).T
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        table.pull(u64(1, 2, 3), out=out)
    np.testing.assert_array_equal(out, 0)
    assert_unchanged(table)


def test_read_only_out(table):
    out = np.zeros((3, 4), np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="out must be writable"):
        table.pull(u64(1, 2, 3), out=out)
    assert_unchanged(table)


def test_not_a_table(client, table):
    with pytest.raises(TypeError, match="table must be a paramserver.Table.*got str"):
        client.pull("t", u64(1))
    with pytest.raises(TypeError, match=r"push\[0\]: must be a \(table, keys, grads\) tuple"):
        client.push_pull(push=[(table, u64(1))])
    assert_unchanged(table)


def test_dense_keys_out_of_range(client, table):
    w = client.create_table("dense", kind="dense", dim=2, rows=4,
                            initializer=ps.Initializer.constant(3.0),
                            optimizer=ps.Optimizer.sgd(1.0))
    with pytest.raises(ps.InvalidArgumentError, match="out of range") as info:
        w.pull(u64(0, 4))
    assert info.value.code == "INVALID_ARGUMENT"
    assert isinstance(info.value, ValueError)
    with pytest.raises(ps.InvalidArgumentError, match="out of range"):
        w.push(u64(2, 100), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(w.pull(np.arange(4, dtype=np.uint64)), np.full((4, 2), 3.0))
    assert_unchanged(table)


def test_nan_gradients_are_rejected(table):
    with pytest.raises(ps.InvalidArgumentError, match="NaN or an Inf") as info:
        table.push(u64(2), np.array([[1, 1, np.nan, 1]], np.float32))
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ps.InvalidArgumentError, match="NaN or an Inf"):
        table.push_async(u64(1, 2, 3), np.full((3, 4), np.inf, np.float32)).wait()
    # One bad row among many, on both servers: the whole push is refused before it is sent,
    # so no row on any server changes.
    keys = np.arange(100, 200, dtype=np.uint64)
    before = table.pull(keys)
    grads = np.ones((100, 4), np.float32)
    grads[57, 1] = np.nan
    with pytest.raises(ps.InvalidArgumentError, match="key 157 holds a NaN or an Inf"):
        table.push(keys, grads)
    np.testing.assert_array_equal(table.pull(keys), before)
    assert_unchanged(table)


def test_unreachable_server_fails_within_connect_timeout():
    start = time.monotonic()
    with pytest.raises(ps.DeadlineExceededError, match="declaring job"):
        ps.Client(["127.0.0.1:1"], connect_timeout=1.0)
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match="connect_timeout"):
        ps.Client(["127.0.0.1:1"], connect_timeout=0)


def test_table_that_does_not_exist(client, table):
    with pytest.raises(ps.NotFoundError) as info:
        client.table("nope")
    assert info.value.code == "NOT_FOUND"
    assert str(info.value)  # the server's message
    with pytest.raises(ps.NotFoundError):
        client.table(12345)
    with pytest.raises(TypeError, match="table name .str. or id .int."):
        client.table(1.5)
    assert_unchanged(table)


def test_bad_table_configs(client, table):
    with pytest.raises(ValueError, match="dim"):
        client.create_table("zero_dim", kind="sparse", dim=0)
    with pytest.raises(ValueError, match="kind must be 'sparse' or 'dense', got 'weird'"):
        client.create_table("k", kind="weird", dim=4)
    with pytest.raises(ValueError, match="optimizer must be .*got 'rmsprop'"):
        client.create_table("o", kind="sparse", dim=4, optimizer="rmsprop")
    with pytest.raises(ValueError, match="optimizer must be .*got 'rmsprop'"):
        ps.Optimizer("rmsprop")
    with pytest.raises(ValueError, match="initializer kind"):
        ps.Initializer("gaussian")
    with pytest.raises(ValueError):
        client.create_table("bad name!", kind="sparse", dim=4)
    with pytest.raises(ValueError):
        client.create_table("dense_no_rows", kind="dense", dim=4)
    # The same name with another config.
    with pytest.raises(ps.AlreadyExistsError) as info:
        client.create_table("t", kind="sparse", dim=5)
    assert info.value.code == "ALREADY_EXISTS"
    assert_unchanged(table)


def test_bad_client_options(cluster):
    addresses = cluster.addresses
    with pytest.raises(ValueError, match="consistency must be 'async', 'sync' or 'ssp', got"):
        ps.Client(addresses, consistency="eventual")
    with pytest.raises(ValueError, match="rpc_timeout"):
        ps.Client(addresses, rpc_timeout=0)
    with pytest.raises(ValueError, match="worker_id"):
        ps.Client(addresses, worker_id=2, num_workers=2)
    with pytest.raises(ValueError, match="worker_id"):
        ps.Client(addresses, worker_id=-1)
    with pytest.raises(ValueError, match="num_workers"):
        ps.Client(addresses, num_workers=0)
    with pytest.raises(ValueError, match="staleness"):
        ps.Client(addresses, consistency="ssp", staleness=-1)
    with pytest.raises(ValueError, match="max_retries"):
        ps.Client(addresses, max_retries=-1)
    with pytest.raises(ValueError, match="at least one server"):
        ps.Client([])
    with pytest.raises(TypeError):
        ps.Client(7100)


def test_closed_client(cluster, job_id):
    c = ps.Client(cluster.addresses, job_id=job_id)
    t = c.create_table("closed", kind="sparse", dim=2)
    c.close()
    c.close()  # idempotent
    assert c.closed
    assert "closed" in repr(c)
    keys = u64(1)
    calls = [
        lambda: t.pull(keys),
        lambda: t.push(keys, np.ones((1, 2), np.float32)),
        lambda: t.pull_async(keys).wait(),
        lambda: c.push_pull(push=[(t, keys, np.ones((1, 2), np.float32))]),
        lambda: c.clock(),
        lambda: c.create_table("other", kind="sparse", dim=2),
        lambda: c.table("closed"),
    ]
    for call in calls:
        with pytest.raises(ps.FailedPreconditionError, match="closed") as info:
            call()
        assert info.value.code == "FAILED_PRECONDITION"
    # Leaving a with-block closes the client.
    with ps.Client(cluster.addresses, job_id=job_id) as c2:
        t2 = c2.table("closed")
        assert t2.pull(keys).shape == (1, 2)
    assert c2.closed
    with pytest.raises(ps.Error, match="closed"):
        t2.pull(keys)


def test_server_that_went_away(fresh_cluster, job_id):
    c = ps.Client(fresh_cluster.addresses, job_id=job_id, rpc_timeout=3.0, max_retries=0)
    try:
        t = c.create_table("gone", kind="sparse", dim=4)
        keys = np.arange(64, dtype=np.uint64)  # rows on both servers
        assert t.pull(keys).shape == (64, 4)
        fresh_cluster.kill(1)
        start = time.monotonic()
        with pytest.raises((ps.UnavailableError, ps.DeadlineExceededError)) as info:
            t.pull(keys)
        assert time.monotonic() - start < 15
        assert info.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        start = time.monotonic()
        with pytest.raises((ps.UnavailableError, ps.DeadlineExceededError)):
            t.push_async(keys, np.ones((64, 4), np.float32)).wait()
        assert time.monotonic() - start < 15
    finally:
        c.close()


def test_session_outside_a_program_job(monkeypatch):
    # Session.from_env belongs to a program that a worker daemon runs (it sets PS_AGENT).
    monkeypatch.delenv("PS_AGENT", raising=False)
    with pytest.raises(ps.FailedPreconditionError, match="PS_AGENT is not set"):
        ps.Session.from_env()


def test_session_with_no_daemon_behind_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PS_AGENT", f"unix:{tmp_path}/agent.sock")
    with pytest.raises(ps.Error, match="the worker daemon"):
        ps.Session.from_env(rpc_timeout=2.0)
