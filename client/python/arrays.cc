#include "arrays.h"

#include <cstring>
#include <utility>

namespace paramserver_py {

void Check(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

ErrorClasses* g_errors = nullptr;

std::string CodeName(absl::StatusCode code) { return absl::StatusCodeToString(code); }

void SetPythonError(const absl::Status& status) {
  py::object cls = g_errors->base;
  auto it = g_errors->by_code.find(status.code());
  if (it != g_errors->by_code.end()) cls = it->second;
  if (ps::IsStepInterrupted(status) && g_errors->step_interrupted) cls = g_errors->step_interrupted;
  std::string message(status.message());
  if (message.empty()) message = CodeName(status.code());
  py::object exc = cls(py::str(message));
  exc.attr("code") = py::str(CodeName(status.code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

// Buffers

std::string TypeName(py::handle obj) {
  return py::str(py::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__name__"));
}

bool IsTorchTensor(py::handle obj) {
  py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())));
  if (!py::hasattr(type, "__module__")) return false;
  const std::string module = py::str(type.attr("__module__"));
  return module.rfind("torch", 0) == 0 && py::hasattr(obj, "numpy");
}

// numpy view (tensor.numpy() shares the tensor's memory).
py::object AsBufferObject(py::handle obj, const std::string& what) {
  if (PyObject_CheckBuffer(obj.ptr())) return py::reinterpret_borrow<py::object>(obj);
  if (IsTorchTensor(obj)) {
    if (py::hasattr(obj, "requires_grad") && obj.attr("requires_grad").cast<bool>()) {
      throw py::type_error(what +
                           " is a torch tensor that requires grad; pass tensor.detach() (its "
                           "memory is shared, nothing is copied)");
    }
    if (py::hasattr(obj, "device")) {
      const std::string device = py::str(obj.attr("device").attr("type"));
      if (device != "cpu") {
        throw py::type_error(what + " is a torch tensor on '" + device +
                             "'; only CPU tensors (or numpy arrays) are accepted");
      }
    }
    return obj.attr("numpy")();
  }
  throw py::type_error(what + " must be a numpy array (or a CPU torch tensor), got " +
                       TypeName(obj));
}

Elem ElemOf(const py::buffer_info& info) {
  std::string f = info.format;
  // Native or little-endian byte order ('@', '=', '<'; this is a little-endian machine).
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f.size() != 1) return Elem::kOther;
  const char c = f[0];
  if (info.itemsize == 8 && (c == 'Q' || c == 'L')) return Elem::kUint64;
  if (info.itemsize == 8 && (c == 'q' || c == 'l')) return Elem::kInt64;
  if (info.itemsize == 4 && c == 'f') return Elem::kFloat32;
  return Elem::kOther;
}

// A readable name of the dtype of `obj` (numpy's when it has one).
std::string DtypeName(py::handle obj, const py::buffer_info& info) {
  if (py::hasattr(obj, "dtype")) return py::str(obj.attr("dtype"));
  std::ostringstream s;
  s << "format '" << info.format << "' of " << info.itemsize << "-byte items";
  return s.str();
}

std::string ShapeString(const std::vector<py::ssize_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s << ", ";
    s << shape[i];
  }
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

// True if the buffer is C-contiguous (dimensions of size <= 1 may have any stride).
bool IsCContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

KeysArg ParseKeys(py::handle obj, const std::string& what) {
  KeysArg k;
  k.borrowed.object = py::reinterpret_borrow<py::object>(obj);
  k.borrowed.array = AsBufferObject(obj, what);
  k.borrowed.info = std::make_unique<py::buffer_info>(
      py::reinterpret_borrow<py::buffer>(k.borrowed.array).request());
  const py::buffer_info& info = *k.borrowed.info;
  const Elem elem = ElemOf(info);
  if (elem != Elem::kUint64 && elem != Elem::kInt64) {
    throw py::type_error(what +
                         " must be a 1-D array of uint64 (or of non-negative int64), got dtype " +
                         DtypeName(k.borrowed.array, info));
  }
  if (info.ndim != 1) {
    throw py::value_error(what + " must be a 1-D array, got shape " + ShapeString(info.shape));
  }
  if (!IsCContiguous(info)) {
    throw py::value_error(what + " must be C-contiguous (stride 8 bytes), got stride " +
                          std::to_string(info.strides[0]) + " bytes; pass np.ascontiguousarray(" +
                          what + ")");
  }
  const size_t n = static_cast<size_t>(info.shape[0]);
  if (n > 0 && reinterpret_cast<uintptr_t>(info.ptr) % alignof(uint64_t) != 0) {
    throw py::value_error(what + " must be aligned to 8 bytes");
  }
  if (elem == Elem::kInt64) {
    const int64_t* p = static_cast<const int64_t*>(info.ptr);
    for (size_t i = 0; i < n; ++i) {
      if (p[i] < 0) {
        throw py::value_error(what + " must be non-negative, got " + what + "[" +
                              std::to_string(i) + "] = " + std::to_string(p[i]));
      }
    }
  }
  k.span = absl::Span<const uint64_t>(static_cast<const uint64_t*>(info.ptr), n);
  return k;
}

ValuesArg ParseValues(py::handle obj, const std::string& what, size_t n, uint32_t dim,
                      bool writable) {
  ValuesArg v;
  v.borrowed.object = py::reinterpret_borrow<py::object>(obj);
  v.borrowed.array = AsBufferObject(obj, what);
  v.borrowed.info = std::make_unique<py::buffer_info>(
      py::reinterpret_borrow<py::buffer>(v.borrowed.array).request());
  const py::buffer_info& info = *v.borrowed.info;
  const std::string want_shape =
      ShapeString({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(dim)});
  if (ElemOf(info) != Elem::kFloat32) {
    throw py::type_error(what + " must be a float32 array of shape " + want_shape + ", got dtype " +
                         DtypeName(v.borrowed.array, info));
  }
  if (info.ndim != 2 || info.shape[0] != static_cast<py::ssize_t>(n) ||
      info.shape[1] != static_cast<py::ssize_t>(dim)) {
    throw py::value_error(what + " must have shape " + want_shape + " (" + std::to_string(n) +
                          " keys, table dim " + std::to_string(dim) + "), got shape " +
                          ShapeString(info.shape));
  }
  if (!IsCContiguous(info)) {
    std::vector<py::ssize_t> strides(info.strides.begin(), info.strides.end());
    throw py::value_error(what + " must be C-contiguous, got strides " + ShapeString(strides) +
                          " bytes; pass np.ascontiguousarray(" + what + ")");
  }
  if (writable && info.readonly) {
    throw py::value_error(what + " must be writable, got a read-only array");
  }
  v.size = n * dim;
  if (v.size > 0 && reinterpret_cast<uintptr_t>(info.ptr) % alignof(float) != 0) {
    throw py::value_error(what + " must be aligned to 4 bytes");
  }
  v.data = static_cast<float*>(info.ptr);
  return v;
}

// A fresh (n, dim) float32 array to pull into.
ValuesArg NewValues(size_t n, uint32_t dim) {
  py::array_t<float> array({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(dim)});
  ValuesArg v;
  v.borrowed.object = array;
  v.borrowed.array = array;
  v.borrowed.info = std::make_unique<py::buffer_info>(array.request(true));
  v.data = static_cast<float*>(v.borrowed.info->ptr);
  v.size = n * dim;
  return v;
}

}  // namespace paramserver_py
