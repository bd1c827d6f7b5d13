"""paramserver.torch on a device (the same code on CPU tensors here; on CUDA where PyTorch sees a
GPU, else those cases skip), Embedding.prefetch, and PyTorch's optimizer defaults."""

import warnings

import numpy as np
import pytest

import paramserver as ps

torch = pytest.importorskip("torch")
import paramserver.torch as pst  # noqa: E402

# Every device test runs on the CPU, and on CUDA when there is a GPU (else it skips, saying so).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"))]


class CountingTable:
    """Wraps a Table, counting its pulls (plain and background)."""

    def __init__(self, table):
        self.table = table
        self.pulls = 0
        self.background_pulls = 0

    def __getattr__(self, name):
        return getattr(self.table, name)

    def pull(self, keys, out=None):
        self.pulls += 1
        return self.table.pull(keys, out)

    def pull_async(self, keys, out=None):
        self.background_pulls += 1
        return self.table.pull_async(keys, out)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_on_device_pulls_and_pushes_like_on_the_cpu(client, device):
    table = client.create_table(f"emb_{device}", kind="sparse", dim=2,
                                initializer=ps.Initializer.constant(0.5),
                                optimizer=ps.Optimizer.sgd(1.0))
    emb = pst.Embedding(table).to(device)  # no parameters: .to() is a no-op, as for any module
    ids = torch.tensor([[4, 9], [9, 9]], device=device)
    out = emb(ids)
    assert out.device.type == device and out.shape == (2, 2, 2)
    assert torch.equal(out.cpu(), torch.full((2, 2, 2), 0.5))
    weights = torch.arange(8, dtype=torch.float32, device=device).reshape(2, 2, 2)
    (out * weights).sum().backward()  # row 4: weights[0, 0]; row 9: the other three summed
    rows = table.pull(np.array([4, 9], np.uint64))
    np.testing.assert_array_equal(rows, [[0.5, -0.5], [0.5 - 12.0, 0.5 - 15.0]])
    with torch.no_grad():
        again = emb(ids)
    assert again.device.type == device
    np.testing.assert_array_equal(again[0, 0].cpu().numpy(), rows[0])


@pytest.mark.parametrize("device", DEVICES)
def test_prefetch_serves_the_forward_of_the_same_ids(client, device):
    table = client.create_table(f"prefetch_{device}", kind="sparse", dim=3,
                                initializer=ps.Initializer.normal(0.1, seed=4),
                                optimizer=ps.Optimizer.sgd(1.0))
    emb = pst.Embedding(table)
    counting = CountingTable(table)
    emb.table = counting
    ids = torch.tensor([7, 3, 7, 12], device=device)
    with torch.no_grad():
        plain = emb(ids)
    assert counting.pulls == 1
    emb.prefetch(ids)
    assert counting.background_pulls == 1
    with torch.no_grad():
        prefetched = emb(ids)
    assert counting.pulls == 1  # the forward used the prefetch: no pull of its own
    assert prefetched.device.type == device and torch.equal(prefetched, plain)
    # Other ids than prefetched: the prefetch is dropped and the forward pulls.
    emb.prefetch(torch.tensor([1, 2], device=device))
    with torch.no_grad():
        other = emb(torch.tensor([3, 12], device=device))
    assert counting.pulls == 2 and torch.equal(other, plain[[1, 3]])
    # A prefetch is used once.
    with torch.no_grad():
        emb(ids)
    assert counting.pulls == 3


@pytest.mark.parametrize("device", DEVICES)
def test_prefetch_after_the_push_sees_the_update(client, device):
    emb = pst.Embedding(client, f"fresh_{device}", dim=2, initializer=ps.Initializer.zeros(),
                        optimizer=ps.Optimizer.sgd(1.0))
    ids = torch.tensor([5, 6], device=device)
    emb(ids).sum().backward()  # pushes a gradient of 1 per row: rows become -1
    emb.prefetch(ids)
    out = emb(ids)
    assert torch.equal(out.detach().cpu(), torch.full((2, 2), -1.0))
    out.sum().backward()  # a forward served by a prefetch pushes as any other
    np.testing.assert_array_equal(emb.table.pull(np.array([5, 6], np.uint64)),
                                  np.full((2, 2), -2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_dense_parameters_on_device_push_pull(client, device):
    model = torch.nn.Linear(3, 2).to(device)
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.sgd(0.5),
                                 initializer=ps.Initializer.constant(1.0), prefix=f"{device}/")
    assert model.weight.device.type == device
    assert torch.equal(model.weight.detach().cpu(), torch.ones(2, 3))
    x = torch.tensor([[1.0, 2.0, 3.0]], device=device)
    model(x).sum().backward()  # d/dW = x for each output row, d/db = 1
    params.push_pull(zero_grad=True)
    expected_w = torch.ones(2, 3) - 0.5 * x.cpu().expand(2, 3)
    assert model.weight.device.type == device
    assert torch.equal(model.weight.detach().cpu(), expected_w)
    assert torch.equal(model.bias.detach().cpu(), torch.full((2,), 0.5))
    model(x).sum().backward()
    params.push_pull_async().wait(timeout=30)
    assert torch.equal(model.bias.detach().cpu(), torch.zeros(2))


@pytest.mark.parametrize("device", DEVICES)
def test_dense_parameters_follow_the_module_to_a_device(client, device):
    model = torch.nn.Linear(2, 1, bias=False)
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.sgd(1.0),
                                 initializer=ps.Initializer.zeros(), prefix=f"moved_{device}/")
    model.to(device)  # after DenseParameters: each call looks where the parameters are
    model.weight.grad = torch.full((1, 2), 2.0, device=device)
    params.push_pull()
    assert model.weight.device.type == device
    assert torch.equal(model.weight.detach().cpu(), torch.full((1, 2), -2.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_host_buffers_are_pinned():
    assert pst._pinned_rows(2, 3, torch.device("cuda")).is_pinned()
    assert not pst._pinned_rows(2, 3, torch.device("cpu")).is_pinned()


def test_torch_defaults_are_torch_optim_adagrads():
    torch_adagrad = torch.optim.Adagrad([torch.zeros(1, requires_grad=True)]).defaults
    opt = pst.torch_defaults(ps.Optimizer.adagrad(0.05))
    assert opt.kind == "adagrad" and opt.learning_rate == pytest.approx(0.05)
    assert opt.initial_accumulator == torch_adagrad["initial_accumulator_value"] == 0
    # Where the server's defaults already are PyTorch's, nothing is set.
    assert opt.epsilon is None and torch_adagrad["eps"] == 1e-10
    assert pst.torch_defaults("adagrad").initial_accumulator == 0
    # Set fields are kept; other kinds are returned as they are.
    assert pst.torch_defaults(ps.Optimizer.adagrad(0.05, initial_accumulator=0.2)) \
        .initial_accumulator == pytest.approx(0.2)
    adam = ps.Optimizer.adam(0.01)
    assert pst.torch_defaults(adam) is adam and pst.torch_defaults(None) is None
    with pytest.raises(TypeError):
        pst.torch_defaults(3)


def test_dense_parameters_adagrad_trains_as_torch_optim_adagrad(client):
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 2)
    reference = torch.nn.Linear(4, 2)
    params = pst.DenseParameters(client, model, optimizer=ps.Optimizer.adagrad(0.05),
                                 prefix="adagrad/")
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adagrad(reference.parameters(), lr=0.05)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    for _ in range(3):
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(m(x), y).backward()
        params.push_pull()
        optimizer.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)


def test_embedding_on_a_table_with_the_servers_adagrad_defaults_warns(client):
    # As a job file declares it (or a client without paramserver.torch creates it).
    zeros = ps.Initializer.zeros()
    client.create_table("declared", kind="sparse", dim=2, initializer=zeros,
                        optimizer=ps.Optimizer.adagrad(0.1))
    with pytest.warns(UserWarning, match="already exists with the server's defaults"):
        emb = pst.Embedding(client, "declared", dim=2, initializer=zeros,
                            optimizer=ps.Optimizer.adagrad(0.1))
    assert emb(torch.tensor([1])).shape == (1, 2)
    # A table created by paramserver.torch is found again without a warning.
    pst.Embedding(client, "made_here", dim=2, optimizer=ps.Optimizer.adagrad(0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pst.Embedding(client, "made_here", dim=2, optimizer=ps.Optimizer.adagrad(0.1))
    # Another spec altogether stays an error.
    with pytest.raises(ps.AlreadyExistsError):
        pst.Embedding(client, "made_here", dim=2, optimizer=ps.Optimizer.sgd(0.1))
