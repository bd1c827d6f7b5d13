"""PyTorch helpers: model parameters that live in parameter-server tables, for modules on the CPU
or on a CUDA device.

Embedding
    A ``torch.nn.Module`` whose rows live in a sparse table. ``forward(ids)`` pulls the rows of
    the batch's unique ids (one pull) and returns ``ids.shape + (dim,)`` embeddings; the
    backward pass sums the gradients per unique id and pushes them (one push): the servers'
    optimizer updates the rows. The layer has no torch parameters, so a torch optimizer over
    ``model.parameters()`` handles the rest of the model as usual. ``prefetch(ids)`` has the
    servers read the next batch's rows from their disk tier into RAM and pulls them in the
    background while the current step computes (``pull=False``: the servers' part only).

DenseParameters
    Keeps a module's parameters in dense tables (one per parameter): ``pull()`` copies the
    servers' values into the parameters (in place, no copy through Python), ``push()`` sends
    each parameter's ``.grad``, ``push_pull()`` does both in one round trip and advances the
    clock (one training step). The server-side optimizer replaces the torch optimizer.

On a CUDA device (ids, module and parameters moved with ``.to(device)``) the same code runs:
pulls land in page-locked (pinned) host buffers and go to the device with non_blocking copies;
gradients come back the same way before they are pushed. On the CPU there is no such copy:
DenseParameters' pulls write the parameters' own memory, the pushes read the gradients'.

Optimizers: ``Embedding`` and ``DenseParameters`` give their ``optimizer`` PyTorch's defaults
where the server's differ (see torch_defaults): ``Optimizer.adagrad(0.05)`` starts its
accumulator at 0, as ``torch.optim.Adagrad``, not at the server's 0.1.

A training loop with both::

    import torch, paramserver as ps, paramserver.torch as pst

    client = ps.Client(servers, job_id="ctr", consistency="sync")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)).to(device)
    emb = pst.Embedding(client, "emb", dim=16, optimizer=ps.Optimizer.adagrad(0.05))
    dense = pst.DenseParameters(client, model, optimizer=ps.Optimizer.adam(0.001),
                                prefix="mlp/")
    for ids, labels in batches:
        ids, labels = ids.to(device), labels.to(device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(emb(ids).sum(1)).squeeze(1), labels)
        loss.backward()          # pushes the embedding gradients
        dense.push_pull()        # pushes the dense gradients, advances the clock, pulls
"""

import contextlib
import math
import time
import warnings

import numpy as np
import torch

import paramserver as _ps

__all__ = ["Embedding", "DenseParameters", "glorot_uniform", "communication", "torch_defaults"]

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


# Where PyTorch's optimizers start from other values than the server's (proto/ps/v1/types.proto):
# {kind: {field: PyTorch's value}}. Adagrad: torch.optim.Adagrad's initial_accumulator_value is
# 0; the server's (TensorFlow's) is 0.1, which a model tuned in PyTorch barely learns with.
# The other defaults agree: Adagrad's eps 1e-10 and learning rate 0.01, Adam's betas
# (0.9, 0.999) and eps 1e-8, no weight decay. The momentum kind has no PyTorch counterpart
# default (torch.optim.SGD's momentum is 0, plain SGD): the server's 0.9 stays.
_TORCH_DEFAULTS = {"adagrad": {"initial_accumulator": 0.0}}
_OPTIMIZER_FIELDS = ("learning_rate", "momentum", "beta1", "beta2", "epsilon",
                     "initial_accumulator", "l1", "l2", "ftrl_beta", "weight_decay")


def torch_defaults(optimizer):
    """The optimizer with PyTorch's defaults in the fields it leaves unset where PyTorch's
    optimizers start from other values than the server: Adagrad's initial accumulator 0
    (torch.optim.Adagrad's initial_accumulator_value; the server's default is 0.1, as
    TensorFlow's). Fields that are set are kept; other kinds are returned as they are.
    ``optimizer``: a paramserver.Optimizer, a kind name ("adagrad", ...) or None (the server's
    default optimizer, sgd: returned as None). Embedding and DenseParameters apply this to
    their ``optimizer`` argument."""
    if optimizer is None:
        return None
    if isinstance(optimizer, str):
        optimizer = _ps.Optimizer(optimizer)
    if not isinstance(optimizer, _ps.Optimizer):
        raise TypeError("optimizer must be a paramserver.Optimizer, a name or None, got "
                        f"{type(optimizer).__name__}")
    defaults = _TORCH_DEFAULTS.get(optimizer.kind, {})
    unset = {f: v for f, v in defaults.items() if getattr(optimizer, f) is None}
    if not unset:
        return optimizer
    fields = {f: getattr(optimizer, f) for f in _OPTIMIZER_FIELDS}
    fields.update(unset)
    return _ps.Optimizer(optimizer.kind, **fields)


def _create_table(client, name, optimizer, **config):
    """client.create_table with torch_defaults(optimizer). Where the table already exists with
    `optimizer` as given, on the server's defaults (declared by a job file, or created by a
    client without this module), that table is used as it is, with a warning."""
    given = _ps.Optimizer(optimizer) if isinstance(optimizer, str) else optimizer
    torch_optimizer = torch_defaults(given)
    try:
        return client.create_table(name, optimizer=torch_optimizer, **config)
    except _ps.AlreadyExistsError:
        if torch_optimizer is given:  # no default of ours in it: another spec, a real conflict
            raise
    table = client.create_table(name, optimizer=given, **config)
    warnings.warn(f"table {name!r} already exists with the server's defaults for {given!r}, "
                  f"not PyTorch's ({torch_optimizer!r}); using it as it is", stacklevel=3)
    return table


def _pinned_rows(rows, dim, device):
    """A (rows, dim) float32 host tensor to copy to or from `device`: page-locked (pinned)
    when `device` is a CUDA device, so that copies run asynchronously at full bus speed."""
    pin = device.type == "cuda" and torch.cuda.is_available()
    return torch.empty((rows, dim), dtype=torch.float32, pin_memory=pin)


def _to_host(tensor, rows, dim):
    """`tensor` (any device) as a contiguous (rows, dim) float32 CPU tensor. From a CUDA device:
    a non_blocking copy into a pinned buffer, waited for (the push reads it next)."""
    if tensor.device.type == "cpu":
        return tensor.detach().to(torch.float32).contiguous().reshape(rows, dim)
    host = _pinned_rows(rows, dim, tensor.device)
    host.copy_(tensor.detach().reshape(rows, dim), non_blocking=True)
    _wait_for_copies(tensor.device)
    return host


def _wait_for_copies(device):
    """Waits until the work queued so far on `device`'s current stream (copies included) is
    done: the host may then read what was copied to it and rewrite what was copied from it."""
    if device.type == "cuda":
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        event.synchronize()


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
        # Summed on the gradients' device; _push brings them to the host.
        grad_rows = torch.zeros(ctx.num_rows, grad_out.shape[1], dtype=torch.float32,
                                device=grad_out.device)
        grad_rows.index_add_(0, inverse, grad_out.to(torch.float32))
        ctx.layer._push(ctx.keys, grad_rows)
        return None, None, None, None, None


class Embedding(torch.nn.Module):
    """An embedding layer whose rows live in a sparse parameter-server table.

    Embedding(source, name=None, dim=None, *, initializer=None, optimizer=None,
              grad_scale=1.0, async_push=False, storage="fp32", admission=None, eviction=None,
              disk_tier=False, spec=None, **settings)

    source: a ``paramserver.Table`` to use (any kind: ids are its keys), or a
        ``paramserver.Client`` on which to create the sparse table ``name`` of ``dim`` floats
        per row with ``initializer`` (default: normal(0, 0.01)) and ``optimizer`` (default:
        the server's, sgd with learning rate 0.01); creating is idempotent, so every worker
        may do it.
        ``optimizer`` gets PyTorch's defaults where the server's differ (torch_defaults).
    storage, admission, eviction, disk_tier: passed to ``create_table`` when the table is
        created here (``storage="fp16"``, ``admission={"min_count": 2}``,
        ``eviction={"max_rows": 10**6}``, ``disk_tier=True``: rows past max_rows go to the
        servers' disk tier; the defaults are off); not with a Table. In a program job the job file's tables
        decide them (other values than the job file's raise InvalidArgumentError).
    spec, **settings: any other table setting, passed to ``create_table`` in the same way
        (``spec='tier { disk: true }'``, ``tier={"disk": True}``).
    grad_scale: multiplies the gradients before they are pushed (e.g. 1/num_workers in sync
        mode, to average over workers rather than sum).
    async_push: push in the background (the next forward, or ``flush()``, waits for it).

    ``forward(ids)`` takes an integer tensor (or array) of non-negative ids of any shape, on
    any device, and returns a float32 tensor of shape ``ids.shape + (dim,)`` on the ids'
    device. The batch's unique ids are pulled once (on a CUDA device: into a pinned host
    buffer, then a non_blocking copy to the device); in training the backward pass pushes one
    summed gradient per unique id. The layer holds no torch parameters: the servers' optimizer
    trains it.

    ``prefetch(ids)`` starts pulling a later batch's rows in the background; the forward
    pass of those same ids then waits for that pull instead of starting its own (other ids:
    the prefetch is dropped). The rows are those the servers hold when the pull is served:
    call it after the current step's push (after ``loss.backward()``) for rows as fresh as a
    plain pull; before it, they miss the current step's update of those rows.
    ``prefetch(ids, pull=False)`` instead only announces the ids to the servers
    (``Table.prefetch``: a table with a disk tier reads their rows from disk into RAM and keeps
    them there for the pull; other tables ignore it): the forward pulls as usual, from RAM, and
    gets the current values wherever in the step the prefetch was called (for a table with a
    disk tier, call it as early as the next batch's ids are known).
    """

    def __init__(self, source, name=None, dim=None, *, initializer=None, optimizer=None,
                 grad_scale=1.0, async_push=False, storage="fp32", admission=None, eviction=None,
                 disk_tier=False, spec=None, **settings):
        super().__init__()
        features = {"storage": storage, "admission": admission, "eviction": eviction,
                    "disk_tier": disk_tier, "spec": spec, **settings}
        if isinstance(source, _ps.Table):
            if name is not None and name != source.name:
                raise ValueError(f"name {name!r} does not match the table's {source.name!r}")
            if dim is not None and dim != source.dim:
                raise ValueError(f"dim {dim} does not match the table's dim {source.dim}")
            if features != {"storage": "fp32", "admission": None, "eviction": None,
                            "disk_tier": False, "spec": None}:
                raise ValueError("storage, admission, eviction, disk_tier and other table "
                                 "settings apply when Embedding creates the table (from a "
                                 "Client), not to an existing Table")
            table = source
        elif isinstance(source, _ps.Client):
            if name is None or dim is None:
                raise ValueError("Embedding(client, name, dim): name and dim are required to "
                                 "create the table")
            if initializer is None:
                initializer = _ps.Initializer.normal(0.01)
            table = _create_table(source, name, optimizer, kind="sparse", dim=dim,
                                  initializer=initializer, **features)
        else:
            raise TypeError("Embedding takes a paramserver.Table or paramserver.Client, got "
                            f"{type(source).__name__}")
        self.table = table
        self.grad_scale = float(grad_scale)
        self.async_push = bool(async_push)
        self._pending = None
        self._prefetched = None  # _Prefetch of prefetch(), until a forward uses or drops it
        self._announced = None  # the last Table.prefetch request (kept until the next one)
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
        grads = _to_host(grad_rows, grad_rows.shape[0], grad_rows.shape[1]).numpy()
        if self.async_push:
            self.flush()
            _comm["keys_pushed"] += len(keys)
            self._pending = self.table.push_async(keys, grads)  # holds `grads` until done
        else:
            with _waiting(pushed=len(keys)):
                self.table.push(keys, grads)

    @staticmethod
    def _flat_ids(ids):
        """(ids as a tensor, its ids flattened to int64 on the CPU)."""
        ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
        return ids, ids.reshape(-1).to(device="cpu", dtype=torch.int64)

    def prefetch(self, ids, *, pull=True):
        """Prepares the forward pass of `ids` (a later batch).

        With ``pull=True`` (the default) it pulls the rows in the background: the forward pass
        of the same ids uses them, as they were when the pull was served (call it after the
        current step's push); a table with a disk tier reads the rows from disk for that pull.
        With ``pull=False`` it only announces the unique ids to the servers
        (``Table.prefetch``): those of a table with a disk tier read the rows from disk into RAM
        and keep them there until they are pulled (at most their --prefetch_pin, 30 s by
        default), those of other tables ignore it; the forward then pulls as usual, and its
        values are the current ones whenever the prefetch was sent. (Not both: a pinned row
        stays in RAM until a pull reads it, and the background pull may be served before the
        announcement.) Replaces an earlier prefetch that no forward used. Returns at once; an
        error of the announcement is not raised (the pull reads the rows from disk itself
        then), one of the pull is raised by the forward that uses it."""
        ids, flat = self._flat_ids(ids)
        self._prefetched = None  # dropping an unfinished pull waits for it
        if flat.numel() == 0:
            return
        if pull:
            self._prefetched = _Prefetch(self.table, flat, ids.device)
            return
        unique = torch.unique(flat, sorted=True).contiguous().numpy()
        # Not waited for: the request object waits for it only when dropped, and the next
        # prefetch replaces it.
        self._announced = self.table.prefetch(unique)

    def _rows(self, flat, device):
        """(rows of the unique ids of `flat` on `device`, inverse, keys): from the prefetch of
        these ids if there is one, else pulled now."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched.matches(flat, device):
            return prefetched.rows()
        unique, inverse = torch.unique(flat, sorted=True, return_inverse=True)
        keys = unique.contiguous().numpy()  # int64, checked non-negative by the pull
        host = _pinned_rows(len(keys), self.table.dim, device)
        with _waiting(pulled=len(keys)):
            # An announcement (prefetch with pull=False) is served before this pull, which then
            # finds its rows in RAM and ends their pins (a pull served first would leave them
            # pinned). Its error changes nothing: the pull reads from disk then.
            announced, self._announced = self._announced, None
            if announced is not None:
                try:
                    announced.wait()
                except _ps.Error:  # documented: not raised
                    pass
            self.table.pull(keys, host.numpy())
        return (host.to(device, non_blocking=True), inverse.to(device, non_blocking=True),
                keys)

    def forward(self, ids):
        ids, flat = self._flat_ids(ids)
        self.flush()
        dim = self.table.dim
        if flat.numel() == 0:
            return torch.zeros(*ids.shape, dim, device=ids.device)
        rows, inverse, keys = self._rows(flat, ids.device)
        if torch.is_grad_enabled():
            out = _Lookup.apply(self._anchor, rows, inverse, keys, self)
        else:
            out = rows.index_select(0, inverse)
        return out.view(*ids.shape, dim)


class _Prefetch:
    """A background pull of the unique ids of a batch into a (pinned) host buffer."""

    def __init__(self, table, flat, device):
        self.flat = flat
        self.device = device
        unique, self.inverse = torch.unique(flat, sorted=True, return_inverse=True)
        self.keys = unique.contiguous().numpy()
        self.host = _pinned_rows(len(self.keys), table.dim, device)
        self.request = table.pull_async(self.keys, self.host.numpy())
        _comm["keys_pulled"] += len(self.keys)

    def matches(self, flat, device):
        return device == self.device and torch.equal(flat, self.flat)

    def rows(self):
        """(rows on the device, inverse on the device, keys) once the pull is done."""
        with _waiting():
            self.request.wait()
        return (self.host.to(self.device, non_blocking=True),
                self.inverse.to(self.device, non_blocking=True), self.keys)


class DenseParameters:
    """Keeps the parameters of a torch module in dense parameter-server tables.

    DenseParameters(client, module, *, optimizer=None, prefix="", initializer=None, seed=0,
                    grad_scale=None, pull=True, push_codec="none", pull_codec="none",
                    topk_ratio=None, topk_momentum=None, topk_warmup_steps=None,
                    pull_delta=False, spec=None, **settings)

    One dense table per parameter (``module.named_parameters()``), named ``prefix + name``:
    a parameter of shape (s0, s1, ...) is stored as it is laid out in memory, in a table of
    rows = s0 and dim = s1 * s2 * ... (a 1-D parameter of n values: 1 row of dim n). An
    ``nn.Linear(in, out)`` weight, shaped (out, in), is thus a table of `out` rows of `in`
    floats (the built-in fashion_mlp stores the transpose, rows = in; training is the same).

    optimizer: the server-side optimizer of every table (a paramserver.Optimizer or a name),
        with PyTorch's defaults where the server's differ (torch_defaults).
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
    push_codec, pull_codec, topk_ratio, topk_momentum, topk_warmup_steps: compression on the
        wire of every table (passed to ``create_table``): e.g. ``push_codec="topk",
        topk_ratio=0.01`` sends the largest 1% of each gradient block (the rest is kept and sent
        later: error feedback), or ``push_codec="fp16", pull_codec="fp16"``. Default: float32
        both ways. With ``optimizer=Optimizer.sgd(lr), topk_momentum=0.9,
        topk_warmup_steps=100``: Deep Gradient Compression's momentum correction and warm-up.
    pull_delta: delta pulls (``create_table``'s pull_delta): the servers answer only the values
        changed since this client's last pull; pays with topk pushes and the sgd optimizer.
    spec, **settings: any other setting of every table, passed to ``create_table`` in the same
        way (``spec='pull_codec { codec: CODEC_INT8 }'``).

    Training loop (the servers' optimizer replaces a torch optimizer)::

        params = DenseParameters(client, model, optimizer=paramserver.Optimizer.adam(0.001))
        for x, y in batches:
            loss = loss_fn(model(x), y)
            model.zero_grad(set_to_none=True)
            loss.backward()
            params.push_pull()   # push the grads, advance the clock, pull the new values

    Parameters may live on the CPU or on a CUDA device, and may move (``module.to(device)``)
    at any time: each call looks where they are. On the CPU, pulls write the parameters'
    memory in place and pushes read the gradients' (no copy). On a CUDA device, pulls land in
    page-locked host buffers (one per parameter, kept) and go to the parameters with
    non_blocking copies; gradients come back through pinned buffers the same way.

    Pulls write the parameters (outside autograd): pull before a forward pass, not between a
    forward pass and its backward pass.
    """

    def __init__(self, client, module, *, optimizer=None, prefix="", initializer=None, seed=0,
                 grad_scale=None, pull=True, push_codec="none", pull_codec="none",
                 topk_ratio=None, topk_momentum=None, topk_warmup_steps=None, pull_delta=False,
                 spec=None, **settings):
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
            _check_parameter(param, f"parameter {name!r}")
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
            table = _create_table(client, prefix + name, optimizer, kind="dense", dim=dim,
                                  rows=rows, initializer=init, push_codec=push_codec,
                                  pull_codec=pull_codec, topk_ratio=topk_ratio,
                                  topk_momentum=topk_momentum,
                                  topk_warmup_steps=topk_warmup_steps,
                                  pull_delta=pull_delta, spec=spec, **settings)
            self._entries.append(_DenseEntry(name, param, table, rows, dim))
        if pull:
            self.pull()

    @property
    def tables(self):
        """{parameter name: paramserver.Table}."""
        return {e.name: e.table for e in self._entries}

    def _pull_ops(self):
        return [(e.table, e.keys, e.pull_buffer()) for e in self._entries]

    def _push_ops(self):
        ops = []
        for e in self._entries:
            grad = e.param.grad
            if grad is None:
                continue
            grad = grad.detach()
            if self.grad_scale != 1.0:
                grad = grad * self.grad_scale
            ops.append((e.table, e.keys, e.push_buffer(grad)))
        return ops

    def _finish_pull(self):
        """After a pull into the host buffers: copies them to the parameters on a device."""
        for e in self._entries:
            e.upload()

    def pull(self):
        """Copies the tables' current values into the module's parameters (in place)."""
        ops = self._pull_ops()
        with _waiting(pulled=sum(len(op[1]) for op in ops)):
            self.client.pull_many(ops)
        self._finish_pull()

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
        self._finish_pull()
        if zero_grad:
            self.module.zero_grad(set_to_none=True)

    def push_pull_async(self):
        """push_pull in the background: returns a request whose wait() returns once the new
        values are in the parameters (on a device: once their copies are queued). Do not use
        the module (nor its gradients) until its wait() has returned."""
        request = self.client.push_pull_async(push=self._push_ops(), pull=self._pull_ops())
        return _PullRequest(request, self._finish_pull)


def _check_parameter(param, what):
    if param.dtype != torch.float32:
        raise TypeError(f"{what} must be float32, got {param.dtype}")
    if not param.is_contiguous():
        raise ValueError(f"{what} must be contiguous")


class _DenseEntry:
    """One parameter of DenseParameters: its table, and the host buffers of a parameter on a
    device (pinned, allocated on first use, kept)."""

    def __init__(self, name, param, table, rows, dim):
        self.name, self.param, self.table, self.rows, self.dim = name, param, table, rows, dim
        self.keys = np.arange(rows, dtype=np.uint64)
        self._host = None  # pulled values of a parameter on a device
        self._host_grad = None  # gradients of a parameter on a device
        self._uploading = None  # the device whose copy from _host may still be running

    def pull_buffer(self):
        """Where a pull writes: the parameter's own memory on the CPU, else the pinned host
        buffer (once the last copy from it to the device is done)."""
        _check_parameter(self.param, f"parameter {self.name!r}")
        if self.param.device.type == "cpu":
            return _float32_rows(self.param, self.rows, self.dim, f"parameter {self.name!r}")
        if self._uploading is not None:
            _wait_for_copies(self._uploading)
            self._uploading = None
        if self._host is None:
            self._host = _pinned_rows(self.rows, self.dim, self.param.device)
        return self._host.numpy()

    def upload(self):
        """Copies the pulled values to a parameter on a device (non_blocking)."""
        if self.param.device.type == "cpu" or self._host is None:
            return
        with torch.no_grad():
            self.param.view(self.rows, self.dim).copy_(self._host, non_blocking=True)
        self._uploading = self.param.device

    def push_buffer(self, grad):
        """The (rows, dim) float32 host array of `grad`: its own memory on the CPU, else a copy
        in the pinned gradient buffer, waited for."""
        what = f"gradient of {self.name!r}"
        if grad.device.type == "cpu":
            return _float32_rows(grad.to(torch.float32).contiguous(), self.rows, self.dim, what)
        if self._host_grad is None:
            self._host_grad = _pinned_rows(self.rows, self.dim, grad.device)
        self._host_grad.copy_(grad.reshape(self.rows, self.dim), non_blocking=True)
        _wait_for_copies(grad.device)
        return self._host_grad.numpy()


class _PullRequest:
    """A paramserver.Request whose wait() also copies the pulled values to the device."""

    def __init__(self, request, finish):
        self._request = request
        self._finish = finish

    def done(self):
        """True once wait() would not block on the servers."""
        return self._request.done()

    def wait(self, timeout=None):
        """Waits for the request (raising its error; TimeoutError after `timeout` seconds, the
        request still in flight), then copies the pulled values to the parameters on a device,
        once; returns the request's result."""
        result = self._request.wait(timeout)
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return result
