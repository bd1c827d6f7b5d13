"""The paramserver Python API against real servers: tables, pulls, pushes, async requests,
push_pull and the clock, numpy arrays and torch tensors, zero-copy pulls."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import paramserver as ps


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def test_client_properties(client, cluster, job_id):
    assert client.servers == cluster.addresses
    assert client.job_id == job_id
    assert client.worker_id == 0
    assert client.num_workers == 1
    assert client.consistency == "async"
    assert client.rpc_timeout == pytest.approx(30.0)
    assert client.closed is False
    assert client.clock_value == 0
    assert job_id in repr(client)


def test_comma_separated_servers(cluster, job_id):
    with ps.Client(",".join(cluster.addresses), job_id=job_id) as c:
        assert c.servers == cluster.addresses
    assert c.closed


def test_sparse_table_zeros_and_sgd(client):
    t = client.create_table("emb", kind="sparse", dim=4, optimizer=ps.Optimizer.sgd(0.5))
    assert (t.name, t.kind, t.dim, t.rows) == ("emb", "sparse", 4, None)
    assert t.id == ps.table_id_for(client.job_id, "emb") != 0
    assert t.client is client
    keys = u64(1, 7, 1 << 40, 2**64 - 1)
    values = t.pull(keys)
    assert values.shape == (4, 4) and values.dtype == np.float32
    assert values.flags.c_contiguous and values.flags.writeable
    np.testing.assert_array_equal(values, np.zeros((4, 4), np.float32))
    grads = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert t.push(keys, grads) is None
    np.testing.assert_array_equal(t.pull(keys), -np.float32(0.5) * grads)
    # Through the client as well.
    client.push(t, keys[:1], np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(client.pull(t, keys[:1]), [[-0.5, -1.0, -1.5, -2.0]])


def test_dense_table_constant_initializer_and_sgd(client):
    t = client.create_table("w", kind="dense", dim=3, rows=5,
                            initializer=ps.Initializer.constant(1.5),
                            optimizer=ps.Optimizer.sgd(0.25))
    assert (t.kind, t.dim, t.rows) == ("dense", 3, 5)
    keys = np.arange(5, dtype=np.uint64)
    np.testing.assert_array_equal(t.pull(keys), np.full((5, 3), 1.5, np.float32))
    grads = np.arange(15, dtype=np.float32).reshape(5, 3) * np.float32(0.5)
    t.push(keys, grads)
    np.testing.assert_array_equal(t.pull(keys), np.float32(1.5) - np.float32(0.25) * grads)


def test_initializers_are_deterministic(client):
    a = client.create_table("a", kind="sparse", dim=8,
                            initializer=ps.Initializer.normal(0.01, seed=1))
    u = client.create_table("u", kind="sparse", dim=8,
                            initializer=ps.Initializer.uniform(-0.5, 0.5, seed=3))
    keys = np.arange(100, dtype=np.uint64)
    v1, v2 = a.pull(keys), a.pull(keys)
    np.testing.assert_array_equal(v1, v2)
    assert 0.005 < v1.std() < 0.02
    w = u.pull(keys)
    assert w.min() >= -0.5 and w.max() < 0.5 and w.std() > 0.2


def test_duplicate_keys_are_summed(client):
    t = client.create_table("dup", kind="sparse", dim=2, optimizer=ps.Optimizer.sgd(1.0))
    keys = u64(5, 9, 5, 5)
    grads = np.array([[1, 2], [3, 4], [10, 20], [100, 200]], np.float32)
    t.push(keys, grads)
    np.testing.assert_array_equal(t.pull(u64(5, 9)), [[-111, -222], [-3, -4]])
    # Pulling a key twice returns its row twice.
    np.testing.assert_array_equal(t.pull(u64(9, 9)), [[-3, -4], [-3, -4]])


def test_empty_keys(client):
    t = client.create_table("empty", kind="sparse", dim=3)
    values = t.pull(np.zeros(0, np.uint64))
    assert values.shape == (0, 3)
    t.push(np.zeros(0, np.uint64), np.zeros((0, 3), np.float32))


def test_open_table_by_name_and_id(client):
    t = client.create_table("opened", kind="dense", dim=2, rows=3)
    by_name = client.table("opened")
    by_id = client.table(t.id)
    for o in (by_name, by_id):
        assert (o.name, o.id, o.kind, o.dim, o.rows) == ("opened", t.id, "dense", 2, 3)
    assert by_name == t
    assert "opened" in repr(t)
    # Creating again with the same config is idempotent.
    again = client.create_table("opened", kind="dense", dim=2, rows=3)
    assert again.id == t.id


def test_pull_into_out_is_zero_copy(client):
    t = client.create_table("out", kind="sparse", dim=4, initializer=ps.Initializer.constant(2.0))
    keys = u64(1, 2, 3)
    out = np.full((3, 4), -1, np.float32)
    result = t.pull(keys, out=out)
    assert result is out
    np.testing.assert_array_equal(out, np.full((3, 4), 2.0, np.float32))
    # Into a slice of a bigger array: rows 2..4 of it are written, the rest untouched.
    big = np.zeros((6, 4), np.float32)
    view = big[2:5]
    result = client.pull(t, keys, out=view)
    assert result is view and np.shares_memory(result, big)
    np.testing.assert_array_equal(big[2:5], 2.0)
    np.testing.assert_array_equal(big[[0, 1, 5]], 0.0)
    # Asynchronously too.
    out2 = np.zeros((3, 4), np.float32)
    assert t.pull_async(keys, out=out2).wait() is out2
    np.testing.assert_array_equal(out2, 2.0)


def test_async_requests(client):
    t = client.create_table("async", kind="sparse", dim=2, optimizer=ps.Optimizer.sgd(1.0))
    keys = [np.arange(i * 10, i * 10 + 10, dtype=np.uint64) for i in range(4)]
    pushes = [t.push_async(k, np.full((10, 2), i + 1, np.float32)) for i, k in enumerate(keys)]
    for p in pushes:
        assert p.wait() is None
        assert p.done()
        assert p.wait() is None  # again
    pulls = [client.pull_async(t, k) for k in keys]
    for i, p in enumerate(pulls):
        values = p.wait()
        assert p.done() and "done" in repr(p)
        np.testing.assert_array_equal(values, np.full((10, 2), -(i + 1), np.float32))
        assert p.wait() is values
    # Keys and grads may be dropped by the caller: the request holds them.
    p = t.push_async(np.arange(40, dtype=np.uint64), np.ones((40, 2), np.float32))
    gc.collect()
    p.wait(timeout=30)
    np.testing.assert_array_equal(t.pull(u64(0, 39)), [[-2, -2], [-5, -5]])


def test_many_requests_in_flight_dropped_without_wait(client):
    t = client.create_table("dropped", kind="sparse", dim=16)
    keys = np.arange(1000, dtype=np.uint64)
    for _ in range(20):
        t.pull_async(keys)  # dropped at once: the destructor waits
    requests = [t.pull_async(keys) for _ in range(20)]
    del requests
    gc.collect()
    assert t.pull(keys[:2]).shape == (2, 16)


def test_push_pull_advances_the_clock(client):
    w = client.create_table("pp_w", kind="dense", dim=2, rows=3, optimizer=ps.Optimizer.sgd(0.5))
    e = client.create_table("pp_e", kind="sparse", dim=1, optimizer=ps.Optimizer.sgd(1.0))
    wk = np.arange(3, dtype=np.uint64)
    ek = u64(100, 200)
    assert client.clock_value == 0
    out = np.empty((3, 2), np.float32)
    results = client.push_pull(push=[(w, wk, np.ones((3, 2), np.float32)),
                                     (e, ek, np.array([[1], [2]], np.float32))],
                               pull=[(w, wk, out), (e, ek)])
    assert client.clock_value == 1
    assert len(results) == 2 and results[0] is out
    np.testing.assert_array_equal(out, np.full((3, 2), -0.5, np.float32))
    np.testing.assert_array_equal(results[1], [[-1], [-2]])
    request = client.push_pull_async(push=[(e, ek, np.ones((2, 1), np.float32))], pull=[(e, ek)])
    [values] = request.wait()
    np.testing.assert_array_equal(values, [[-2], [-3]])
    assert client.clock_value == 2
    assert client.clock() == 3
    assert client.clock_value == 3
    # Pull-only and push-only round trips also advance it.
    assert client.push_pull(pull=[(e, ek)])[0].shape == (2, 1)
    assert client.push_pull(push=[(e, ek, np.zeros((2, 1), np.float32))]) == []
    assert client.clock_value == 5


def test_pull_many_and_push_many(client):
    a = client.create_table("many_a", kind="sparse", dim=2, optimizer=ps.Optimizer.sgd(1.0))
    b = client.create_table("many_b", kind="dense", dim=3, rows=2, optimizer=ps.Optimizer.sgd(1.0))
    client.push_many([(a, u64(1), np.ones((1, 2), np.float32)),
                      (b, u64(0, 1), np.full((2, 3), 2, np.float32))])
    va, vb = client.pull_many([(a, u64(1)), (b, u64(0, 1))])
    np.testing.assert_array_equal(va, [[-1, -1]])
    np.testing.assert_array_equal(vb, np.full((2, 3), -2, np.float32))
    assert client.clock_value == 0


def test_learning_rate_scale(client):
    t = client.create_table("lr", kind="sparse", dim=1, optimizer=ps.Optimizer.sgd(1.0))
    client.set_learning_rate_scale(0.25)
    t.push(u64(1), np.ones((1, 1), np.float32))
    client.set_learning_rate_scale(1.0)
    np.testing.assert_array_equal(t.pull(u64(1)), [[-0.25]])
    with pytest.raises(ValueError, match="scale"):
        client.set_learning_rate_scale(-1.0)


def test_torch_tensors(client):
    torch = pytest.importorskip("torch")
    t = client.create_table("torch", kind="sparse", dim=3, optimizer=ps.Optimizer.sgd(1.0))
    keys = torch.tensor([4, 8], dtype=torch.int64)  # torch has no uint64: int64 is accepted
    t.push(keys.numpy(), torch.ones(2, 3).numpy())
    values = torch.from_numpy(t.pull(keys.numpy()))
    assert torch.equal(values, torch.full((2, 3), -1.0))
    # Tensors directly (their zero-copy .numpy() view), out= included: the tensor is returned.
    out = torch.zeros(2, 3)
    result = t.pull(keys, out=out)
    assert result is out
    assert torch.equal(out, torch.full((2, 3), -1.0))
    t.push(keys, torch.ones(2, 3))
    assert torch.equal(t.pull(keys, out=out), torch.full((2, 3), -2.0))
    with pytest.raises(TypeError, match="requires grad"):
        t.push(keys, torch.ones(2, 3, requires_grad=True))


def test_negative_int64_keys_are_rejected(client):
    t = client.create_table("neg", kind="sparse", dim=1)
    with pytest.raises(ValueError, match=r"non-negative.*keys\[1\] = -5"):
        t.pull(np.array([3, -5], np.int64))


def test_wait_releases_the_gil(cluster, job_id):
    """Sync mode with two workers in two threads of this process: worker 0's pull at clock 1
    waits for worker 1's clock-0 push, which another Python thread sends while worker 0 waits;
    were the GIL held, this would deadlock until the deadline."""
    clients = [ps.Client(cluster.addresses, job_id=job_id, worker_id=w, num_workers=2,
                         consistency="sync", rpc_timeout=20.0) for w in range(2)]
    try:
        tables = [c.create_table("sync", kind="dense", dim=2, rows=2,
                                 optimizer=ps.Optimizer.sgd(1.0)) for c in clients]
        keys = np.arange(2, dtype=np.uint64)
        request = clients[0].push_pull_async(
            push=[(tables[0], keys, np.full((2, 2), 1, np.float32))], pull=[(tables[0], keys)])
        results = {}

        def worker1():
            time.sleep(0.5)
            results[1] = clients[1].push_pull(
                push=[(tables[1], keys, np.full((2, 2), 2, np.float32))],
                pull=[(tables[1], keys)])[0]

        thread = threading.Thread(target=worker1)
        thread.start()
        start = time.monotonic()
        [values] = request.wait()
        thread.join(timeout=30)
        assert time.monotonic() - start < 15
        np.testing.assert_array_equal(values, np.full((2, 2), -3, np.float32))
        np.testing.assert_array_equal(results[1], np.full((2, 2), -3, np.float32))
    finally:
        for c in clients:
            c.close()


def test_destroying_client_with_requests_in_flight(cluster, job_id):
    c = ps.Client(cluster.addresses, job_id=job_id)
    t = c.create_table("inflight", kind="sparse", dim=64)
    keys = np.arange(5000, dtype=np.uint64)
    requests = [t.pull_async(keys) for _ in range(10)]
    del c, t  # the requests keep the connection
    gc.collect()
    for r in requests:
        assert r.wait(timeout=60).shape == (5000, 64)


def test_close_with_requests_in_flight(cluster, job_id):
    c = ps.Client(cluster.addresses, job_id=job_id)
    t = c.create_table("closing", kind="sparse", dim=64)
    keys = np.arange(5000, dtype=np.uint64)
    requests = [t.pull_async(keys) for _ in range(10)]
    c.close()
    for r in requests:
        try:
            assert r.wait(timeout=60).shape == (5000, 64)  # finished before the close
        except ps.CancelledError:
            pass
    assert c.closed


def test_interpreter_exit_with_requests_in_flight(cluster, job_id):
    script = textwrap.dedent(f"""
        import numpy as np, paramserver as ps
        c = ps.Client({cluster.addresses!r}, job_id={job_id!r})
        t = c.create_table("exit", kind="sparse", dim=64)
        keys = np.arange(5000, dtype=np.uint64)
        pending = [t.pull_async(keys) for _ in range(10)]
        pushes = [t.push_async(keys, np.ones((5000, 64), np.float32)) for _ in range(3)]
        print("exiting", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "exiting" in proc.stdout


def test_help_reads_well():
    import pydoc
    text = pydoc.render_doc(ps, renderer=pydoc.plaintext)
    for word in ("Client", "create_table", "push_pull", "Initializer", "Optimizer",
                 "InvalidArgumentError", "zero-copy"):
        assert word in text, word
    assert ps.Client.pull.__doc__ and ps.Table.__doc__ and ps.Request.wait.__doc__


def test_wait_timeout(cluster, job_id):
    """A sync pull waits for the other worker: wait(timeout) raises TimeoutError and leaves the
    request in flight; once the other worker pushes, it completes."""
    clients = [ps.Client(cluster.addresses, job_id=job_id, worker_id=w, num_workers=2,
                         consistency="sync", rpc_timeout=20.0) for w in range(2)]
    try:
        t0, t1 = [c.create_table("sync", kind="dense", dim=1, rows=1,
                                 optimizer=ps.Optimizer.sgd(1.0)) for c in clients]
        keys = np.zeros(1, np.uint64)
        request = clients[0].push_pull_async(push=[(t0, keys, np.ones((1, 1), np.float32))],
                                             pull=[(t0, keys)])
        with pytest.raises(TimeoutError, match="not done after 0.3 s"):
            request.wait(timeout=0.3)
        assert not request.done() and "in flight" in repr(request)
        clients[1].push_pull(push=[(t1, keys, np.ones((1, 1), np.float32))], pull=[(t1, keys)])
        [values] = request.wait(timeout=20)
        np.testing.assert_array_equal(values, [[-2.0]])
    finally:
        for c in clients:
            c.close()
