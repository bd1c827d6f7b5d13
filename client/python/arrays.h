// The Python binding's errors and array arguments: absl::Status to paramserver.Error, and
// numpy arrays (or CPU torch tensors) checked and borrowed without a copy.
#ifndef PS_CLIENT_PYTHON_ARRAYS_H_
#define PS_CLIENT_PYTHON_ARRAYS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ps/client.h"

namespace paramserver_py {

namespace py = pybind11;

// ---------------------------------------------------------------------------------------------
// Errors

// A failed absl::Status on its way to Python (the translator turns it into a paramserver.Error).
class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status status)
      : status_(std::move(status)), what_(status_.ToString()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

void Check(const absl::Status& status);

// The exception classes, created at import (leaked: they live as long as the interpreter).
struct ErrorClasses {
  py::object base;                                 // paramserver.Error
  std::map<absl::StatusCode, py::object> by_code;  // its subclasses
  py::object step_interrupted;                     // paramserver.StepInterrupted (ABORTED)
};

extern ErrorClasses* g_errors;

std::string CodeName(absl::StatusCode code);

void SetPythonError(const absl::Status& status);
// ---------------------------------------------------------------------------------------------
// Buffers
// Buffers

std::string TypeName(py::handle obj);

bool IsTorchTensor(py::handle obj);
// `obj` as an object exporting the buffer protocol: itself, or, for a CPU torch tensor, its
// numpy view (tensor.numpy() shares the tensor's memory).
// numpy view (tensor.numpy() shares the tensor's memory).
py::object AsBufferObject(py::handle obj, const std::string& what);

// The element type of a buffer, from its struct-module format and item size.
enum class Elem { kUint64, kInt64, kFloat32, kOther };

Elem ElemOf(const py::buffer_info& info);
// A readable name of the dtype of `obj` (numpy's when it has one).
// A readable name of the dtype of `obj` (numpy's when it has one).
std::string DtypeName(py::handle obj, const py::buffer_info& info);

std::string ShapeString(const std::vector<py::ssize_t>& shape);
// True if the buffer is C-contiguous (dimensions of size <= 1 may have any stride).
// True if the buffer is C-contiguous (dimensions of size <= 1 may have any stride).
bool IsCContiguous(const py::buffer_info& info);

// An array a request reads or writes, held (exported) until the request is done, so that its
// memory can neither be freed nor resized under it.
struct Borrowed {
  py::object object;  // what the caller passed (returned as is for out=)
  py::object array;   // the object exporting the buffer (object, or a tensor's numpy view)
  std::unique_ptr<py::buffer_info> info;
};

// Keys: a 1-D C-contiguous uint64 array, or int64 with non-negative values (torch has no
// uint64), reinterpreted in place.
struct KeysArg {
  Borrowed borrowed;
  absl::Span<const uint64_t> span;
};

KeysArg ParseKeys(py::handle obj, const std::string& what = "keys");

// Values: a C-contiguous float32 array of shape (n, dim).
struct ValuesArg {
  Borrowed borrowed;
  float* data = nullptr;
  size_t size = 0;
};

ValuesArg ParseValues(py::handle obj, const std::string& what, size_t n, uint32_t dim,
                      bool writable);
// A fresh (n, dim) float32 array to pull into.
// A fresh (n, dim) float32 array to pull into.
ValuesArg NewValues(size_t n, uint32_t dim);

}  // namespace paramserver_py

#endif  // PS_CLIENT_PYTHON_ARRAYS_H_
