// The Python binding's Initializer and Optimizer classes (paramserver.Initializer,
// paramserver.Optimizer): their registration, names and the conversions create_table uses.
#include "configs.h"

#include <pybind11/stl.h>

#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "arrays.h"
#include "docstrings.h"

namespace paramserver_py {
namespace {

const char* InitializerKindName(ps::Initializer::Kind kind) {
  switch (kind) {
    case ps::Initializer::Kind::kZeros:
      return "zeros";
    case ps::Initializer::Kind::kConstant:
      return "constant";
    case ps::Initializer::Kind::kUniform:
      return "uniform";
    case ps::Initializer::Kind::kNormal:
      return "normal";
  }
  return "?";
}

ps::Initializer::Kind ParseInitializerKind(const std::string& name) {
  if (name == "zeros") return ps::Initializer::Kind::kZeros;
  if (name == "constant") return ps::Initializer::Kind::kConstant;
  if (name == "uniform") return ps::Initializer::Kind::kUniform;
  if (name == "normal") return ps::Initializer::Kind::kNormal;
  throw py::value_error(
      "initializer kind must be 'zeros', 'constant', 'uniform' or 'normal', got '" + name + "'");
}

const char* OptimizerKindName(ps::Optimizer::Kind kind) {
  switch (kind) {
    case ps::Optimizer::Kind::kSgd:
      return "sgd";
    case ps::Optimizer::Kind::kMomentum:
      return "momentum";
    case ps::Optimizer::Kind::kAdagrad:
      return "adagrad";
    case ps::Optimizer::Kind::kAdam:
      return "adam";
    case ps::Optimizer::Kind::kFtrl:
      return "ftrl";
  }
  return "?";
}

ps::Optimizer::Kind ParseOptimizerKind(const std::string& name) {
  if (name == "sgd") return ps::Optimizer::Kind::kSgd;
  if (name == "momentum") return ps::Optimizer::Kind::kMomentum;
  if (name == "adagrad") return ps::Optimizer::Kind::kAdagrad;
  if (name == "adam") return ps::Optimizer::Kind::kAdam;
  if (name == "ftrl") return ps::Optimizer::Kind::kFtrl;
  throw py::value_error("optimizer must be 'sgd', 'momentum', 'adagrad', 'adam' or 'ftrl', got '" +
                        name + "'");
}

}  // namespace

std::string FloatString(float v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

ps::Initializer InitializerOf(py::object obj) {
  if (obj.is_none()) return ps::Initializer{};
  if (py::isinstance<py::str>(obj)) {
    const std::string name = obj.cast<std::string>();
    if (name != "zeros") {
      throw py::value_error(
          "initializer given by name must be 'zeros' (use "
          "paramserver.Initializer.constant/uniform/normal for others), got '" +
          name + "'");
    }
    return ps::Initializer{};
  }
  if (!py::isinstance<ps::Initializer>(obj)) {
    throw py::type_error("initializer must be a paramserver.Initializer, 'zeros' or None, got " +
                         TypeName(obj));
  }
  return obj.cast<ps::Initializer>();
}

ps::Optimizer OptimizerOf(py::object obj) {
  if (obj.is_none()) return ps::Optimizer{};
  if (py::isinstance<py::str>(obj)) {
    ps::Optimizer o;
    o.kind = ParseOptimizerKind(obj.cast<std::string>());
    return o;
  }
  if (!py::isinstance<ps::Optimizer>(obj)) {
    throw py::type_error(
        "optimizer must be a paramserver.Optimizer, an optimizer name or None, "
        "got " +
        TypeName(obj));
  }
  return obj.cast<ps::Optimizer>();
}

namespace {

// The integer value of `dict[key]` in [0, max], or 0 when absent.
long long IntIn(const py::dict& d, const char* what, const char* key, long long max) {
  if (!d.contains(key)) return 0;
  const long long v = d[key].cast<long long>();
  if (v < 0 || v > max) {
    throw py::value_error(std::string(what) + "['" + key + "'] must be in [0, " +
                          std::to_string(max) + "], got " + std::to_string(v));
  }
  return v;
}

// `obj` as a dict whose keys are among `allowed` (None: an empty dict).
py::dict DictOf(py::object obj, const char* what, std::initializer_list<const char*> allowed) {
  if (obj.is_none()) return py::dict();
  if (!py::isinstance<py::dict>(obj)) {
    throw py::type_error(std::string(what) + " must be a dict or None, got " + TypeName(obj));
  }
  py::dict d = obj.cast<py::dict>();
  for (auto item : d) {
    const std::string key = py::str(item.first);
    bool known = false;
    std::string names;
    for (const char* a : allowed) {
      known = known || key == a;
      names += names.empty() ? a : std::string(", ") + a;
    }
    if (!known) {
      throw py::value_error(std::string(what) + ": unknown key '" + key + "' (known: " + names +
                            ")");
    }
  }
  return d;
}

}  // namespace

void SetTableFeatures(const std::string& storage, py::object admission, py::object eviction,
                      ps::TableConfig& config) {
  if (storage == "fp32") {
    config.storage = ps::Storage::kFp32;
  } else if (storage == "fp16") {
    config.storage = ps::Storage::kFp16;
  } else if (storage == "bf16") {
    config.storage = ps::Storage::kBf16;
  } else {
    throw py::value_error("storage must be 'fp32', 'fp16' or 'bf16', got '" + storage + "'");
  }
  py::dict a = DictOf(admission, "admission", {"min_count", "probability", "decay_seconds"});
  config.admission.min_count = static_cast<uint32_t>(IntIn(a, "admission", "min_count", 255));
  config.admission.decay_seconds =
      static_cast<uint32_t>(IntIn(a, "admission", "decay_seconds", (1LL << 31) - 1));
  if (a.contains("probability")) {
    const float p = a["probability"].cast<float>();
    if (!(p > 0 && p <= 1)) {
      throw py::value_error("admission['probability'] must be in (0, 1], got " + FloatString(p));
    }
    config.admission.probability = p;
  }
  py::dict e = DictOf(eviction, "eviction", {"max_rows", "ttl_seconds"});
  config.eviction.max_rows = static_cast<uint64_t>(IntIn(e, "eviction", "max_rows", 1LL << 40));
  config.eviction.ttl_seconds = IntIn(e, "eviction", "ttl_seconds", (1LL << 31) - 1);
}

namespace {
ps::Codec CodecOf(const std::string& name, const char* arg) {
  static const std::pair<const char*, ps::Codec> kCodecs[] = {
      {"none", ps::Codec::kNone}, {"fp16", ps::Codec::kFp16}, {"bf16", ps::Codec::kBf16},
      {"topk", ps::Codec::kTopk}, {"sign", ps::Codec::kSign}, {"int8", ps::Codec::kInt8}};
  for (const auto& [n, c] : kCodecs) {
    if (name == n) return c;
  }
  throw py::value_error(std::string(arg) +
                        " must be 'none', 'fp16', 'bf16', 'topk', 'sign' or 'int8', got '" + name +
                        "'");
}
}  // namespace

void SetTableCodecs(const std::string& push_codec, const std::string& pull_codec,
                    py::object topk_ratio, py::object topk_momentum, py::object topk_warmup_steps,
                    bool pull_delta, ps::TableConfig& config) {
  config.push_codec.codec = CodecOf(push_codec, "push_codec");
  config.pull_codec.codec = CodecOf(pull_codec, "pull_codec");
  config.pull_codec.delta = pull_delta;
  if (!topk_ratio.is_none()) {
    const float r = topk_ratio.cast<float>();
    if (config.push_codec.codec != ps::Codec::kTopk) {
      throw py::value_error("topk_ratio is for push_codec='topk'");
    }
    if (!(r > 0 && r <= 1)) {
      throw py::value_error("topk_ratio must be in (0, 1], got " + FloatString(r));
    }
    config.push_codec.ratio = r;
  } else if (config.push_codec.codec == ps::Codec::kTopk) {
    throw py::value_error("push_codec='topk' needs topk_ratio (e.g. 0.01)");
  }
  if (!topk_momentum.is_none()) {
    const float m = topk_momentum.cast<float>();
    if (config.push_codec.codec != ps::Codec::kTopk) {
      throw py::value_error("topk_momentum is for push_codec='topk'");
    }
    if (!(m >= 0 && m < 1)) {
      throw py::value_error("topk_momentum must be in [0, 1), got " + FloatString(m));
    }
    config.push_codec.momentum = m;
  }
  if (!topk_warmup_steps.is_none()) {
    const long long w = topk_warmup_steps.cast<long long>();
    if (config.push_codec.codec != ps::Codec::kTopk) {
      throw py::value_error("topk_warmup_steps is for push_codec='topk'");
    }
    if (w < 0 || w > std::numeric_limits<uint32_t>::max()) {
      throw py::value_error("topk_warmup_steps must be in [0, 2**32), got " + std::to_string(w));
    }
    config.push_codec.warmup_steps = static_cast<uint32_t>(w);
  }
}

void SetTableSpec(py::object spec, const py::kwargs& settings, ps::TableConfig& config) {
  if (py::isinstance<py::str>(spec)) {
    if (py::len(settings) != 0) {
      throw py::type_error("spec= given as text takes no other table settings as keywords (" +
                           py::str(py::list(settings.attr("keys")())).cast<std::string>() +
                           "): write them in the text, or give spec as a dict");
    }
    config.spec = spec.cast<std::string>();
    return;
  }
  py::dict fields;
  if (!spec.is_none()) {
    if (!py::isinstance<py::dict>(spec)) {
      throw py::type_error(
          "spec must be a str (TableSpec fields in protobuf text format), a dict or None, got " +
          TypeName(spec));
    }
    fields = spec.attr("copy")();
  }
  for (auto item : settings) {
    if (fields.contains(item.first)) {
      throw py::type_error("table setting '" + py::str(item.first).cast<std::string>() +
                           "' is given both in spec= and as a keyword");
    }
    fields[item.first] = item.second;
  }
  if (py::len(fields) == 0) return;
  // numpy scalars (np.int64(10), np.bool_(True)) as the Python values they hold.
  py::cpp_function scalar([](py::object value) -> py::object {
    if (py::hasattr(value, "item")) return value.attr("item")();
    throw py::type_error("a table setting's value must be a dict, list, str, number or bool, got " +
                         TypeName(value));
  });
  config.spec = py::module_::import("json")
                    .attr("dumps")(fields, py::arg("default") = scalar)
                    .cast<std::string>();
}

std::string OptionalRepr(const char* name, const std::optional<float>& v) {
  return v.has_value() ? std::string(", ") + name + "=" + FloatString(*v) : "";
}

namespace {

void RegisterInitializer(py::module_& m) {
  py::class_<ps::Initializer>(m, "Initializer", kInitializerDoc)
      .def(py::init([](const std::string& kind, float value, float low, float high, float stddev,
                       uint64_t seed) {
             ps::Initializer i;
             i.kind = ParseInitializerKind(kind);
             i.value = value;
             i.low = low;
             i.high = high;
             i.stddev = stddev;
             i.seed = seed;
             return i;
           }),
           py::arg("kind") = "zeros", py::arg("value") = 0.0f, py::arg("low") = 0.0f,
           py::arg("high") = 0.0f, py::arg("stddev") = 0.0f, py::arg("seed") = 0)
      .def_static(
          "zeros", []() { return ps::Initializer{}; }, "Rows start at 0.")
      .def_static(
          "constant",
          [](float value) {
            ps::Initializer i;
            i.kind = ps::Initializer::Kind::kConstant;
            i.value = value;
            return i;
          },
          py::arg("value"), "Every value starts at `value`.")
      .def_static(
          "uniform",
          [](float low, float high, uint64_t seed) {
            ps::Initializer i;
            i.kind = ps::Initializer::Kind::kUniform;
            i.low = low;
            i.high = high;
            i.seed = seed;
            return i;
          },
          py::arg("low"), py::arg("high"), py::arg("seed") = 0,
          "Values uniform in [low, high), from (seed, table name, key).")
      .def_static(
          "normal",
          [](float stddev, uint64_t seed) {
            ps::Initializer i;
            i.kind = ps::Initializer::Kind::kNormal;
            i.stddev = stddev;
            i.seed = seed;
            return i;
          },
          py::arg("stddev"), py::arg("seed") = 0,
          "Values normal(0, stddev), from (seed, table name, key).")
      .def_property_readonly(
          "kind", [](const ps::Initializer& i) { return InitializerKindName(i.kind); },
          "'zeros', 'constant', 'uniform' or 'normal'.")
      .def_readonly("value", &ps::Initializer::value, "constant: the value.")
      .def_readonly("low", &ps::Initializer::low, "uniform: the lower bound.")
      .def_readonly("high", &ps::Initializer::high, "uniform: the upper bound (excluded).")
      .def_readonly("stddev", &ps::Initializer::stddev, "normal: the standard deviation.")
      .def_readonly("seed", &ps::Initializer::seed, "uniform, normal: the seed.")
      .def("__repr__", [](const ps::Initializer& i) {
        switch (i.kind) {
          case ps::Initializer::Kind::kZeros:
            return std::string("Initializer.zeros()");
          case ps::Initializer::Kind::kConstant:
            return "Initializer.constant(" + FloatString(i.value) + ")";
          case ps::Initializer::Kind::kUniform:
            return "Initializer.uniform(" + FloatString(i.low) + ", " + FloatString(i.high) +
                   ", seed=" + std::to_string(i.seed) + ")";
          case ps::Initializer::Kind::kNormal:
            return "Initializer.normal(" + FloatString(i.stddev) +
                   ", seed=" + std::to_string(i.seed) + ")";
        }
        return std::string("Initializer(?)");
      });
}

// Optimizer's factories, one per kind: Optimizer.sgd(...), .momentum(...), ...
void AddOptimizerFactories(py::class_<ps::Optimizer>& cls) {
  cls.def_static(
         "sgd",
         [](float lr, std::optional<float> weight_decay) {
           ps::Optimizer o;
           o.kind = ps::Optimizer::Kind::kSgd;
           o.learning_rate = lr;
           o.weight_decay = weight_decay;
           return o;
         },
         py::arg("learning_rate"), py::arg("weight_decay") = py::none(),
         "Plain SGD: value -= learning_rate * grad.")
      .def_static(
          "momentum",
          [](float lr, float momentum, std::optional<float> weight_decay) {
            ps::Optimizer o;
            o.kind = ps::Optimizer::Kind::kMomentum;
            o.learning_rate = lr;
            o.momentum = momentum;
            o.weight_decay = weight_decay;
            return o;
          },
          py::arg("learning_rate"), py::arg("momentum") = 0.9f,
          py::arg("weight_decay") = py::none(), "SGD with momentum.")
      .def_static(
          "adagrad",
          [](float lr, std::optional<float> initial_accumulator, std::optional<float> epsilon) {
            ps::Optimizer o;
            o.kind = ps::Optimizer::Kind::kAdagrad;
            o.learning_rate = lr;
            o.initial_accumulator = initial_accumulator;
            o.epsilon = epsilon;
            return o;
          },
          py::arg("learning_rate"), py::arg("initial_accumulator") = py::none(),
          py::arg("epsilon") = py::none(), "Adagrad.")
      .def_static(
          "adam",
          [](float lr, std::optional<float> beta1, std::optional<float> beta2,
             std::optional<float> epsilon, std::optional<float> weight_decay) {
            ps::Optimizer o;
            o.kind = ps::Optimizer::Kind::kAdam;
            o.learning_rate = lr;
            o.beta1 = beta1;
            o.beta2 = beta2;
            o.epsilon = epsilon;
            o.weight_decay = weight_decay;
            return o;
          },
          py::arg("learning_rate") = 0.001f, py::arg("beta1") = py::none(),
          py::arg("beta2") = py::none(), py::arg("epsilon") = py::none(),
          py::arg("weight_decay") = py::none(), "Adam.")
      .def_static(
          "ftrl",
          [](float alpha, float l1, float l2, std::optional<float> beta) {
            ps::Optimizer o;
            o.kind = ps::Optimizer::Kind::kFtrl;
            o.learning_rate = alpha;
            o.l1 = l1;
            o.l2 = l2;
            o.ftrl_beta = beta;
            return o;
          },
          py::arg("alpha"), py::arg("l1") = 0.0f, py::arg("l2") = 0.0f,
          py::arg("beta") = py::none(), "FTRL-Proximal.");
}

void RegisterOptimizer(py::module_& m) {
  py::class_<ps::Optimizer> cls(m, "Optimizer", kOptimizerDoc);
  cls.def(py::init([](const std::string& kind, std::optional<float> learning_rate,
                      std::optional<float> momentum, std::optional<float> beta1,
                      std::optional<float> beta2, std::optional<float> epsilon,
                      std::optional<float> initial_accumulator, std::optional<float> l1,
                      std::optional<float> l2, std::optional<float> ftrl_beta,
                      std::optional<float> weight_decay) {
            ps::Optimizer o;
            o.kind = ParseOptimizerKind(kind);
            o.learning_rate = learning_rate;
            o.momentum = momentum;
            o.beta1 = beta1;
            o.beta2 = beta2;
            o.epsilon = epsilon;
            o.initial_accumulator = initial_accumulator;
            o.l1 = l1;
            o.l2 = l2;
            o.ftrl_beta = ftrl_beta;
            o.weight_decay = weight_decay;
            return o;
          }),
          py::arg("kind") = "sgd", py::arg("learning_rate") = py::none(),
          py::arg("momentum") = py::none(), py::arg("beta1") = py::none(),
          py::arg("beta2") = py::none(), py::arg("epsilon") = py::none(),
          py::arg("initial_accumulator") = py::none(), py::arg("l1") = py::none(),
          py::arg("l2") = py::none(), py::arg("ftrl_beta") = py::none(),
          py::arg("weight_decay") = py::none());
  AddOptimizerFactories(cls);
  cls.def_property_readonly(
         "kind", [](const ps::Optimizer& o) { return OptimizerKindName(o.kind); },
         "'sgd', 'momentum', 'adagrad', 'adam' or 'ftrl'.")
      .def_readonly("learning_rate", &ps::Optimizer::learning_rate,
                    "The learning rate (FTRL: alpha); None: the server's default.")
      .def_readonly("momentum", &ps::Optimizer::momentum)
      .def_readonly("beta1", &ps::Optimizer::beta1)
      .def_readonly("beta2", &ps::Optimizer::beta2)
      .def_readonly("epsilon", &ps::Optimizer::epsilon)
      .def_readonly("initial_accumulator", &ps::Optimizer::initial_accumulator)
      .def_readonly("l1", &ps::Optimizer::l1)
      .def_readonly("l2", &ps::Optimizer::l2)
      .def_readonly("ftrl_beta", &ps::Optimizer::ftrl_beta)
      .def_readonly("weight_decay", &ps::Optimizer::weight_decay)
      .def("__repr__", [](const ps::Optimizer& o) {
        std::string s = std::string("Optimizer('") + OptimizerKindName(o.kind) + "'";
        s += OptionalRepr("learning_rate", o.learning_rate);
        s += OptionalRepr("momentum", o.momentum);
        s += OptionalRepr("beta1", o.beta1);
        s += OptionalRepr("beta2", o.beta2);
        s += OptionalRepr("epsilon", o.epsilon);
        s += OptionalRepr("initial_accumulator", o.initial_accumulator);
        s += OptionalRepr("l1", o.l1);
        s += OptionalRepr("l2", o.l2);
        s += OptionalRepr("ftrl_beta", o.ftrl_beta);
        s += OptionalRepr("weight_decay", o.weight_decay);
        return s + ")";
      });
}

}  // namespace

void RegisterConfigs(py::module_& m) {
  RegisterInitializer(m);
  RegisterOptimizer(m);
}

}  // namespace paramserver_py
