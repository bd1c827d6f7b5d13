// paramserver.Initializer and paramserver.Optimizer: registered by RegisterConfigs; the
// conversions of create_table's initializer= and optimizer= arguments.
#ifndef PS_CLIENT_PYTHON_CONFIGS_H_
#define PS_CLIENT_PYTHON_CONFIGS_H_

#include <pybind11/pybind11.h>

#include <string>

#include "ps/client.h"

namespace paramserver_py {

namespace py = pybind11;

// Registers the Initializer and Optimizer classes in `m`.
void RegisterConfigs(py::module_& m);
// An initializer= / optimizer= argument: None (the defaults), an instance, or a name.
ps::Initializer InitializerOf(py::object obj);
ps::Optimizer OptimizerOf(py::object obj);
// create_table's storage= ("fp32", "fp16", "bf16"), admission= and eviction= (None: off, or a
// dict of AdmissionSpec's min_count, probability, decay_seconds / EvictionSpec's max_rows,
// ttl_seconds) into `config`; a bad name, key or range raises ValueError (the servers check
// the values too).
void SetTableFeatures(const std::string& storage, py::object admission, py::object eviction,
                      ps::TableConfig& config);
// create_table's push_codec= and pull_codec= ("none", "fp16", "bf16", "topk", "sign", "int8")
// and topk_ratio= (None, or the fraction of a block's values a topk push sends),
// topk_momentum= and topk_warmup_steps= (None, or ps::WireCodec's momentum and warmup_steps),
// pull_delta= (ps::WireCodec::delta of the pull codec).
void SetTableCodecs(const std::string& push_codec, const std::string& pull_codec,
                    py::object topk_ratio, py::object topk_momentum, py::object topk_warmup_steps,
                    bool pull_delta, ps::TableConfig& config);
// create_table's spec= and its other keywords into config.spec (ps::TableConfig::spec): spec=
// None, a str (TableSpec fields in protobuf text format, as a job file writes them, passed as it
// is) or a dict (TableSpec fields by their proto names, passed as JSON, numpy scalars as the
// values they hold); `settings`, the keywords create_table does not name, are more entries of
// that dict (tier={"disk": True}). TypeError for a spec of another type, a str spec with
// keywords, a key given twice or a value JSON cannot hold; the client library parses and checks
// the fields (InvalidArgumentError naming a bad one).
void SetTableSpec(py::object spec, const py::kwargs& settings, ps::TableConfig& config);
// A float as Python prints it (shortest round-trip form).
std::string FloatString(float v);

}  // namespace paramserver_py

#endif  // PS_CLIENT_PYTHON_CONFIGS_H_
