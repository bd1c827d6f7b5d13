// The Python binding's docstrings (what help(paramserver) shows).
#ifndef PS_CLIENT_PYTHON_DOCSTRINGS_H_
#define PS_CLIENT_PYTHON_DOCSTRINGS_H_

namespace paramserver_py {

constexpr const char* kModuleDoc = R"doc(The paramserver client library (C++ core).

Use the ``paramserver`` package, which re-exports everything here.
)doc";

constexpr const char* kClientDoc = R"doc(A connection to a job's parameter servers.

Client(servers, job_id="default", worker_id=0, num_workers=1, consistency="async",
       staleness=0, rpc_timeout=180.0, configure_job=True, max_retries=3,
       max_part_bytes=2097152, channels_per_server=2, connect_timeout=10.0,
       reject_nonfinite=True)

servers: the parameter servers, a list of "host:port" strings (or one comma-separated
    string), in shard-map order.
job_id: tables and clocks are per job; every worker of a job names the same job and servers.
worker_id, num_workers: this worker's index (0..num_workers-1) and the job's worker count.
consistency: "async" (pushes apply on arrival, pulls never wait), "sync" (bulk-synchronous:
    the gradients of one clock from every worker are summed and applied once; a pull at clock c
    waits for every worker's clock c-1 pushes) or "ssp" (bounded staleness, see `staleness`).
staleness: for "ssp", how many clocks a worker may run ahead of the slowest.
rpc_timeout: deadline of one request in seconds (a sync/ssp pull may wait this long).
connect_timeout: how long the constructor waits for every server to answer the job's
    declaration (seconds); a server that is not there fails it with DeadlineExceededError.
reject_nonfinite: refuse a push whose gradients hold a NaN or an Inf before anything is sent
    (InvalidArgumentError); False only for servers run with --nonfinite=skip_row.
configure_job: declare the job (mode, workers) on every server when connecting; pass False if
    someone else (a worker daemon, a scheduler) configured it.
max_retries: how often a request that failed with UNAVAILABLE is tried again.
max_part_bytes: requests larger than this are cut into parts sent in parallel.
channels_per_server: TCP connections per server.

Keys are 1-D uint64 arrays (int64 arrays with non-negative values are accepted too, since torch
has no uint64; they are reinterpreted, not copied). Values and gradients are C-contiguous float32
arrays of shape (len(keys), table.dim). CPU torch tensors are accepted where arrays are (through
their zero-copy ``.numpy()`` view). Nothing is ever converted: a wrong dtype raises TypeError, a
wrong shape or a non-contiguous array ValueError.

Blocking calls release the GIL. Errors raise paramserver.Error subclasses carrying the server's
message. The client is a context manager: leaving the ``with`` block closes it.
)doc";

constexpr const char* kTableDoc =
    R"doc(A table on the parameter servers (from Client.create_table or Client.table).

Attributes: name, id, kind ("dense" or "sparse"), dim (floats per row), rows (dense: the number
of rows, keys 0..rows-1; sparse: None) and client. The table keeps its client alive; its
methods are shortcuts for the client's: table.pull(keys) == table.client.pull(table, keys).
)doc";

constexpr const char* kTablePrefetchDoc =
    R"doc(Announces the keys of a later batch: each server reads the rows of its share of them
from its disk tier into RAM and keeps them there until a pull reads them (at most the server's
--prefetch_pin, 30 s by default), so that the pull finds them in RAM. Returns a Request at once
(its wait() returns None; waiting is optional: a prefetch that failed changes nothing, the pull
then reads the rows from disk itself). The keys (uint64 or non-negative int64, any shape) are
copied before it returns. No value comes back and none changes: a pull after a prefetch answers
what it would without one, so it may be sent at any time, before the current step's push too.
A table without a disk tier (dense, or sparse without disk_tier): checked, otherwise a no-op.
Errors as a pull's: a key out of range of a dense table, a closed client. The servers refuse
more than 1048576 keys in one request (the client cuts larger ones into parts).
See docs/embedding-tables.md, "Prefetch".
)doc";

constexpr const char* kRequestDoc = R"doc(A request in flight, from a *_async call.

wait() blocks (with the GIL released) until the request is done and returns its result: the
pulled array (pull_async), the list of pulled arrays (push_pull_async, pull_many_async) or None
(pushes, Table.prefetch); it raises a paramserver.Error if the request failed. It may be called many times.
done() tells whether wait() would return at once. Until the request is done it holds references
to the arrays it reads and writes; dropping the last reference to an unfinished request waits
for it.
)doc";

constexpr const char* kInitializerDoc = R"doc(How the rows of a table start.

Use the factories: Initializer.zeros(), Initializer.constant(value),
Initializer.uniform(low, high, seed=0) (values in [low, high)), Initializer.normal(stddev,
seed=0) (normal(0, stddev)), or Initializer(kind, value=0, low=0, high=0, stddev=0, seed=0).
A row depends only on (seed, table name, key): every server creates the same row.
)doc";

constexpr const char* kOptimizerDoc = R"doc(The server-side optimizer of a table.

Use the factories: Optimizer.sgd(lr), Optimizer.momentum(lr, momentum=0.9),
Optimizer.adagrad(lr), Optimizer.adam(lr=0.001), Optimizer.ftrl(alpha, l1=0, l2=0), or
Optimizer(kind, learning_rate=None, momentum=None, beta1=None, beta2=None, epsilon=None,
initial_accumulator=None, l1=None, l2=None, ftrl_beta=None, weight_decay=None).
Unset fields take the server's defaults: learning rate 0.01, momentum 0.9, Adam's beta1 0.9,
beta2 0.999, epsilon 1e-8 (Adagrad: 1e-10), Adagrad's initial accumulator 0.1, FTRL's
l1 = l2 = 0 and beta 1, weight decay 0.
)doc";

inline constexpr char kSessionDoc[] = R"(The link of a program job's program to its worker daemon.

The worker daemon runs the program of a program job (psctl submit) with PS_AGENT and the
other PS_ variables set; Session.from_env() reads them, gets the job's tables, servers and
shard map from the daemon and makes the client::

    session = paramserver.Session.from_env()
    emb = session.table("emb")                      # a table the job file declares
    for step in session.steps(total_steps):         # resumes at the right step
        try:
            ...  pull, compute, push through session.client (or paramserver.torch) ...
        except paramserver.StepInterrupted:
            continue                                # a server died: this step runs again
        session.report(loss=loss, samples=batch_size, auc=auc)
    session.report_evaluation(accuracy=test_acc)    # the job's result

When a server dies, a request that could not complete raises StepInterrupted (an
AbortedError), and so does every later request of the step: no pulled array of an interrupted
step reaches the program. Go on to the loop's next step: steps() (or batches()) then waits
for the scheduler's new shard map, carries out its restore order and goes on from the step to
run next (the same one again, or the last checkpoint's when a sync job rolls back). report()
in an interrupted step is ignored, so a loss computed before the exception never fails the
job.
)";

}  // namespace paramserver_py

#endif  // PS_CLIENT_PYTHON_DOCSTRINGS_H_
