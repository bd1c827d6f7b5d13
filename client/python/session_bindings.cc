// paramserver.Session (see session_bindings.h): from_env, what a session knows of its job, its
// step loop and its reports, each call with the GIL released while it waits.
#include "session_bindings.h"

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "arrays.h"
#include "docstrings.h"
#include "ps/client.h"
#include "ps/session.h"
#include "py_types.h"

namespace paramserver_py {
namespace {

// A program job's Session, with the Python Client over its managed client (made once: tables
// keep a reference to it).
// The session, shared with its client's Python object (which holds the session's client
// through an aliasing pointer, keeping the session alive as long as a table or a request does).
struct PySession {
  std::shared_ptr<ps::Session> session;
  py::object client;

  ~PySession() {
    client = py::object();
    py::gil_scoped_release release;
    session.reset();
  }
};

std::optional<double> OptionalFloat(py::object value, const char* what) {
  if (value.is_none()) return std::nullopt;
  try {
    return value.cast<double>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(what) + " must be a number or None, got " + TypeName(value));
  }
}

std::map<std::string, double> Metrics(py::object metrics) {
  std::map<std::string, double> out;
  if (metrics.is_none()) return out;
  for (auto item : metrics.cast<py::dict>()) {
    out[item.first.cast<std::string>()] = item.second.cast<double>();
  }
  return out;
}

// Session.from_env and what a session knows of its job.
void BindSessionInfo(py::class_<PySession>& cls) {
  cls.def_static(
         "from_env",
         [](double recovery_wait, double rpc_timeout, bool log) {
           ps::SessionOptions o;
           if (!(recovery_wait > 0) || !(rpc_timeout > 0)) {
             throw py::value_error("recovery_wait and rpc_timeout must be positive seconds");
           }
           o.recovery_wait = absl::Seconds(recovery_wait);
           o.rpc_timeout = absl::Seconds(rpc_timeout);
           o.log_to_stderr = log;
           absl::StatusOr<std::unique_ptr<ps::Session>> session;
           {
             py::gil_scoped_release release;
             session = ps::Session::FromEnv(o);
           }
           if (!session.ok()) throw StatusError(session.status());
           auto py_session = std::make_unique<PySession>();
           py_session->session = std::move(*session);
           ps::ClientOptions co = py_session->session->client().options();
           std::shared_ptr<ps::Client> client(py_session->session, &py_session->session->client());
           py_session->client = py::cast(std::make_unique<PyClient>(client, std::move(co)));
           return py_session;
         },
         py::arg("recovery_wait") = 90.0, py::arg("rpc_timeout") = 120.0, py::arg("log") = true,
         "The session of the program a worker daemon runs (from PS_AGENT and the other PS_\n"
         "variables). FailedPreconditionError if there is none.")
      .def_property_readonly(
          "client", [](PySession& s) { return s.client; },
          "The paramserver.Client of the job's servers, managed by the session: create_table\n"
          "returns the job file's table of that name (others are refused), and a request that\n"
          "could not complete because a server died raises StepInterrupted, as does every\n"
          "later request of the step, until next() has recovered.")
      .def_property_readonly(
          "step_interrupted", [](PySession& s) { return s.session->step_interrupted(); },
          "True once a request of the current step raised StepInterrupted, until next() or\n"
          "next_batch() has recovered.")
      .def_property_readonly("job_id", [](PySession& s) { return s.session->job_id(); })
      .def_property_readonly("worker_id", [](PySession& s) { return s.session->worker_id(); })
      .def_property_readonly(
          "rank", [](PySession& s) { return s.session->rank(); },
          "This worker's index among the job's live workers (changes when workers die or join).")
      .def_property_readonly(
          "num_workers", [](PySession& s) { return s.session->num_workers(); },
          "The job's live workers.")
      .def_property_readonly("consistency",
                             [](PySession& s) { return ConsistencyName(s.session->consistency()); })
      .def_property_readonly("staleness", [](PySession& s) { return s.session->staleness(); })
      .def_property_readonly(
          "recoveries", [](PySession& s) { return s.session->recoveries(); },
          "Server losses this session recovered from.");
}

// Session's step loop.
void BindSessionLoop(py::class_<PySession>& cls) {
  cls.def(
         "table",
         [](PySession& s, const std::string& name) {
           absl::StatusOr<ps::Table> t;
           {
             py::gil_scoped_release release;
             t = s.session->table(name);
           }
           if (!t.ok()) throw StatusError(t.status());
           return MakeTable(s.client, *t);
         },
         py::arg("name"), "A table the job file declares (NotFoundError otherwise).")
      .def_property_readonly(
          "tables",
          [](PySession& s) {
            py::dict out;
            std::vector<ps::Table> tables;
            {
              py::gil_scoped_release release;
              tables = s.session->tables();
            }
            for (ps::Table& t : tables) {
              const std::string name = t.name;
              out[py::str(name)] = MakeTable(s.client, std::move(t));
            }
            return out;
          },
          "{name: paramserver.Table} of the job's declared tables.")
      .def(
          "begin",
          [](PySession& s, long long total, long long per_epoch) {
            absl::StatusOr<int64_t> step;
            {
              py::gil_scoped_release release;
              step = s.session->Begin(total, per_epoch);
            }
            if (!step.ok()) throw StatusError(step.status());
            return *step;
          },
          py::arg("total_steps"), py::arg("steps_per_epoch") = 0,
          "Starts the loop: returns the step to start at (see steps()).")
      .def(
          "next",
          [](PySession& s) {
            absl::StatusOr<int64_t> step;
            {
              py::gil_scoped_release release;
              step = s.session->Next();
            }
            if (!step.ok()) throw StatusError(step.status());
            return *step;
          },
          "Ends the current step (clock, recovery, progress, checkpoint); returns the next.");
}

// Session reports, checkpoints and __repr__.
void BindSessionReports(py::class_<PySession>& cls) {
  cls.def("_report",
          [](PySession& s, py::object loss, py::object accuracy, long long samples,
             py::object metrics) {
            ps::StepReport r;
            r.loss = OptionalFloat(loss, "loss");
            r.accuracy = OptionalFloat(accuracy, "accuracy");
            r.samples = samples;
            r.metrics = Metrics(metrics);
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = s.session->Report(r);
            }
            if (!st.ok()) throw StatusError(st);
          })
      .def("_report_evaluation",
           [](PySession& s, py::object loss, py::object accuracy, py::object metrics) {
             const std::optional<double> l = OptionalFloat(loss, "loss");
             const std::optional<double> a = OptionalFloat(accuracy, "accuracy");
             const std::map<std::string, double> m = Metrics(metrics);
             absl::Status st;
             {
               py::gil_scoped_release release;
               st = s.session->ReportEvaluation(l, a, m);
             }
             if (!st.ok()) throw StatusError(st);
           })
      .def_property_readonly(
          "dynamic_data", [](PySession& s) { return s.session->dynamic_data(); },
          "Whether the scheduler hands out the job's data (data_assignment DYNAMIC): loop on\n"
          "batches() then, else on steps().")
      .def(
          "next_batch",
          [](PySession& s, long long num_examples, int batch_size) -> py::object {
            absl::StatusOr<std::optional<ps::DataBatch>> batch;
            {
              py::gil_scoped_release release;
              batch = s.session->NextBatch(num_examples, batch_size);
            }
            if (!batch.ok()) throw StatusError(batch.status());
            if (!batch->has_value()) return py::none();
            ps::DataBatch& b = **batch;
            py::array_t<int64_t> examples(static_cast<py::ssize_t>(b.examples.size()));
            std::memcpy(examples.mutable_data(), b.examples.data(),
                        b.examples.size() * sizeof(int64_t));
            py::dict out;
            out["epoch"] = b.epoch;
            out["index"] = b.index;
            out["step"] = b.step;
            out["examples"] = std::move(examples);
            out["epochs_done"] = b.epochs_done;
            return out;
          },
          py::arg("num_examples"), py::arg("batch_size"),
          "Dynamic data: ends the current step and returns the next range handed to this worker\n"
          "as a dict (epoch, index, step, examples: an int64 numpy array of indices into the\n"
          "data set, epochs_done), or None once every range of every epoch is read. See\n"
          "batches().")
      .def(
          "request_checkpoint",
          [](PySession& s) {
            absl::Status st;
            {
              py::gil_scoped_release release;
              st = s.session->RequestCheckpoint();
            }
            if (!st.ok()) throw StatusError(st);
          },
          "Asks for a checkpoint of the job's tables (taken at the next step of rank 0).")
      .def("__repr__", [](PySession& s) {
        return "<paramserver.Session job='" + s.session->job_id() + "' worker " +
               std::to_string(s.session->worker_id()) + " rank " +
               std::to_string(s.session->rank()) + "/" + std::to_string(s.session->num_workers()) +
               ">";
      });
}

}  // namespace

void RegisterSession(py::module_& m) {
  py::class_<PySession> session(m, "Session", kSessionDoc);
  BindSessionInfo(session);
  BindSessionLoop(session);
  BindSessionReports(session);
}

}  // namespace paramserver_py
