"""paramserver: keep a model's parameters in parameter servers.

Tables (dense tensors, sparse embedding rows) live on the servers, which apply a server-side
optimizer to the gradients a program pushes; the program pulls current values. Arrays are
numpy arrays, passed without copies: keys are 1-D ``uint64`` arrays (``int64`` with
non-negative values is accepted too), values and gradients C-contiguous ``float32`` arrays of
shape ``(len(keys), table.dim)``. CPU torch tensors work wherever arrays do.

Example::

    import numpy as np
    import paramserver as ps

    with ps.Client(["10.0.0.5:7100", "10.0.0.6:7100"], job_id="demo") as client:
        emb = client.create_table("emb", kind="sparse", dim=16,
                                  initializer=ps.Initializer.normal(0.01, seed=1),
                                  optimizer=ps.Optimizer.adam(0.001))
        keys = np.array([3, 17, 42], dtype=np.uint64)
        rows = emb.pull(keys)                       # (3, 16) float32
        emb.push(keys, np.ones_like(rows))          # the servers apply Adam
        out = np.empty((3, 16), np.float32)
        emb.pull(keys, out=out)                     # written in place
        request = emb.pull_async(keys)              # ... overlap with compute ...
        rows = request.wait()

        w = client.create_table("w", kind="dense", dim=10, rows=784,
                                optimizer=ps.Optimizer.sgd(0.1))
        # one training step: push the gradients, advance the clock, pull the new values
        [values] = client.push_pull(push=[(w, w_keys, w_grads)], pull=[(w, w_keys)])

Errors raise :class:`Error` subclasses (``InvalidArgumentError``, ``NotFoundError``,
``UnavailableError``, ...) carrying the server's message; ``e.code`` names the status code. In a
program job, a request that a server's death cut short raises :class:`StepInterrupted` (an
``AbortedError``): skip the rest of the step, ``Session.steps()`` recovers (see ``Session``).

Importing the package changes no process-wide setting. A program that moves large tensors may
call :func:`tune_process` once, early, as the daemons do: freed memory then stays in the
process (glibc would otherwise hand every large request buffer back to the kernel and fault it
in again on the next request) and Abseil's mutex deadlock detection is off.

``paramserver.torch`` (imported separately) holds PyTorch helpers: an ``Embedding`` layer whose
rows live in a sparse table, and ``DenseParameters``, which keeps a module's parameters in
dense tables.
"""

from paramserver._core import (  # noqa: F401
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    Client,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    Initializer,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    Optimizer,
    OutOfRangeError,
    PermissionDeniedError,
    Request,
    ResourceExhaustedError,
    Session,
    StepInterrupted,
    Table,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    table_id_for,
    tune_process,
)

__version__ = "0.1.0"

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CancelledError",
    "Client",
    "DataBatch",
    "DataLossError",
    "DeadlineExceededError",
    "Error",
    "FailedPreconditionError",
    "Initializer",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "Optimizer",
    "OutOfRangeError",
    "PermissionDeniedError",
    "Request",
    "ResourceExhaustedError",
    "Session",
    "StepInterrupted",
    "Table",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "table_id_for",
    "tune_process",
]

# The classes read best as paramserver.X (they are defined in paramserver._core).
for _name in ("Client", "Initializer", "Optimizer", "Request", "Table"):
    try:
        globals()[_name].__module__ = __name__
    except (AttributeError, TypeError):
        pass
del _name


def _session_steps(self, total_steps, steps_per_epoch=0):
    """The training loop helper: yields the steps to run, from where this worker resumes (0, or
    the step after a restart or a rollback) to total_steps - 1. After each step it advances the
    clock if the step did not (push_pull does), recovers from a lost server, reports progress
    and lets the worker of rank 0 take a checkpoint. A step that a server's death cut short
    raises StepInterrupted from its requests: catch it in the loop and `continue`; the next
    iteration recovers and yields the step to run (the same one, or an earlier one after a sync
    job's rollback)."""
    step = self.begin(total_steps, steps_per_epoch)
    while step < total_steps:
        yield step
        step = self.next()


class DataBatch:
    """A range of examples handed to this worker (Session.batches): epoch (1-based), index (the
    range's number in the job), step (the clock its pushes are at), examples (int64 numpy array
    of indices into the data set) and epochs_done (epochs of the whole job fully read)."""

    __slots__ = ("epoch", "index", "step", "examples", "epochs_done")

    def __init__(self, epoch, index, step, examples, epochs_done):
        self.epoch, self.index, self.step = epoch, index, step
        self.examples, self.epochs_done = examples, epochs_done

    def __len__(self):
        return len(self.examples)

    def __repr__(self):
        return (f"DataBatch(epoch={self.epoch}, index={self.index}, step={self.step}, "
                f"{len(self.examples)} examples)")


def _session_batches(self, num_examples, batch_size):
    """The loop of a job of dynamic data assignment (data_assignment: DYNAMIC, ssp or async):
    yields the ranges of a data set of num_examples examples that the scheduler hands to this
    worker (DataBatch, batch_size examples or fewer at an epoch's end, in an order shuffled by
    the job's seed) until every range of the job's epochs has been read by some worker, so that a
    fast worker reads more than a slow one and every example is read once per epoch. Step on
    each batch before asking for the next (its pushes done): asking ends the step the way next()
    does (progress, checkpoints, recovery from a lost server, after which the range is read
    again). A step that a server's death cut short raises StepInterrupted from its requests:
    catch it and `continue`; the next iteration recovers and hands the range out again."""
    while True:
        b = self.next_batch(int(num_examples), int(batch_size))
        if b is None:
            return
        yield DataBatch(b["epoch"], b["index"], b["step"], b["examples"], b["epochs_done"])


def _session_report(self, loss=None, accuracy=None, samples=0, **metrics):
    """Adds a step's figures to the progress reported at its end: loss and accuracy (running
    means are shown), samples (for samples/s) and any other named numbers (e.g. auc=0.81; at most
    16 names are kept). A NaN or infinite loss raises InvalidArgumentError and fails the job,
    except in a step that raised StepInterrupted: its report is ignored."""
    self._report(loss, accuracy, int(samples), metrics)


def _session_report_evaluation(self, loss=None, accuracy=None, **metrics):
    """An evaluation's result (held-out loss, accuracy and other metrics such as auc), reported
    at once: the job's result when made after the last step."""
    self._report_evaluation(loss, accuracy, metrics)


Session.steps = _session_steps
Session.batches = _session_batches
Session.report = _session_report
Session.report_evaluation = _session_report_evaluation
