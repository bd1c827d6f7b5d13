// paramserver._core: the Python binding of the paramserver client library (<ps/client.h>).
//
// Arrays cross the boundary without copies: keys and gradients are read from the caller's
// buffers, pulled values are written into the caller's `out=` array or into a fresh numpy array.
// Nothing is converted silently: a wrong dtype raises TypeError, a wrong shape or a
// non-contiguous array ValueError, naming what was expected and what was given. Every blocking
// call releases the GIL. A failed call raises a paramserver.Error subclass chosen by the
// status code, carrying the status message.
//
// Only the public API is used here (ps/client.h).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arrays.h"
#include "configs.h"
#include "docstrings.h"
#include "ps/client.h"
#include "ps/session.h"
#include "py_types.h"
#include "session_bindings.h"

namespace py = pybind11;

namespace {

using namespace paramserver_py;  // NOLINT: the binding and its helpers are one unit

// ---------------------------------------------------------------------------------------------
// Names

std::string KindName(ps::TableKind kind) {
  return kind == ps::TableKind::kDense ? "dense" : "sparse";
}

ps::TableKind ParseKind(const std::string& name) {
  if (name == "sparse") return ps::TableKind::kSparse;
  if (name == "dense") return ps::TableKind::kDense;
  throw py::value_error("kind must be 'sparse' or 'dense', got '" + name + "'");
}

ps::Consistency ParseConsistency(const std::string& name) {
  if (name == "sync") return ps::Consistency::kSync;
  if (name == "ssp") return ps::Consistency::kSsp;
  if (name == "async") return ps::Consistency::kAsync;
  throw py::value_error("consistency must be 'async', 'sync' or 'ssp', got '" + name + "'");
}

uint32_t ToUint32(long long v, const std::string& what) {
  if (v < 0 || v > static_cast<long long>(std::numeric_limits<uint32_t>::max())) {
    throw py::value_error(what + " must be in [0, 2**32), got " + std::to_string(v));
  }
  return static_cast<uint32_t>(v);
}

// ---------------------------------------------------------------------------------------------
// Client, Table, Request

PyClient& ClientOf(py::handle self) { return self.cast<PyClient&>(); }

const ps::Table& TableOf(py::handle obj, const std::string& what = "table") {
  if (!py::isinstance<PyTable>(obj)) {
    throw py::type_error(what +
                         " must be a paramserver.Table (from Client.create_table or "
                         "Client.table), got " +
                         TypeName(obj));
  }
  return obj.cast<PyTable&>().table;
}

// One parsed pull or push operation.
struct OpArgs {
  ps::Table table;
  KeysArg keys;
  ValuesArg values;
};

OpArgs ParsePull(py::handle table, py::handle keys, py::handle out, const std::string& where) {
  OpArgs op;
  op.table = TableOf(table, where + "table");
  op.keys = ParseKeys(keys, where + "keys");
  if (out.is_none()) {
    op.values = NewValues(op.keys.span.size(), op.table.dim);
  } else {
    op.values = ParseValues(out, where + "out", op.keys.span.size(), op.table.dim, true);
  }
  return op;
}

OpArgs ParsePush(py::handle table, py::handle keys, py::handle grads, const std::string& where) {
  OpArgs op;
  op.table = TableOf(table, where + "table");
  op.keys = ParseKeys(keys, where + "keys");
  op.values = ParseValues(grads, where + "grads", op.keys.span.size(), op.table.dim, false);
  return op;
}

ps::PullOp PullOpOf(const OpArgs& a) {
  return ps::PullOp{a.table, a.keys.span, absl::Span<float>(a.values.data, a.values.size)};
}
ps::PushOp PushOpOf(const OpArgs& a) {
  return ps::PushOp{a.table, a.keys.span, absl::Span<const float>(a.values.data, a.values.size)};
}

void MoveBorrowed(OpArgs& a, std::vector<Borrowed>* out) {
  out->push_back(std::move(a.keys.borrowed));
  out->push_back(std::move(a.values.borrowed));
}

// A list of pull ops: each item (table, keys) or (table, keys, out).
std::vector<OpArgs> ParsePullList(py::handle ops, const std::string& name) {
  std::vector<OpArgs> parsed;
  if (ops.is_none()) return parsed;
  if (!py::isinstance<py::sequence>(ops) || py::isinstance<py::str>(ops)) {
    throw py::type_error(name + " must be a list of (table, keys) or (table, keys, out) tuples");
  }
  size_t i = 0;
  for (py::handle item : ops) {
    const std::string where = name + "[" + std::to_string(i++) + "]: ";
    if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item)) {
      throw py::type_error(where + "must be a (table, keys) or (table, keys, out) tuple, got " +
                           TypeName(item));
    }
    py::sequence t = py::reinterpret_borrow<py::sequence>(item);
    if (t.size() != 2 && t.size() != 3) {
      throw py::type_error(where + "must be a (table, keys) or (table, keys, out) tuple, got " +
                           std::to_string(t.size()) + " items");
    }
    parsed.push_back(ParsePull(t[0], t[1], t.size() == 3 ? py::object(t[2]) : py::none(), where));
  }
  return parsed;
}

std::vector<OpArgs> ParsePushList(py::handle ops, const std::string& name) {
  std::vector<OpArgs> parsed;
  if (ops.is_none()) return parsed;
  if (!py::isinstance<py::sequence>(ops) || py::isinstance<py::str>(ops)) {
    throw py::type_error(name + " must be a list of (table, keys, grads) tuples");
  }
  size_t i = 0;
  for (py::handle item : ops) {
    const std::string where = name + "[" + std::to_string(i++) + "]: ";
    if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item)) {
      throw py::type_error(where + "must be a (table, keys, grads) tuple, got " + TypeName(item));
    }
    py::sequence t = py::reinterpret_borrow<py::sequence>(item);
    if (t.size() != 3) {
      throw py::type_error(where + "must be a (table, keys, grads) tuple, got " +
                           std::to_string(t.size()) + " items");
    }
    parsed.push_back(ParsePush(t[0], t[1], t[2], where));
  }
  return parsed;
}

py::list ResultsOf(const std::vector<OpArgs>& pulls) {
  py::list results;
  for (const OpArgs& a : pulls) results.append(a.values.borrowed.object);
  return results;
}

// --- the Client's methods ---

py::object Pull(py::object self, py::object table, py::object keys, py::object out) {
  PyClient& c = ClientOf(self);
  OpArgs op = ParsePull(table, keys, out, "");
  absl::Status status;
  {
    py::gil_scoped_release release;
    status =
        c.client().Pull(op.table, op.keys.span, absl::MakeSpan(op.values.data, op.values.size));
  }
  Check(status);
  return op.values.borrowed.object;
}

void Push(py::object self, py::object table, py::object keys, py::object grads) {
  PyClient& c = ClientOf(self);
  OpArgs op = ParsePush(table, keys, grads, "");
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = c.client().Push(op.table, op.keys.span,
                             absl::Span<const float>(op.values.data, op.values.size));
  }
  Check(status);
}

PyRequest* PullAsync(py::object self, py::object table, py::object keys, py::object out) {
  PyClient& c = ClientOf(self);
  OpArgs op = ParsePull(table, keys, out, "");
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PullAsync(op.table, op.keys.span,
                                   absl::MakeSpan(op.values.data, op.values.size));
  }
  py::object result = op.values.borrowed.object;
  std::vector<Borrowed> borrowed;
  MoveBorrowed(op, &borrowed);
  return new PyRequest(std::move(pending), c.shared(), std::move(borrowed), result, "pull");
}

PyRequest* PrefetchAsync(py::object self, py::object table, py::object keys) {
  PyClient& c = ClientOf(self);
  const ps::Table& t = TableOf(table);
  KeysArg k = ParseKeys(keys, "keys");
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PrefetchAsync(t, k.span);  // copies the keys
  }
  return new PyRequest(std::move(pending), c.shared(), {}, py::none(), "prefetch");
}

PyRequest* PushAsync(py::object self, py::object table, py::object keys, py::object grads) {
  PyClient& c = ClientOf(self);
  OpArgs op = ParsePush(table, keys, grads, "");
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PushAsync(op.table, op.keys.span,
                                   absl::Span<const float>(op.values.data, op.values.size));
  }
  std::vector<Borrowed> borrowed;
  MoveBorrowed(op, &borrowed);
  return new PyRequest(std::move(pending), c.shared(), std::move(borrowed), py::none(), "push");
}

PyRequest* PullManyAsync(py::object self, py::object ops) {
  PyClient& c = ClientOf(self);
  std::vector<OpArgs> pulls = ParsePullList(ops, "ops");
  std::vector<ps::PullOp> pull_ops;
  for (const OpArgs& a : pulls) pull_ops.push_back(PullOpOf(a));
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PullAsync(std::move(pull_ops));
  }
  py::list result = ResultsOf(pulls);
  std::vector<Borrowed> borrowed;
  for (OpArgs& a : pulls) MoveBorrowed(a, &borrowed);
  return new PyRequest(std::move(pending), c.shared(), std::move(borrowed), result, "pull");
}

PyRequest* PushManyAsync(py::object self, py::object ops) {
  PyClient& c = ClientOf(self);
  std::vector<OpArgs> pushes = ParsePushList(ops, "ops");
  std::vector<ps::PushOp> push_ops;
  for (const OpArgs& a : pushes) push_ops.push_back(PushOpOf(a));
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PushAsync(std::move(push_ops));
  }
  std::vector<Borrowed> borrowed;
  for (OpArgs& a : pushes) MoveBorrowed(a, &borrowed);
  return new PyRequest(std::move(pending), c.shared(), std::move(borrowed), py::none(), "push");
}

PyRequest* PushPullAsync(py::object self, py::object push, py::object pull) {
  PyClient& c = ClientOf(self);
  std::vector<OpArgs> pushes = ParsePushList(push, "push");
  std::vector<OpArgs> pulls = ParsePullList(pull, "pull");
  std::vector<ps::PushOp> push_ops;
  for (const OpArgs& a : pushes) push_ops.push_back(PushOpOf(a));
  std::vector<ps::PullOp> pull_ops;
  for (const OpArgs& a : pulls) pull_ops.push_back(PullOpOf(a));
  ps::Pending pending;
  {
    py::gil_scoped_release release;
    pending = c.client().PushPullAsync(std::move(push_ops), std::move(pull_ops));
  }
  py::list result = ResultsOf(pulls);
  std::vector<Borrowed> borrowed;
  for (OpArgs& a : pushes) MoveBorrowed(a, &borrowed);
  for (OpArgs& a : pulls) MoveBorrowed(a, &borrowed);
  return new PyRequest(std::move(pending), c.shared(), std::move(borrowed), result, "push_pull");
}

py::object WaitNow(PyRequest* request) {
  std::unique_ptr<PyRequest> owned(request);
  return owned->Wait(std::nullopt);
}

}  // namespace

namespace {

// The exception classes (paramserver.Error and a subclass per status code), and the
// translation of a StatusError into them.
void BindErrors(py::module_& m) {
  py::module_ builtins = py::module_::import("builtins");
  py::object type = builtins.attr("type");
  auto make = [&](const char* name, py::tuple bases, const char* doc) {
    py::dict ns;
    ns["__doc__"] = doc;
    ns["__module__"] = "paramserver";
    ns["code"] = py::str("UNKNOWN");
    py::object cls = type(name, bases, ns);
    m.attr(name) = cls;
    return cls;
  };
  g_errors = new ErrorClasses;
  g_errors->base =
      make("Error", py::make_tuple(builtins.attr("RuntimeError")),
           "A paramserver call failed. str(e) is the status message (the server's, when it\n"
           "refused); e.code the status code's name, e.g. 'UNAVAILABLE'. Subclasses by code:\n"
           "InvalidArgumentError (also a ValueError), NotFoundError, AlreadyExistsError,\n"
           "FailedPreconditionError (e.g. the client is closed), UnavailableError (a server is\n"
           "unreachable), DeadlineExceededError, CancelledError, OutOfRangeError,\n"
           "ResourceExhaustedError, AbortedError, PermissionDeniedError, InternalError,\n"
           "UnimplementedError, DataLossError, UnauthenticatedError.");
  struct Sub {
    absl::StatusCode code;
    const char* name;
    const char* extra_base;  // a builtin exception it also derives from, or null
    const char* doc;
  };
  const Sub subs[] = {
      {absl::StatusCode::kInvalidArgument, "InvalidArgumentError", "ValueError",
       "The request was invalid (INVALID_ARGUMENT): a bad table config, a dense key out of "
       "range, NaN gradients, ..."},
      {absl::StatusCode::kNotFound, "NotFoundError", nullptr, "No such table or job (NOT_FOUND)."},
      {absl::StatusCode::kAlreadyExists, "AlreadyExistsError", nullptr,
       "A table with that id but another config exists (ALREADY_EXISTS)."},
      {absl::StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr,
       "The call is not possible in this state, e.g. the client is closed "
       "(FAILED_PRECONDITION)."},
      {absl::StatusCode::kUnavailable, "UnavailableError", nullptr,
       "A server could not be reached (UNAVAILABLE)."},
      {absl::StatusCode::kDeadlineExceeded, "DeadlineExceededError", nullptr,
       "A request ran past its deadline (DEADLINE_EXCEEDED)."},
      {absl::StatusCode::kCancelled, "CancelledError", nullptr,
       "The request was cancelled, e.g. by Client.close() (CANCELLED)."},
      {absl::StatusCode::kOutOfRange, "OutOfRangeError", nullptr, "OUT_OF_RANGE."},
      {absl::StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr,
       "RESOURCE_EXHAUSTED (e.g. a message too large)."},
      {absl::StatusCode::kAborted, "AbortedError", nullptr, "ABORTED."},
      {absl::StatusCode::kPermissionDenied, "PermissionDeniedError", nullptr, "PERMISSION_DENIED."},
      {absl::StatusCode::kUnauthenticated, "UnauthenticatedError", nullptr, "UNAUTHENTICATED."},
      {absl::StatusCode::kInternal, "InternalError", nullptr, "INTERNAL."},
      {absl::StatusCode::kUnimplemented, "UnimplementedError", nullptr, "UNIMPLEMENTED."},
      {absl::StatusCode::kDataLoss, "DataLossError", nullptr, "DATA_LOSS."},
  };
  for (const Sub& s : subs) {
    py::tuple bases = s.extra_base != nullptr
                          ? py::make_tuple(g_errors->base, builtins.attr(s.extra_base))
                          : py::make_tuple(g_errors->base);
    g_errors->by_code[s.code] = make(s.name, bases, s.doc);
  }
  g_errors->step_interrupted =
      make("StepInterrupted", py::make_tuple(g_errors->by_code[absl::StatusCode::kAborted]),
           "A request of a Session's client could not complete because the job's shard map\n"
           "changed (a server died): the step is cut short and its results (a pull's array) must\n"
           "not be used. Session.steps() and batches() recover at the next step and run this one\n"
           "again; catch it in the loop and `continue` (see Session). e.code is 'ABORTED'.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      SetPythonError(e.status());
    }
  });
}

// paramserver.Request and paramserver.Table.
void BindRequestAndTable(py::module_& m) {
  py::class_<PyRequest>(m, "Request", kRequestDoc)
      .def(
          "wait", [](PyRequest& r, std::optional<double> timeout) { return r.Wait(timeout); },
          py::arg("timeout") = py::none(),
          "Waits until the request is done (GIL released) and returns its result (the pulled\n"
          "array, the list of pulled arrays, or None). Raises a paramserver.Error if it failed,\n"
          "TimeoutError if `timeout` seconds pass first (the request stays in flight).")
      .def("done", &PyRequest::Done, "True once wait() would not block.")
      .def("__repr__", &PyRequest::Repr);

  // --- Table ---
  py::class_<PyTable>(m, "Table", kTableDoc)
      .def_property_readonly(
          "name", [](const PyTable& t) { return t.table.name; }, "The table's name.")
      .def_property_readonly(
          "id", [](const PyTable& t) { return t.table.id; }, "The table's id on the servers.")
      .def_property_readonly(
          "kind", [](const PyTable& t) { return KindName(t.table.kind); }, "'dense' or 'sparse'.")
      .def_property_readonly(
          "dim", [](const PyTable& t) { return t.table.dim; }, "Floats per row.")
      .def_property_readonly(
          "rows",
          [](const PyTable& t) -> py::object {
            if (t.table.kind == ps::TableKind::kDense) return py::int_(t.table.num_rows);
            return py::none();
          },
          "Dense: the number of rows (keys 0..rows-1). Sparse: None.")
      .def_property_readonly(
          "client", [](const PyTable& t) { return t.client; }, "The Client of this table.")
      .def(
          "pull",
          [](py::object self, py::object keys, py::object out) {
            return Pull(self.cast<PyTable&>().client, self, keys, out);
          },
          py::arg("keys"), py::arg("out") = py::none(),
          "Pulls the rows of `keys`; see Client.pull.")
      .def(
          "push",
          [](py::object self, py::object keys, py::object grads) {
            Push(self.cast<PyTable&>().client, self, keys, grads);
          },
          py::arg("keys"), py::arg("grads"), "Pushes gradients; see Client.push.")
      .def(
          "pull_async",
          [](py::object self, py::object keys, py::object out) {
            return PullAsync(self.cast<PyTable&>().client, self, keys, out);
          },
          py::arg("keys"), py::arg("out") = py::none(), "See Client.pull_async.")
      .def(
          "push_async",
          [](py::object self, py::object keys, py::object grads) {
            return PushAsync(self.cast<PyTable&>().client, self, keys, grads);
          },
          py::arg("keys"), py::arg("grads"), "See Client.push_async.")
      .def(
          "prefetch",
          [](py::object self, py::object keys) {
            return PrefetchAsync(self.cast<PyTable&>().client, self, keys);
          },
          py::arg("keys"), kTablePrefetchDoc)
      .def("__eq__",
           [](const PyTable& a, py::object b) {
             if (!py::isinstance<PyTable>(b)) return false;
             const ps::Table& t = b.cast<PyTable&>().table;
             return a.table.id == t.id && a.table.name == t.name && a.table.kind == t.kind &&
                    a.table.dim == t.dim && a.table.num_rows == t.num_rows &&
                    a.client.is(b.cast<PyTable&>().client);
           })
      .def("__hash__", [](const PyTable& t) { return py::hash(py::int_(t.table.id)); })
      .def("__repr__", [](const PyTable& t) {
        std::string s = "Table(name='" + t.table.name + "', id=" + std::to_string(t.table.id) +
                        ", kind='" + KindName(t.table.kind) +
                        "', dim=" + std::to_string(t.table.dim);
        if (t.table.kind == ps::TableKind::kDense) {
          s += ", rows=" + std::to_string(t.table.num_rows);
        }
        return s + ")";
      });
}

// Client(...): the constructor and its options (one binding of about 90 lines: its keyword
// arguments and their docstring are long, and split they would no longer read as one signature).
void BindClientConnect(py::class_<PyClient>& cls) {
  cls.def(
      py::init([](py::object servers, const std::string& job_id, long long worker_id,
                  long long num_workers, const std::string& consistency, int staleness,
                  double rpc_timeout, bool configure_job, int max_retries, long long max_part_bytes,
                  int channels_per_server, double connect_timeout, bool reject_nonfinite) {
        ps::ClientOptions o;
        if (py::isinstance<py::str>(servers)) {
          std::string list = servers.cast<std::string>();
          size_t start = 0;
          while (start <= list.size()) {
            size_t end = list.find(',', start);
            if (end == std::string::npos) end = list.size();
            if (end > start) o.servers.push_back(list.substr(start, end - start));
            start = end + 1;
          }
        } else if (py::isinstance<py::sequence>(servers)) {
          for (py::handle s : servers) {
            if (!py::isinstance<py::str>(s)) {
              throw py::type_error("servers must be 'host:port' strings, got " + TypeName(s));
            }
            o.servers.push_back(s.cast<std::string>());
          }
        } else {
          throw py::type_error(
              "servers must be a list of 'host:port' strings or a comma-separated string, "
              "got " +
              TypeName(servers));
        }
        if (o.servers.empty()) throw py::value_error("servers must name at least one server");
        o.job_id = job_id;
        o.worker_id = ToUint32(worker_id, "worker_id");
        o.num_workers = ToUint32(num_workers, "num_workers");
        if (o.num_workers < 1) throw py::value_error("num_workers must be >= 1, got 0");
        if (o.worker_id >= o.num_workers) {
          throw py::value_error(
              "worker_id must be in [0, num_workers=" + std::to_string(o.num_workers) + "), got " +
              std::to_string(o.worker_id));
        }
        o.consistency = ParseConsistency(consistency);
        if (staleness < 0) {
          throw py::value_error("staleness must be >= 0, got " + std::to_string(staleness));
        }
        o.staleness = staleness;
        if (!std::isfinite(rpc_timeout) || rpc_timeout <= 0) {
          std::ostringstream s;
          s << "rpc_timeout must be a positive number of seconds, got " << rpc_timeout;
          throw py::value_error(s.str());
        }
        o.rpc_timeout = absl::Seconds(rpc_timeout);
        o.configure_job = configure_job;
        if (!std::isfinite(connect_timeout) || connect_timeout <= 0) {
          std::ostringstream s;
          s << "connect_timeout must be a positive number of seconds, got " << connect_timeout;
          throw py::value_error(s.str());
        }
        o.connect_timeout = absl::Seconds(connect_timeout);
        o.reject_nonfinite = reject_nonfinite;
        if (max_retries < 0) {
          throw py::value_error("max_retries must be >= 0, got " + std::to_string(max_retries));
        }
        o.max_retries = max_retries;
        if (max_part_bytes <= 0) {
          throw py::value_error("max_part_bytes must be > 0, got " +
                                std::to_string(max_part_bytes));
        }
        o.max_part_bytes = static_cast<size_t>(max_part_bytes);
        if (channels_per_server < 1) {
          throw py::value_error("channels_per_server must be >= 1, got " +
                                std::to_string(channels_per_server));
        }
        o.channels_per_server = channels_per_server;
        if (absl::Status s = o.Validate(); !s.ok()) throw StatusError(s);
        absl::StatusOr<std::unique_ptr<ps::Client>> client;
        {
          py::gil_scoped_release release;
          client = ps::Client::Connect(o);
        }
        if (!client.ok()) throw StatusError(client.status());
        return std::make_unique<PyClient>(std::shared_ptr<ps::Client>(std::move(*client)),
                                          std::move(o));
      }),
      py::arg("servers"), py::arg("job_id") = "default", py::arg("worker_id") = 0,
      py::arg("num_workers") = 1, py::arg("consistency") = "async", py::arg("staleness") = 0,
      py::arg("rpc_timeout") = 180.0, py::arg("configure_job") = true, py::arg("max_retries") = 3,
      py::arg("max_part_bytes") = static_cast<long long>(2 << 20),
      py::arg("channels_per_server") = 2, py::arg("connect_timeout") = 10.0,
      py::arg("reject_nonfinite") = true);
}

// Client.create_table and the table lookups (about 90 lines: create_table's keyword arguments
// and docstring are one binding).
void BindClientTables(py::class_<PyClient>& cls) {
  cls.def(
         "create_table",
         [](py::object self, const std::string& name, const std::string& kind, long long dim,
            py::object rows, py::object initializer, py::object optimizer, long long id,
            const std::string& storage, py::object admission, py::object eviction,
            const std::string& push_codec, const std::string& pull_codec, py::object topk_ratio,
            py::object topk_momentum, py::object topk_warmup_steps, bool pull_delta, bool disk_tier,
            py::object spec, const py::kwargs& settings) {
           ps::TableConfig config;
           config.name = name;
           config.kind = ParseKind(kind);
           if (dim < 0 || dim > std::numeric_limits<uint32_t>::max()) {
             throw py::value_error("dim must be in [1, 2**32), got " + std::to_string(dim));
           }
           config.dim = static_cast<uint32_t>(dim);
           if (!rows.is_none()) {
             const long long r = rows.cast<long long>();
             if (r < 0) throw py::value_error("rows must be >= 0, got " + std::to_string(r));
             config.num_rows = static_cast<uint64_t>(r);
           }
           config.initializer = InitializerOf(initializer);
           config.optimizer = OptimizerOf(optimizer);
           config.id = ToUint32(id, "id");
           SetTableFeatures(storage, admission, eviction, config);
           config.disk_tier = disk_tier;
           SetTableCodecs(push_codec, pull_codec, topk_ratio, topk_momentum, topk_warmup_steps,
                          pull_delta, config);
           SetTableSpec(spec, settings, config);
           PyClient& c = ClientOf(self);
           absl::StatusOr<ps::Table> table;
           {
             py::gil_scoped_release release;
             table = c.client().CreateTable(config);
           }
           if (!table.ok()) throw StatusError(table.status());
           return MakeTable(self, *table);
         },
         py::arg("name"), py::kw_only(), py::arg("kind") = "sparse", py::arg("dim"),
         py::arg("rows") = py::none(), py::arg("initializer") = py::none(),
         py::arg("optimizer") = py::none(), py::arg("id") = 0, py::arg("storage") = "fp32",
         py::arg("admission") = py::none(), py::arg("eviction") = py::none(),
         py::arg("push_codec") = "none", py::arg("pull_codec") = "none",
         py::arg("topk_ratio") = py::none(), py::arg("topk_momentum") = py::none(),
         py::arg("topk_warmup_steps") = py::none(), py::arg("pull_delta") = false,
         py::arg("disk_tier") = false, py::arg("spec") = py::none(),
         R"doc(Creates a table on every server and returns it (a Table).

name: 1..128 characters: letters, digits, '_', '-', '.', '/'.
kind: "sparse" (rows for any uint64 key, created with the initializer on first touch) or
    "dense" (a fixed tensor of `rows` rows: keys 0..rows-1).
dim: floats per row, >= 1.
rows: dense tables: the number of rows.
initializer: a paramserver.Initializer (default: zeros).
optimizer: a paramserver.Optimizer or an optimizer name ('sgd', 'momentum', 'adagrad',
    'adam', 'ftrl', with the server's default settings); default: sgd with learning rate 0.01.
id: the table's id; 0 (default) derives it from (job_id, name), alike on every client.
storage: how servers store values: "fp32" (default), "fp16" or "bf16" (pulls answer float32).
admission: sparse tables: None (every key gets a row), or a dict of min_count (a key gets a row
    at its min_count-th push, 0..255), probability (each push admits with it, (0, 1]) and
    decay_seconds (push counts halve this often); a key not admitted pulls its initializer.
eviction: sparse tables: None (rows stay), or a dict of max_rows (most rows per server; the
    least recently used go) and ttl_seconds (rows unused this long are dropped).
disk_tier: sparse tables with eviction max_rows: rows past the cap go to the servers' disk
    tier (RocksDB under their --tier_roots) instead of being forgotten, and come back when used
    (default False). docs/embedding-tables.md#disk-tier.
push_codec, pull_codec: compression on the wire: "none" (default, float32), "fp16" or "bf16"
    (both directions), "topk" or "sign" (pushes of dense tables, with error feedback: the
    client keeps what it did not send and adds it to the next push), "int8" (pulls: a byte a
    value and a scale per 256). topk_ratio: the fraction of each block's values a "topk" push
    sends, in (0, 1]. topk_momentum: momentum correction, in [0, 1) (default 0: off): the
    client keeps a velocity per value (u = momentum * u + gradient) and accumulates it into the
    residual; the optimizer must then be sgd (the momentum is the client's).
    topk_warmup_steps: a row's first pushes send more, from nearly all down to topk_ratio
    geometrically over this many pushes (default 0: none). pull_delta: dense tables: pulls get
    only the values changed since this client's last pull (default False). docs/data-plane.md.
spec, and any other keyword: any setting of the table by the protocol's names (the fields of
    TableSpec in proto/ps/v1/types.proto, as a job file's tables { ... } write them), also one
    newer than the keywords above: spec='tier { disk: true }' (text format), a dict
    spec={"tier": {"disk": True}} (enum values by name: "CODEC_FP16"), or the same as a
    keyword, tier={"disk": True}. Merged over the keywords above; the name, kind, dim, rows, id,
    initializer and optimizer take their own keywords only.

Idempotent for the same config; AlreadyExistsError if a table with that id but another config
exists. A bad config raises InvalidArgumentError (a ValueError).)doc")
      .def(
          "table",
          [](py::object self, py::object name_or_id) {
            PyClient& c = ClientOf(self);
            absl::StatusOr<ps::Table> table;
            if (py::isinstance<py::str>(name_or_id)) {
              const std::string name = name_or_id.cast<std::string>();
              py::gil_scoped_release release;
              table = c.client().OpenTable(name);
            } else if (PyIndex_Check(name_or_id.ptr()) && !py::isinstance<py::bool_>(name_or_id)) {
              const uint32_t id = ToUint32(
                  py::int_(py::reinterpret_borrow<py::object>(name_or_id)).cast<long long>(),
                  "table id");
              py::gil_scoped_release release;
              table = c.client().OpenTableById(id);
            } else {
              throw py::type_error("table() takes a table name (str) or id (int), got " +
                                   TypeName(name_or_id));
            }
            if (!table.ok()) throw StatusError(table.status());
            return MakeTable(self, *table);
          },
          py::arg("name_or_id"),
          "Opens a table that exists on the servers, by name or by id. NotFoundError if there\n"
          "is none.");
}

// Client.pull, push and their asynchronous and multi-table forms.
void BindClientData(py::class_<PyClient>& cls) {
  cls.def("pull", &Pull, py::arg("table"), py::arg("keys"), py::arg("out") = py::none(),
          R"doc(Pulls the rows of `keys` from `table`.

keys: 1-D uint64 array (or non-negative int64), C-contiguous.
out: optional C-contiguous, writable float32 array of shape (len(keys), table.dim) that
    receives the rows (written in place, no copy); default: a new numpy array.
Returns `out` (the very object passed), or the new array. Sparse rows not yet touched are
created with the table's initializer.)doc")
      .def("push", &Push, py::arg("table"), py::arg("keys"), py::arg("grads"),
           R"doc(Pushes gradients of the rows of `keys`; the servers apply the table's optimizer.

grads: C-contiguous float32 array of shape (len(keys), table.dim), read in place.
A key may appear several times: its gradients are summed.)doc")
      .def("pull_async", &PullAsync, py::arg("table"), py::arg("keys"), py::arg("out") = py::none(),
           "Starts a pull and returns a Request; its wait() returns the array (see pull).\n"
           "The request holds the arrays until it is done.")
      .def("push_async", &PushAsync, py::arg("table"), py::arg("keys"), py::arg("grads"),
           "Starts a push and returns a Request (see push).")
      .def("prefetch", &PrefetchAsync, py::arg("table"), py::arg("keys"), kTablePrefetchDoc)
      .def(
          "pull_many",
          [](py::object self, py::object ops) { return WaitNow(PullManyAsync(self, ops)); },
          py::arg("ops"),
          "Pulls from several tables in one request: ops is a list of (table, keys) or\n"
          "(table, keys, out) tuples. Returns the list of pulled arrays. Does not advance the\n"
          "clock.")
      .def("pull_many_async", &PullManyAsync, py::arg("ops"),
           "pull_many, returning a Request whose wait() returns the list of arrays.")
      .def(
          "push_many", [](py::object self, py::object ops) { WaitNow(PushManyAsync(self, ops)); },
          py::arg("ops"),
          "Pushes to several tables in one request: ops is a list of (table, keys, grads)\n"
          "tuples. Does not advance the clock.")
      .def("push_many_async", &PushManyAsync, py::arg("ops"), "push_many, returning a Request.")
      .def(
          "push_pull",
          [](py::object self, py::object push, py::object pull) {
            return WaitNow(PushPullAsync(self, push, pull));
          },
          py::kw_only(), py::arg("push") = py::none(), py::arg("pull") = py::none(),
          R"doc(One training step's round trip: pushes the gradients of the current clock,
advances this worker's clock, then pulls at the new clock (in sync mode: the values after
every worker's gradients of this clock were applied).

push: list of (table, keys, grads) tuples.
pull: list of (table, keys) or (table, keys, out) tuples.
Returns the list of pulled arrays, in the order of `pull`.)doc")
      .def("push_pull_async", &PushPullAsync, py::kw_only(), py::arg("push") = py::none(),
           py::arg("pull") = py::none(),
           "push_pull, returning a Request whose wait() returns the list of pulled arrays.")
      .def(
          "clock",
          [](PyClient& c) {
            absl::Status status;
            {
              py::gil_scoped_release release;
              status = c.client().Clock();
            }
            Check(status);
            return c.client().clock();
          },
          "Advances this worker's clock by one on every server (after the step's pushes;\n"
          "push_pull does it by itself). Returns the new clock.");
}

// Client.close, the context manager and the read-only properties.
void BindClientState(py::class_<PyClient>& cls) {
  cls.def_property_readonly(
         "clock_value", [](PyClient& c) { return c.client().clock(); },
         "This worker's clock: the number of steps it has completed.")
      .def(
          "set_learning_rate_scale",
          [](PyClient& c, float scale) {
            if (!std::isfinite(scale) || scale < 0) {
              throw py::value_error("learning rate scale must be a finite number >= 0, got " +
                                    FloatString(scale));
            }
            c.client().SetLearningRateScale(scale);
          },
          py::arg("scale"),
          "Multiplies the tables' learning rate by `scale` for the pushes sent from now on\n"
          "(a schedule's factor).")
      .def("close", &PyClient::Close,
           "Cancels the requests in flight (they fail with CancelledError); every later call\n"
           "raises FailedPreconditionError ('the client is closed'). Idempotent.")
      .def_property_readonly(
          "closed", [](PyClient& c) { return c.client().closed(); },
          "True once close() was called.")
      .def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__",
          [](PyClient& c, py::object, py::object, py::object) {
            c.Close();
            return false;
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"))
      .def_property_readonly(
          "servers", [](PyClient& c) { return c.client().servers(); },
          "The servers, 'host:port' each, in shard-map order.")
      .def_property_readonly(
          "job_id", [](PyClient& c) { return c.client().job_id(); }, "The job.")
      .def_property_readonly(
          "worker_id", [](PyClient& c) { return c.client().worker_id(); }, "This worker's index.")
      .def_property_readonly(
          "num_workers", [](PyClient& c) { return c.options().num_workers; },
          "The job's number of workers.")
      .def_property_readonly(
          "consistency", [](PyClient& c) { return ConsistencyName(c.options().consistency); },
          "'async', 'sync' or 'ssp'.")
      .def_property_readonly(
          "staleness", [](PyClient& c) { return c.options().staleness; },
          "ssp: clocks a worker may run ahead of the slowest.")
      .def_property_readonly(
          "rpc_timeout", [](PyClient& c) { return absl::ToDoubleSeconds(c.options().rpc_timeout); },
          "Deadline of one request, seconds.")
      .def("__repr__", [](PyClient& c) {
        std::string servers;
        for (const std::string& s : c.client().servers()) {
          if (!servers.empty()) servers += ",";
          servers += s;
        }
        return "<paramserver.Client job='" + c.client().job_id() + "' worker " +
               std::to_string(c.client().worker_id()) + "/" +
               std::to_string(c.options().num_workers) + " " +
               ConsistencyName(c.options().consistency) + " servers=" + servers +
               (c.client().closed() ? " closed>" : ">");
      });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = kModuleDoc;
  // The classes are registered as paramserver.X (their home for users: help() and signatures
  // name them so); __name__ is restored at the end.
  const py::object module_name = m.attr("__name__");
  m.attr("__name__") = "paramserver";

  BindErrors(m);
  RegisterConfigs(m);  // Initializer, Optimizer (configs.cc)
  BindRequestAndTable(m);
  py::class_<PyClient> client(m, "Client", kClientDoc);
  BindClientConnect(client);
  BindClientTables(client);
  BindClientData(client);
  BindClientState(client);
  RegisterSession(m);  // Session (session_bindings.cc)

  m.attr("__name__") = module_name;

  m.def(
      "tune_process", [] { ps::TuneProcess(); },
      "Opt-in process-wide settings for a program that moves large tensors (ps::TuneProcess):\n"
      "freed memory stays in the process (glibc would otherwise hand every large request\n"
      "buffer back to the kernel and fault it in again on the next request) and Abseil's mutex\n"
      "deadlock detection is turned off. Importing paramserver changes nothing; call this once,\n"
      "early, if the program wants it (the daemons and the benchmarks do).");
  m.def("table_id_for", &ps::TableIdFor, py::arg("job_id"), py::arg("name"),
        "The id a table named `name` of job `job_id` gets when created with id 0: a stable\n"
        "31-bit hash, never 0.");
}
