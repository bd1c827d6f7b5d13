"""PyTorch helpers (CPU): model parameters that live in parameter-server tables.

Embedding
    A ``torch.nn.Module`` whose rows live in a sparse table. ``forward(ids)`` pulls the rows of
    the batch's unique ids (one pull) and returns ``ids.shape + (dim,)`` embeddings; the
    backward pass sums the gradients per unique id and pushes them (one push): the servers'
    optimizer updates the rows. The layer has no torch parameters, so a torch optimizer over
    ``model.parameters()`` handles the rest of the model as usual.

DenseParameters
    Keeps a module's parameters in dense tables (one per parameter): ``pull()`` copies the
    servers' values into the parameters (in place, no copy through Python), ``push()`` sends
    each parameter's ``.grad``, ``push_pull()`` does both in one round trip and advances the
    clock (one training step). The server-side optimizer replaces the torch optimizer.

A training loop with both::

    import torch, paramserver as ps, paramserver.torch as pst

    client = ps.Client(servers, job_id="ctr", consistency="sync")
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    emb = pst.Embedding(client, "emb", dim=16, optimizer=ps.Optimizer.adagrad(0.05))
    dense = pst.DenseParameters(client, model, optimizer=ps.Optimizer.adam(0.001),
                                prefix="mlp/")
    for ids, labels in batches:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(emb(ids).sum(1)).squeeze(1), labels)
        loss.backward()          # pushes the embedding gradients
        dense.push_pull()        # pushes the dense gradients, advances the clock, pulls
"""

import contextlib
import math
import time

import numpy as np
import torch

import paramserver as _ps

__all__ = ["Embedding", "DenseParameters", "glorot_uniform", "communication"]

# What the helpers of this module spent waiting on the servers, process-wide.
_comm = {"seconds": 0.0, "keys_pulled": 0, "keys_pushed": 0}


def communication():
    """{"seconds", "keys_pulled", "keys_pushed"}: the time this process's Embedding and
    DenseParameters calls waited on the servers (pulls, pushes, push_pull, waits for a
    background push) and the keys they moved, since the process started. The difference of two
    readings gives a step's (or an epoch's) share of communication."""
    return dict(_comm)


@contextlib.contextmanager
def _waiting(pulled=0, pushed=0):
    start = time.perf_counter()
    try:
        yield
    finally:
        _comm["seconds"] += time.perf_counter() - start
        _comm["keys_pulled"] += pulled
        _comm["keys_pushed"] += pushed


def glorot_uniform(rows, dim, seed=0):
    """The Glorot (Xavier) uniform initializer of a (rows, dim) table: values uniform in
    [-sqrt(6 / (rows + dim)), +sqrt(6 / (rows + dim))), as the built-in ``fashion_mlp`` model
    initializes its weight tables."""
    limit = math.sqrt(6.0 / float(rows + dim))
    return _ps.Initializer.uniform(-limit, limit, seed=seed)


def _float32_rows(tensor, rows, dim, what):
    """A (rows, dim) numpy view of a contiguous float32 CPU tensor's memory (no copy)."""
    if tensor.dtype != torch.float32:
        raise TypeError(f"{what} must be float32, got {tensor.dtype}")
    if tensor.device.type != "cpu":
        raise TypeError(f"{what} must be on the CPU, got {tensor.device}")
    if not tensor.is_contiguous():
        raise ValueError(f"{what} must be contiguous")
    return tensor.detach().numpy().reshape(rows, dim)


class _Lookup(torch.autograd.Function):
    """rows[inverse] forward; backward sums the gradients per unique row and pushes them."""

    @staticmethod
    def forward(ctx, anchor, rows, inverse, keys, layer):
        ctx.save_for_backward(inverse)
        ctx.keys = keys
        ctx.layer = layer
        ctx.num_rows = rows.shape[0]
        return rows.index_select(0, inverse)

    @staticmethod
    def backward(ctx, grad_out):
        (inverse,) = ctx.saved_tensors
        grad_rows = torch.zeros(ctx.num_rows, grad_out.shape[1], dtype=torch.float32)
        grad_rows.index_add_(0, inverse, grad_out.to(torch.float32))
        ctx.layer._push(ctx.keys, grad_rows)
        return None, None, None, None, None


class Embedding(torch.nn.Module):
    """An embedding layer whose rows live in a sparse parameter-server table.

    Embedding(source, name=None, dim=None, *, initializer=None, optimizer=None,
              grad_scale=1.0, async_push=False, storage="fp32", admission=None, eviction=None)

    source: a ``paramserver.Table`` to use (any kind: ids are its keys), or a
        ``paramserver.Client`` on which to create the sparse table ``name`` of ``dim`` floats
        per row with ``initializer`` (default: normal(0, 0.01)) and ``optimizer`` (default:
        the server's, sgd with learning rate 0.01); creating is idempotent, so every worker
        may do it.
    storage, admission, eviction: passed to ``create_table`` when the table is created here
        (``storage="fp16"``, ``admission={"min_count": 2}``, ``eviction={"max_rows": 10**6}``;
        the defaults are off); not with a Table. In a program job the job file's tables
        decide them (other values than the job file's raise InvalidArgumentError).
    grad_scale: multiplies the gradients before they are pushed (e.g. 1/num_workers in sync
        mode, to average over workers rather than sum).
    async_push: push in the background (the next forward, or ``flush()``, waits for it).

    ``forward(ids)`` takes an integer tensor (or array) of non-negative ids of any shape and
    returns a float32 tensor of shape ``ids.shape + (dim,)``. The batch's unique ids are pulled
    once; in training the backward pass pushes one summed gradient per unique id. The
    layer holds no torch parameters: the servers' optimizer trains it.
    """

    def __init__(self, source, name=None, dim=None, *, initializer=None, optimizer=None,
                 grad_scale=1.0, async_push=False, storage="fp32", admission=None, eviction=None):
        super().__init__()
        features = {"storage": storage, "admission": admission, "eviction": eviction}
        if isinstance(source, _ps.Table):
            if name is not None and name != source.name:
                raise ValueError(f"name {name!r} does not match the table's {source.name!r}")
            if dim is not None and dim != source.dim:
                raise ValueError(f"dim {dim} does not match the table's dim {source.dim}")
            if features != {"storage": "fp32", "admission": None, "eviction": None}:
                raise ValueError("storage, admission and eviction apply when Embedding creates "
                                 "the table (from a Client), not to an existing Table")
            table = source
        elif isinstance(source, _ps.Client):
            if name is None or dim is None:
                raise ValueError("Embedding(client, name, dim): name and dim are required to "
                                 "create the table")
            if initializer is None:
                initializer = _ps.Initializer.normal(0.01)
            table = source.create_table(name, kind="sparse", dim=dim, initializer=initializer,
                                        optimizer=optimizer, **features)
        else:
            raise TypeError("Embedding takes a paramserver.Table or paramserver.Client, got "
                            f"{type(source).__name__}")
        self.table = table
        self.grad_scale = float(grad_scale)
        self.async_push = bool(async_push)
        self._pending = None
        # Makes autograd call the lookup's backward (the pulled rows themselves need no grad).
        self._anchor = torch.zeros((), requires_grad=True)

    @property
    def dim(self):
        """Floats per row."""
        return self.table.dim

    def extra_repr(self):
        return f"table={self.table.name!r}, dim={self.table.dim}"

    def flush(self):
        """Waits for a background push (async_push=True); raises its error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            with _waiting():
                pending.wait()

    def _push(self, keys, grad_rows):
        if self.grad_scale != 1.0:
            grad_rows = grad_rows * self.grad_scale
        grads = grad_rows.numpy()
        if self.async_push:
            self.flush()
            _comm["keys_pushed"] += len(keys)
            self._pending = self.table.push_async(keys, grads)
        else:
            with _waiting(pushed=len(keys)):
                self.table.push(keys, grads)

    def forward(self, ids):
        ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
        self.flush()
        dim = self.table.dim
        flat = ids.reshape(-1).to(device="cpu", dtype=torch.int64)
        if flat.numel() == 0:
            return torch.zeros(*ids.shape, dim)
        unique, inverse = torch.unique(flat, sorted=True, return_inverse=True)
        keys = unique.contiguous().numpy()  # int64, checked non-negative by the pull
        with _waiting(pulled=len(keys)):
            rows = torch.from_numpy(self.table.pull(keys))
        if torch.is_grad_enabled():
            out = _Lookup.apply(self._anchor, rows, inverse, keys, self)
        else:
            out = rows.index_select(0, inverse)
        return out.view(*ids.shape, dim)


class DenseParameters:
    """Keeps the parameters of a torch module in dense parameter-server tables.

    DenseParameters(client, module, *, optimizer=None, prefix="", initializer=None, seed=0,
                    grad_scale=None, pull=True)

    One dense table per parameter (``module.named_parameters()``), named ``prefix + name``:
    a parameter of shape (s0, s1, ...) is stored as it is laid out in memory, in a table of
    rows = s0 and dim = s1 * s2 * ... (a 1-D parameter of n values: 1 row of dim n). An
    ``nn.Linear(in, out)`` weight, shaped (out, in), is thus a table of `out` rows of `in`
    floats (the built-in fashion_mlp stores the transpose, rows = in; training is the same).

    optimizer: the server-side optimizer of every table (a paramserver.Optimizer or a name).
    initializer: None (default): Glorot uniform (see glorot_uniform) for parameters of 2 or more
        dimensions, zeros for 1-D ones (biases), as the built-in fashion_mlp; or one
        paramserver.Initializer for all; or a callable (name, parameter, rows, dim) ->
        Initializer. The tables start from the initializer, not from the module's values: the
        module's values are overwritten by the first pull.
    seed: the seed of the default initializers (rows depend on the seed and the table name).
    grad_scale: multiplies the gradients before they are pushed. None (default): 1/num_workers
        in sync mode (the servers sum the workers' gradients; this averages them, as data
        parallel training does), else 1.
    pull: pull the tables' values into the module now.

    Training loop (the servers' optimizer replaces a torch optimizer)::

        params = DenseParameters(client, model, optimizer=paramserver.Optimizer.adam(0.001))
        for x, y in batches:
            loss = loss_fn(model(x), y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            params.push_pull()   # push the grads, advance the clock, pull the new values

    Pulls write the parameters' memory in place (outside autograd): pull before a forward pass,
    not between a forward pass and its backward pass.
    """

    def __init__(self, client, module, *, optimizer=None, prefix="", initializer=None, seed=0,
                 grad_scale=None, pull=True):
        if not isinstance(client, _ps.Client):
            raise TypeError(f"client must be a paramserver.Client, got {type(client).__name__}")
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        self.client = client
        self.module = module
        if grad_scale is None:
            grad_scale = 1.0 / client.num_workers if client.consistency == "sync" else 1.0
        self.grad_scale = float(grad_scale)
        self._entries = []
        for name, param in module.named_parameters():
            rows = int(param.shape[0]) if param.dim() >= 2 else 1
            dim = param.numel() // rows if rows > 0 else 0
            _float32_rows(param, rows, dim, f"parameter {name!r}")  # checks dtype, layout
            if initializer is None:
                init = (glorot_uniform(rows, dim, seed=seed) if param.dim() >= 2
                        else _ps.Initializer.zeros())
            elif isinstance(initializer, _ps.Initializer):
                init = initializer
            elif callable(initializer):
                init = initializer(name, param, rows, dim)
            else:
                raise TypeError("initializer must be None, a paramserver.Initializer or a "
                                f"callable, got {type(initializer).__name__}")
            table = client.create_table(prefix + name, kind="dense", dim=dim, rows=rows,
                                        initializer=init, optimizer=optimizer)
            keys = np.arange(rows, dtype=np.uint64)
            self._entries.append((name, param, table, keys, rows, dim))
        if pull:
            self.pull()

    @property
    def tables(self):
        """{parameter name: paramserver.Table}."""
        return {name: table for name, _, table, _, _, _ in self._entries}

    def _pull_ops(self):
        return [(table, keys, _float32_rows(param, rows, dim, f"parameter {name!r}"))
                for name, param, table, keys, rows, dim in self._entries]

    def _push_ops(self):
        ops = []
        for name, param, table, keys, rows, dim in self._entries:
            if param.grad is None:
                continue
            grad = param.grad.detach()
            if self.grad_scale != 1.0:
                grad = grad * self.grad_scale
            grad = grad.to(torch.float32).contiguous()
            ops.append((table, keys, _float32_rows(grad, rows, dim, f"gradient of {name!r}")))
        return ops

    def pull(self):
        """Copies the tables' current values into the module's parameters (in place)."""
        ops = self._pull_ops()
        with _waiting(pulled=sum(len(op[1]) for op in ops)):
            self.client.pull_many(ops)

    def push(self):
        """Pushes each parameter's .grad (parameters without one are skipped)."""
        ops = self._push_ops()
        if ops:
            with _waiting(pushed=sum(len(op[1]) for op in ops)):
                self.client.push_many(ops)

    def push_pull(self, zero_grad=False):
        """One training step's round trip: pushes the gradients, advances the clock, pulls the
        new values into the parameters. zero_grad: then set the gradients to None."""
        push, pull = self._push_ops(), self._pull_ops()
        with _waiting(pulled=sum(len(op[1]) for op in pull), pushed=sum(len(op[1]) for op in push)):
            self.client.push_pull(push=push, pull=pull)
        if zero_grad:
            self.module.zero_grad(set_to_none=True)

    def push_pull_async(self):
        """push_pull in the background: returns a paramserver.Request. Do not use the module
        (nor its gradients) until its wait() has returned."""
        return self.client.push_pull_async(push=self._push_ops(), pull=self._pull_ops())
