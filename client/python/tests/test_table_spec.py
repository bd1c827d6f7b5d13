"""create_table's spec= and other keywords: any TableSpec setting by the protocol's names,
against real ps_server processes (paramserver.torch's layers pass them on)."""

import numpy as np
import pytest

import paramserver as ps


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def test_text_dict_and_keywords_make_the_same_table(client):
    init = ps.Initializer.constant(1.0 + 2.0**-12)
    t = client.create_table("s", kind="sparse", dim=1, initializer=init,
                            spec="storage: BF16 admission { min_count: 2 }")
    zero = np.zeros((1, 1), np.float32)
    t.push(u64(3), zero)  # counted, not admitted: the pull answers the initializer's value
    np.testing.assert_array_equal(t.pull(u64(3)), [[1.0 + 2.0**-12]])
    t.push(u64(3), zero)  # admitted: a row, stored as bf16
    np.testing.assert_array_equal(t.pull(u64(3)), [[1.0]])
    # The same table however it is written: create_table is idempotent for the same spec.
    for same in [dict(storage="bf16", admission={"min_count": 2}),
                 dict(spec={"storage": "BF16", "admission": {"min_count": 2}}),
                 dict(spec={"storage": "BF16"}, admission={"min_count": 2}),
                 dict(spec={"admission": {"minCount": 2}}, storage="bf16"),
                 dict(spec={"storage": "BF16", "admission": {"min_count": np.uint8(2)}})]:
        assert client.create_table("s", kind="sparse", dim=1, initializer=init, **same).id == t.id
    with pytest.raises(ps.AlreadyExistsError):  # another spec under the same id
        client.create_table("s", kind="sparse", dim=1, initializer=init, spec="storage: FP16")


def test_a_setting_without_a_keyword_of_its_own_reaches_the_check_and_the_servers(client):
    # tier has no keyword of create_table's own (disk_tier is the older one): these servers,
    # started without --tier_roots, refuse it, so it reached them.
    for kwargs in [dict(tier={"disk": True}), dict(spec="tier { disk: true }"),
                   dict(spec={"tier": {"disk": True}})]:
        with pytest.raises(ps.FailedPreconditionError, match="--tier_roots"):
            client.create_table("t", kind="sparse", dim=1, eviction={"max_rows": 10}, **kwargs)
        with pytest.raises(ValueError, match="tier.disk needs eviction.max_rows"):
            client.create_table("t", kind="sparse", dim=1, **kwargs)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"evction": {"max_rows": 1}}, ValueError, "evction"),
    ({"spec": "evction { max_rows: 1 }"}, ValueError, 'no field named "evction"'),
    ({"spec": "storage: FP8"}, ValueError, "FP8"),
    ({"spec": {"eviction": {"max_rows": 0}}}, ValueError, "eviction.max_rows = 0"),
    ({"spec": "dim: 3"}, ValueError, "spec sets dim"),
    ({"spec": {"optimizer": {"kind": "ADAM"}}}, ValueError, "spec sets optimizer"),
    ({"spec": 5}, TypeError, "spec must be a str"),
    ({"spec": {"eviction": {"max_rows": object()}}}, TypeError, "must be a dict, list, str"),
    ({"spec": "storage: BF16", "tier": {"disk": True}}, TypeError, "takes no other"),
    ({"spec": {"tier": {"disk": True}}, "tier": {"disk": False}}, TypeError, "both"),
])
def test_bad_settings_raise_naming_the_field(client, kwargs, error, message):
    with pytest.raises(error, match=message):
        client.create_table("bad", kind="sparse", dim=1, **kwargs)
    with pytest.raises(ps.NotFoundError):
        client.table("bad")


def test_torch_layers_pass_the_settings_to_their_tables(client):
    torch = pytest.importorskip("torch")
    import paramserver.torch as pst

    emb = pst.Embedding(client, "temb", 1, initializer=ps.Initializer.constant(1.0 + 2.0**-12),
                        spec="storage: BF16")
    np.testing.assert_array_equal(emb(torch.tensor([4])).detach().numpy(), [[1.0]])
    with pytest.raises(ps.FailedPreconditionError, match="--tier_roots"):
        pst.Embedding(client, "tiered", 1, eviction={"max_rows": 10}, tier={"disk": True})
    with pytest.raises(ValueError, match="not to an existing Table"):
        pst.Embedding(emb.table, tier={"disk": True})
    with pytest.raises(ValueError, match="tier.disk is for SPARSE tables"):
        pst.DenseParameters(client, torch.nn.Linear(2, 1), prefix="dp.",
                            spec="tier { disk: true }")
