// paramserver.Session: a program job's session (ps::Session) and its Python Client.
#ifndef PS_CLIENT_PYTHON_SESSION_BINDINGS_H_
#define PS_CLIENT_PYTHON_SESSION_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace paramserver_py {

namespace py = pybind11;

// Registers the Session class in `m` (after the Client class, whose objects it returns).
void RegisterSession(py::module_& m);

}  // namespace paramserver_py

#endif  // PS_CLIENT_PYTHON_SESSION_BINDINGS_H_
