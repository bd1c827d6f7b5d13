"""create_table's storage=, admission= and eviction= against real ps_server processes."""

import numpy as np
import pytest

import paramserver as ps


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def test_key_not_admitted_pulls_its_initializer_and_its_push_is_dropped(client):
    t = client.create_table("adm", kind="sparse", dim=2, initializer=ps.Initializer.constant(1.0),
                            optimizer=ps.Optimizer.sgd(0.5), admission={"min_count": 2},
                            eviction={"max_rows": 1000}, storage="fp16")
    key = u64(42)
    grad = np.ones((1, 2), np.float32)
    t.push(key, grad)  # counted, dropped: no row
    np.testing.assert_array_equal(t.pull(key), [[1.0, 1.0]])
    t.push(key, grad)  # the second push admits the key; its row starts from the initializer
    np.testing.assert_array_equal(t.pull(key), [[0.5, 0.5]])


def test_storage_bf16_rounds_values(client):
    t = client.create_table("bf", kind="sparse", dim=1,
                            initializer=ps.Initializer.constant(1.0 + 2.0**-12), storage="bf16")
    np.testing.assert_array_equal(t.pull(u64(3)), [[1.0]])


@pytest.mark.parametrize("kwargs, message", [
    ({"storage": "fp8"}, "storage must be"),
    ({"admission": {"min_count": 256}}, "min_count"),
    ({"admission": {"probability": 0.0}}, "probability"),
    ({"admission": {"minimum": 2}}, "unknown key 'minimum'"),
    ({"eviction": {"max_rows": -1}}, "max_rows"),
    ({"eviction": {"ttl": 5}}, "unknown key 'ttl'"),
])
def test_bad_features_raise_value_error(client, kwargs, message):
    with pytest.raises(ValueError, match=message):
        client.create_table("bad", kind="sparse", dim=1, **kwargs)


def test_admission_must_be_a_dict(client):
    with pytest.raises(TypeError, match="admission must be a dict"):
        client.create_table("bad", kind="sparse", dim=1, admission=2)


def test_dense_table_with_eviction_is_refused_by_the_check(client):
    with pytest.raises(ValueError, match="eviction"):
        client.create_table("dense", kind="dense", rows=4, dim=1, eviction={"max_rows": 2})


def test_torch_embedding_passes_the_options_to_its_table(client):
    torch = pytest.importorskip("torch")
    import paramserver.torch as pst

    emb = pst.Embedding(client, "temb", 2, initializer=ps.Initializer.constant(1.0),
                        optimizer=ps.Optimizer.sgd(0.5), admission={"min_count": 2},
                        storage="bf16")
    ids = torch.tensor([5])
    for _ in range(2):  # the first push is dropped (not admitted), the second admits
        emb(ids).sum().backward()
        emb.flush()
    np.testing.assert_array_equal(emb.table.pull(u64(5)), [[0.5, 0.5]])
    with pytest.raises(ValueError, match="not to an existing Table"):
        pst.Embedding(emb.table, storage="fp16")


def test_codecs_compress_pushes_and_pulls(client):
    t = client.create_table("fp16w", kind="dense", rows=4, dim=3,
                            initializer=ps.Initializer.constant(1.0),
                            optimizer=ps.Optimizer.sgd(1.0), push_codec="fp16", pull_codec="fp16")
    keys = u64(0, 1, 2, 3)
    grad = np.full((4, 3), 2.0**-12, np.float32)
    t.push(keys, grad)
    np.testing.assert_allclose(t.pull(keys), 1.0 - 2.0**-12, atol=2.0**-10)
    k = client.create_table("topkw", kind="dense", rows=8, dim=4,
                            optimizer=ps.Optimizer.sgd(1.0), push_codec="topk", topk_ratio=0.25)
    keys = u64(*range(8))
    g = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
    for _ in range(20):
        k.push(keys, g)
    err = np.abs(k.pull(keys) + 20 * g).sum() / np.abs(20 * g).sum()
    assert err < 0.2, err  # error feedback: what was held back arrives later
    q = client.create_table("int8w", kind="dense", rows=4, dim=300,
                            initializer=ps.Initializer.constant(0.0),
                            optimizer=ps.Optimizer.sgd(1.0), pull_codec="int8")
    keys = u64(0, 1, 2, 3)
    grad = np.linspace(-2.0, 2.0, 1200, dtype=np.float32).reshape(4, 300)
    q.push(keys, grad)
    # a byte a value, a scale (max |value| / 127) per 256: within half a step of the values
    np.testing.assert_allclose(q.pull(keys), -grad, atol=0.5 * 2.0 / 127 * 1.0001)
    assert not np.array_equal(q.pull(keys), -grad)  # it is lossy: the pull was int8


def test_delta_pulls_pull_what_a_plain_table_pulls(client):
    kw = dict(kind="dense", rows=64, dim=50, initializer=ps.Initializer.constant(0.5),
              optimizer=ps.Optimizer.sgd(1.0))
    plain = client.create_table("plainw", **kw)
    delta = client.create_table("deltaw", pull_delta=True, **kw)
    delta8 = client.create_table("delta8w", pull_delta=True, pull_codec="int8", **kw)
    # fp16: what a whole fp16 pull gives, bit for bit (an unchanged value's rounding is too)
    half = client.create_table("halfw", pull_codec="fp16", **kw)
    delta16 = client.create_table("delta16w", pull_delta=True, pull_codec="fp16", **kw)
    keys = u64(*range(64))
    rng = np.random.default_rng(1)
    for step in range(10):
        g = np.zeros((64, 50), np.float32)
        g.flat[rng.choice(64 * 50, 30, replace=False)] = rng.normal(size=30)
        for t in (plain, delta, delta8, half, delta16):
            t.push(keys, g)
        np.testing.assert_array_equal(delta16.pull(keys), half.pull(keys))
        want = plain.pull(keys)
        np.testing.assert_array_equal(delta.pull(keys), want)
        sub = np.sort(rng.choice(64, 10, replace=False)).astype(np.uint64)
        np.testing.assert_array_equal(delta.pull(sub), plain.pull(sub))
        # int8: a changed value is off by at most half a scale (1/254 of the largest |value|
        # among its 256 changed ones, or of its chunk in a whole answer)
        np.testing.assert_allclose(delta8.pull(keys), want, atol=np.abs(want).max() / 127)
    with pytest.raises(ValueError, match="delta is for DENSE tables"):
        client.create_table("deltas", kind="sparse", dim=2, pull_delta=True)


def test_topk_momentum_correction_and_warm_up(client):
    # Momentum correction (Deep Gradient Compression): the client's velocity u = 0.5 u + g goes
    # into the residual v; the 25% largest |v| are sent and have v and u cleared; the servers
    # apply plain SGD. One row, so one block on one server: the reference below is exact.
    t = client.create_table("dgcw", kind="dense", rows=1, dim=32, optimizer=ps.Optimizer.sgd(1.0),
                            push_codec="topk", topk_ratio=0.25, topk_momentum=0.5)
    keys = u64(0)
    g = np.sin(np.arange(32, dtype=np.float32) * np.float32(0.7)).reshape(1, 32)
    u, v, w = np.zeros_like(g), np.zeros_like(g), np.zeros_like(g)
    for _ in range(30):
        t.push(keys, g)
        u = np.float32(0.5) * u + g
        v = v + u
        sent = np.argsort(-np.abs(v[0]), kind="stable")[:8]
        w[0, sent] -= v[0, sent]
        v[0, sent] = 0
        u[0, sent] = 0
    np.testing.assert_allclose(t.pull(keys), w, rtol=1e-5, atol=1e-5)
    assert np.abs(w + 30 * g).sum() > 0.2 * np.abs(30 * g).sum()  # not what plain topk sends
    # Warm-up: the first push of a row sends 0.25^(1/4) of its block (23 of 32 values), the
    # second 0.25^(2/4) (16), the third on 0.25 (8).
    wt = client.create_table("warmw", kind="dense", rows=1, dim=32,
                             optimizer=ps.Optimizer.sgd(1.0), push_codec="topk", topk_ratio=0.25,
                             topk_warmup_steps=3)
    wt.push(keys, g)
    assert np.count_nonzero(wt.pull(keys)) == 23
    bad = client.create_table
    with pytest.raises(ValueError, match="optimizer must be SGD, not ADAM"):
        bad("dgca", kind="dense", rows=2, dim=1, optimizer="adam", push_codec="topk",
            topk_ratio=0.5, topk_momentum=0.9)


@pytest.mark.parametrize("kwargs, message", [
    ({"push_codec": "fp8"}, "push_codec must be"),
    ({"push_codec": "topk", "topk_ratio": 0.1, "topk_momentum": 1.0}, "topk_momentum must be in"),
    ({"push_codec": "sign", "topk_momentum": 0.9}, "topk_momentum is for"),
    ({"push_codec": "topk", "topk_ratio": 0.1, "topk_warmup_steps": -1},
     "topk_warmup_steps must be in"),
    ({"push_codec": "fp16", "topk_warmup_steps": 5}, "topk_warmup_steps is for"),
    ({"push_codec": "topk"}, "needs topk_ratio"),
    ({"push_codec": "topk", "topk_ratio": 1.5}, "topk_ratio must be in"),
    ({"push_codec": "fp16", "topk_ratio": 0.1}, "topk_ratio is for"),
    ({"pull_codec": "sign"}, "pull_codec"),
    ({"push_codec": "int8"}, "int8 is for values"),
])
def test_bad_codecs_raise_value_error(client, kwargs, message):
    with pytest.raises(ValueError, match=message):
        client.create_table("badc", kind="dense", rows=2, dim=1, **kwargs)


def test_topk_on_a_sparse_table_is_refused(client):
    with pytest.raises(ValueError, match="is for DENSE tables"):
        client.create_table("badt", kind="sparse", dim=1, push_codec="sign")


def test_torch_dense_parameters_pass_the_codecs_to_their_tables(client):
    torch = pytest.importorskip("torch")
    import paramserver.torch as pst

    model = torch.nn.Linear(8, 2)
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.sgd(0.1), prefix="tc.",
                                 push_codec="topk", topk_ratio=0.5, pull_codec="bf16")
    loss = model(torch.ones(4, 8)).pow(2).sum()
    before = model.weight.detach().clone()
    loss.backward()
    params.push_pull()
    assert not torch.equal(before, model.weight.detach())  # the half that was sent moved it
    with pytest.raises(ValueError, match="needs topk_ratio"):
        pst.DenseParameters(client, model, prefix="td.", push_codec="topk")
    # pull_delta reaches the tables: the same training with and without it pulls the same
    # (float32 pushes: topk would pick per block, and the two tables' rows sit on other servers).
    models = [torch.nn.Linear(8, 2), torch.nn.Linear(8, 2)]
    both = [pst.DenseParameters(client, m, optimizer=ps.Optimizer.sgd(0.1), prefix=p,
                                initializer=ps.Initializer.constant(0.1), pull_delta=d)
            for m, p, d in zip(models, ["tp.", "tq."], [False, True])]
    for _ in range(3):
        for m, p in zip(models, both):
            m.zero_grad()
            m(torch.ones(4, 8)).pow(2).sum().backward()
            p.push_pull()
    assert torch.equal(models[0].weight, models[1].weight)
    with pytest.raises(ps.AlreadyExistsError):  # "tq." tables are delta ones: another spec
        pst.DenseParameters(client, models[1], optimizer=ps.Optimizer.sgd(0.1), prefix="tq.",
                            initializer=ps.Initializer.constant(0.1))
