"""paramserver.torch: the Embedding layer and DenseParameters against real servers."""

import math

import numpy as np
import pytest

import paramserver as ps

torch = pytest.importorskip("torch")
import paramserver.torch as pst  # noqa: E402


class CountingTable:
    """Wraps a Table, counting pulls and pushes."""

    def __init__(self, table):
        self.table = table
        self.pulls = []
        self.pushes = []

    def __getattr__(self, name):
        return getattr(self.table, name)

    def pull(self, keys, out=None):
        self.pulls.append(np.array(keys))
        return self.table.pull(keys, out)

    def push(self, keys, grads):
        self.pushes.append((np.array(keys), np.array(grads)))
        return self.table.push(keys, grads)

    def push_async(self, keys, grads):
        self.pushes.append((np.array(keys), np.array(grads)))
        return self.table.push_async(keys, grads)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_embedding_pulls_unique_ids_and_pushes_summed_gradients(client):
    table = client.create_table("emb", kind="sparse", dim=3,
                                initializer=ps.Initializer.constant(0.5),
                                optimizer=ps.Optimizer.sgd(1.0))
    emb = pst.Embedding(table)
    counting = CountingTable(table)
    emb.table = counting
    ids = torch.tensor([[7, 3, 7], [3, 7, 11]])
    out = emb(ids)
    assert out.shape == (2, 3, 3) and out.dtype == torch.float32
    assert torch.equal(out, torch.full((2, 3, 3), 0.5))
    assert len(counting.pulls) == 1
    np.testing.assert_array_equal(counting.pulls[0], [3, 7, 11])  # unique ids, one pull
    # d(sum of out * weight)/d(row) = sum over the row's occurrences of the weight.
    weights = torch.arange(18, dtype=torch.float32).reshape(2, 3, 3)
    (out * weights).sum().backward()
    assert len(counting.pushes) == 1
    keys, grads = counting.pushes[0]
    np.testing.assert_array_equal(keys, [3, 7, 11])
    expected = {3: weights[0, 1] + weights[1, 0], 7: weights[0, 0] + weights[0, 2] + weights[1, 1],
                11: weights[1, 2]}
    for i, k in enumerate([3, 7, 11]):
        np.testing.assert_array_equal(grads[i], expected[k].numpy())
    rows = table.pull(np.array([3, 7, 11], np.uint64))
    for i, k in enumerate([3, 7, 11]):
        np.testing.assert_array_equal(rows[i], 0.5 - expected[k].numpy())
    # Without autograd: a pull, no push.
    with torch.no_grad():
        emb(torch.tensor([3]))
    assert len(counting.pulls) == 2 and len(counting.pushes) == 1


def test_embedding_created_from_client_in_a_model(client):
    torch.manual_seed(0)
    emb = pst.Embedding(client, "words", dim=4, initializer=ps.Initializer.normal(0.1, seed=2),
                        optimizer=ps.Optimizer.sgd(0.5))
    assert emb.table.kind == "sparse" and emb.dim == 4 and "words" in repr(emb)
    assert list(emb.parameters()) == []
    head = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    ids = torch.tensor([1, 2, 3, 2])
    before = emb.table.pull(np.array([1, 2, 3], np.uint64)).copy()
    head_before = head.weight.detach().clone()
    losses = []
    for _ in range(20):
        loss = (head(emb(ids)).squeeze(1) - torch.tensor([1.0, -1.0, 1.0, -1.0])).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    after = emb.table.pull(np.array([1, 2, 3], np.uint64))
    assert not np.array_equal(before, after)  # the servers trained the rows
    assert not torch.equal(head_before, head.weight)  # torch trained the head
    assert losses[-1] < losses[0]


def test_embedding_async_push_and_bad_ids(client):
    emb = pst.Embedding(client, "async_emb", dim=2, initializer=ps.Initializer.zeros(),
                        optimizer=ps.Optimizer.sgd(1.0), async_push=True, grad_scale=0.5)
    emb(torch.tensor([5, 5, 6])).sum().backward()
    emb.flush()
    np.testing.assert_array_equal(emb.table.pull(np.array([5, 6], np.uint64)),
                                  [[-1.0, -1.0], [-0.5, -0.5]])
    with pytest.raises(ValueError, match="non-negative"):
        emb(torch.tensor([1, -2]))
    with pytest.raises(TypeError, match="integer"):
        emb(torch.tensor([1.0]))
    assert emb(torch.zeros(0, 3, dtype=torch.int64)).shape == (0, 3, 2)


def test_dense_parameters_layout_and_initializers(client):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.sgd(1.0), prefix="m/",
                                 seed=3)
    tables = params.tables
    assert sorted(tables) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    w0 = tables["0.weight"]
    assert (w0.name, w0.kind, w0.rows, w0.dim) == ("m/0.weight", "dense", 4, 6)
    assert (tables["0.bias"].rows, tables["0.bias"].dim) == (1, 4)
    # The module now holds the servers' values: Glorot-uniform weights, zero biases.
    limit = math.sqrt(6.0 / (4 + 6))
    assert torch.all(model[0].weight.abs() <= limit) and model[0].weight.abs().max() > 0
    assert torch.equal(model[0].bias, torch.zeros(4))
    np.testing.assert_array_equal(w0.pull(np.arange(4, dtype=np.uint64)),
                                  model[0].weight.detach().numpy())
    # The same seed and names give the same values on another client (another worker).
    other = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    pst.DenseParameters(client, other, optimizer=ps.Optimizer.sgd(1.0), prefix="m/", seed=3)
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a, b)


def test_dense_parameters_push_pull(client):
    model = torch.nn.Linear(3, 2)
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.sgd(0.5),
                                 initializer=ps.Initializer.constant(1.0))
    assert torch.equal(model.weight, torch.ones(2, 3)) and torch.equal(model.bias, torch.ones(2))
    x = torch.tensor([[1.0, 2.0, 3.0]])
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()  # d/dW = x for each output row, d/db = 1
    assert client.clock_value == 0
    params.push_pull(zero_grad=True)
    assert client.clock_value == 1
    assert model.weight.grad is None
    expected_w = torch.ones(2, 3) - 0.5 * x.expand(2, 3)
    assert torch.equal(model.weight.detach(), expected_w)
    assert torch.equal(model.bias.detach(), torch.full((2,), 0.5))
    # push() and pull() separately; parameters without a gradient are skipped.
    model.zero_grad(set_to_none=True)
    (model.weight.sum() * 2).backward()
    assert model.bias.grad is None
    params.push()
    assert torch.equal(model.weight.detach(), expected_w)  # not pulled yet
    params.pull()
    assert torch.equal(model.weight.detach(), expected_w - 1.0)
    assert torch.equal(model.bias.detach(), torch.full((2,), 0.5))
    # Asynchronously.
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    params.push_pull_async().wait()
    assert torch.equal(model.bias.detach(), torch.zeros(2))


def test_dense_parameters_sync_scales_by_workers(cluster, job_id):
    clients = [ps.Client(cluster.addresses, job_id=job_id, worker_id=w, num_workers=2,
                         consistency="sync", rpc_timeout=20.0) for w in range(2)]
    try:
        models = [torch.nn.Linear(2, 1, bias=False) for _ in clients]
        params = [pst.DenseParameters(c, m, optimizer=ps.Optimizer.sgd(1.0),
                                      initializer=ps.Initializer.zeros())
                  for c, m in zip(clients, models)]
        assert params[0].grad_scale == 0.5
        for w, m in enumerate(models):
            m.weight.grad = torch.full((1, 2), float(w + 1))
        requests = [p.push_pull_async() for p in params]
        for r in requests:
            r.wait(timeout=30)
        for m in models:  # the mean of the two workers' gradients (1 and 2) was applied
            assert torch.equal(m.weight.detach(), torch.full((1, 2), -1.5))
    finally:
        for c in clients:
            c.close()


def test_dense_parameters_rejects_non_float32(client):
    with pytest.raises(TypeError, match="float32"):
        pst.DenseParameters(client, torch.nn.Linear(2, 2).double())
