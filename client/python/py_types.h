// The Python objects the module's parts share: a Table handle, a Request in flight and the
// Client (_core.cc binds them; session_bindings.cc makes a Client for a Session).
#ifndef PS_CLIENT_PYTHON_PY_TYPES_H_
#define PS_CLIENT_PYTHON_PY_TYPES_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "ps/client.h"

namespace paramserver_py {

namespace py = pybind11;

class PyClient;

// A table handle: its description and the Python Client it belongs to (kept alive).
struct PyTable {
  ps::Table table;
  py::object client;  // a PyClient
};

// A request in flight. Holds the arrays it borrows and the connection until it is done; its
// destruction waits for it (with the GIL released).
class PyRequest {
 public:
  PyRequest(ps::Pending pending, std::shared_ptr<ps::Client> client, std::vector<Borrowed> borrowed,
            py::object result, std::string what)
      : pending_(std::move(pending)),
        client_(std::move(client)),
        borrowed_(std::move(borrowed)),
        result_(std::move(result)),
        what_(std::move(what)) {}
  PyRequest(const PyRequest&) = delete;
  PyRequest& operator=(const PyRequest&) = delete;

  ~PyRequest() {
    py::gil_scoped_release release;
    if (!finished_) pending_.Wait().IgnoreError();
    // The last reference may destroy the client, which waits for its requests.
    client_.reset();
    // borrowed_ (buffer views, references) is released below with the GIL held again.
  }

  py::object Wait(std::optional<double> timeout) {
    if (!finished_) {
      bool timed_out = false;
      absl::Status status;
      {
        py::gil_scoped_release release;
        if (timeout.has_value()) {
          timed_out = !pending_.WaitFor(absl::Seconds(std::max(0.0, *timeout)));
        }
        if (!timed_out) status = pending_.Wait();
      }
      if (timed_out) {
        std::ostringstream s;
        s << "the " << what_ << " request is not done after " << *timeout << " s";
        PyErr_SetString(PyExc_TimeoutError, s.str().c_str());
        throw py::error_already_set();
      }
      if (!finished_) {
        finished_ = true;
        status_ = status;
        borrowed_.clear();  // the servers are done with the caller's buffers
      }
    }
    Check(status_);
    return result_;
  }

  bool Done() const {
    if (finished_) return true;
    return pending_.Done();
  }

  std::string Repr() const {
    std::string state =
        finished_ ? (status_.ok() ? "done" : "failed") : (pending_.Done() ? "done" : "in flight");
    return "<paramserver.Request " + what_ + " " + state + ">";
  }

 private:
  ps::Pending pending_;
  std::shared_ptr<ps::Client> client_;
  std::vector<Borrowed> borrowed_;
  py::object result_;
  std::string what_;
  bool finished_ = false;
  absl::Status status_;
};

class PyClient {
 public:
  PyClient(std::shared_ptr<ps::Client> client, ps::ClientOptions options)
      : client_(std::move(client)), options_(std::move(options)) {}
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  ~PyClient() {
    py::gil_scoped_release release;
    client_.reset();  // waits for its requests in flight (unless a Request still holds it)
  }

  ps::Client& client() { return *client_; }
  const std::shared_ptr<ps::Client>& shared() const { return client_; }
  const ps::ClientOptions& options() const { return options_; }

  void Close() {
    py::gil_scoped_release release;
    client_->Close();
  }

 private:
  std::shared_ptr<ps::Client> client_;
  ps::ClientOptions options_;
};

// A Table handle of `client` (a PyClient).
inline py::object MakeTable(py::object client, ps::Table table) {
  return py::cast(PyTable{std::move(table), std::move(client)});
}

// "sync", "ssp" or "async".
inline std::string ConsistencyName(ps::Consistency c) {
  switch (c) {
    case ps::Consistency::kSync:
      return "sync";
    case ps::Consistency::kSsp:
      return "ssp";
    case ps::Consistency::kAsync:
      return "async";
  }
  return "?";
}

}  // namespace paramserver_py

#endif  // PS_CLIENT_PYTHON_PY_TYPES_H_
