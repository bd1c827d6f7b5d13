// A training program that keeps its model in parameter servers: logistic regression over
// hashed sparse features (a "wide" click model), its weights in a sparse table and its bias in
// a dense one, the optimizer (Adagrad) applied by the servers.
//
// The data are generated from a hidden "teacher" weight vector, so the program can say how
// close it came: it prints the loss and accuracy as it trains, and the teacher's accuracy on
// the same held-out examples. Each step overlaps the next batch's pull with this batch's
// gradient computation (PullAsync, then Wait), as a real input pipeline would.
//
//   train_logreg --servers=127.0.0.1:7100,127.0.0.1:7101 [--job=logreg] [--worker=0]
//                [--workers=1] [--steps=400] [--batch=256] [--consistency=async|sync|ssp]
//   train_logreg --session [--steps=400] [--batch=256]
// With --session it is a program job's program (deploy/jobs/train_logreg.textproto): the
// worker daemon that runs it names the job, the worker, the servers and the tables
// (ps::Session), the loop resumes where a restart or a recovery says, and its progress and
// result go to psctl status.
// Exits 0 when training went well (held-out accuracy within 0.05 of the teacher's), 1 if not,
// 2 on a usage or server error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ps/client.h"
#include "ps/session.h"

namespace {

constexpr int kFeaturesPerExample = 20;
constexpr uint64_t kVocabulary = 10000;

struct Example {
  uint64_t features[kFeaturesPerExample];
  float label;
};

// Deterministic data: feature ids drawn from a skewed distribution, labels from the teacher.
class Teacher {
 public:
  explicit Teacher(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> w(0.0f, 0.6f);
    weights_.resize(kVocabulary);
    for (float& v : weights_) v = w(rng);
  }
  // An example with its label drawn from the teacher's probability.
  Example Draw(std::mt19937_64& rng) const {
    Example e;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (uint64_t& f : e.features) {
      f = static_cast<uint64_t>(std::pow(u(rng), 2.0) * kVocabulary);  // skewed to small ids
    }
    e.label = u(rng) < 1.0 / (1.0 + std::exp(-Logit(e))) ? 1.0f : 0.0f;
    return e;
  }
  float Logit(const Example& e) const {
    float z = 0.3f;
    for (uint64_t f : e.features) z += weights_[f];
    return z;
  }

 private:
  std::vector<float> weights_;
};

struct Flags {
  std::vector<std::string> servers;
  std::string job = "logreg";
  uint32_t worker = 0;
  uint32_t workers = 1;
  int steps = 400;
  int batch = 256;
  ps::Consistency consistency = ps::Consistency::kAsync;
  bool session = false;  // a program job's program: ps::Session::FromEnv()
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      return a.compare(0, n, name) == 0 ? a.c_str() + n : nullptr;
    };
    if (a == "--session") {
      f->session = true;
    } else if (const char* v = value("--servers=")) {
      std::string list = v;
      for (size_t start = 0; start <= list.size();) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        if (comma > start) f->servers.push_back(list.substr(start, comma - start));
        start = comma + 1;
      }
    } else if (const char* v = value("--job=")) {
      f->job = v;
    } else if (const char* v = value("--worker=")) {
      f->worker = static_cast<uint32_t>(std::stoul(v));
    } else if (const char* v = value("--workers=")) {
      f->workers = static_cast<uint32_t>(std::stoul(v));
    } else if (const char* v = value("--steps=")) {
      f->steps = std::stoi(v);
    } else if (const char* v = value("--batch=")) {
      f->batch = std::stoi(v);
    } else if (const char* v = value("--consistency=")) {
      const std::string m = v;
      if (m == "sync") {
        f->consistency = ps::Consistency::kSync;
      } else if (m == "ssp") {
        f->consistency = ps::Consistency::kSsp;
      } else if (m != "async") {
        std::fprintf(stderr, "--consistency must be sync, ssp or async\n");
        return false;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return false;
    }
  }
  if ((f->servers.empty() && !f->session) || f->steps < 1 || f->batch < 1) {
    std::fprintf(stderr,
                 "usage: train_logreg --servers=host:port[,host:port...] [--job=NAME] "
                 "[--worker=N --workers=N] [--steps=N] [--batch=N] [--consistency=MODE]\n"
                 "       train_logreg --session [--steps=N] [--batch=N]   (a program job)\n");
    return false;
  }
  return true;
}

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "train_logreg: %s: %s\n", what, s.ToString().c_str());
  return 2;
}

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// The client to train with: a program job's (the session knows the job, this worker and the
// servers) or one connected to the servers named in the flags.
absl::StatusOr<ps::Client*> Connect(Flags& flags, std::unique_ptr<ps::Session>& session,
                                    std::unique_ptr<ps::Client>& own_client) {
  if (flags.session) {
    auto made = ps::Session::FromEnv();
    if (!made.ok()) return made.status();
    session = std::move(*made);
    flags.worker = session->worker_id();
    return &session->client();
  }
  ps::ClientOptions options;
  options.servers = flags.servers;
  options.job_id = flags.job;
  options.worker_id = flags.worker;
  options.num_workers = flags.workers;
  options.consistency = flags.consistency;
  options.staleness = 2;
  auto connected = ps::Client::Connect(options);
  if (!connected.ok()) return connected.status();
  own_client = std::move(*connected);
  return own_client.get();
}

struct Tables {
  ps::Table weights;  // sparse, one value per feature id
  ps::Table bias;     // dense, one row
};

// In a program job the job file declares the tables and CreateTable returns them.
absl::StatusOr<Tables> CreateTables(ps::Client& client) {
  ps::TableConfig weights_config;
  weights_config.name = "weights";
  weights_config.kind = ps::TableKind::kSparse;
  weights_config.dim = 1;
  weights_config.optimizer = ps::Optimizer::Adagrad(0.1f);
  ps::TableConfig bias_config = weights_config;
  bias_config.name = "bias";
  bias_config.kind = ps::TableKind::kDense;
  bias_config.num_rows = 1;
  auto weights = client.CreateTable(weights_config);
  if (!weights.ok()) return weights.status();
  auto bias = client.CreateTable(bias_config);
  if (!bias.ok()) return bias.status();
  return Tables{*weights, *bias};
}

// One batch's gradients from the weights `w` (per feature of each example) and bias `b`:
// the logistic loss's p - y for every feature of an example, and its sum for the bias. Adds
// the batch's loss to `loss_sum`.
void ComputeGradients(const std::vector<Example>& batch, const std::vector<float>& w, float b,
                      std::vector<float>& grads, float& bias_grad, double& loss_sum) {
  bias_grad = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    float z = b;
    for (int f = 0; f < kFeaturesPerExample; ++f) z += w[i * kFeaturesPerExample + f];
    const float p = Sigmoid(z);
    const float y = batch[i].label;
    loss_sum += -(y * std::log(p + 1e-7f) + (1 - y) * std::log(1 - p + 1e-7f));
    const float g = p - y;  // Adagrad scales each row's step by its own history
    for (int f = 0; f < kFeaturesPerExample; ++f) grads[i * kFeaturesPerExample + f] = g;
    bias_grad += g;
  }
}

struct Evaluation {
  double accuracy = 0;  // the model's, on the held-out examples
  double teacher = 0;   // the teacher's, on the same
};

// Held-out accuracy: pulls the rows the test set touches.
absl::StatusOr<Evaluation> Evaluate(ps::Client& client, const Tables& tables,
                                    const Teacher& teacher, const std::vector<Example>& test) {
  std::vector<uint64_t> keys(test.size() * kFeaturesPerExample);
  for (size_t i = 0; i < test.size(); ++i) {
    std::memcpy(&keys[i * kFeaturesPerExample], test[i].features, sizeof(test[i].features));
  }
  std::vector<float> w(keys.size());
  float b = 0;
  const std::vector<uint64_t> bias_key = {0};
  absl::Status pulled = client
                            .PullAsync({ps::PullOp{tables.weights, keys, absl::MakeSpan(w)},
                                        ps::PullOp{tables.bias, bias_key, absl::MakeSpan(&b, 1)}})
                            .Wait();
  if (!pulled.ok()) return pulled;
  int right = 0, teacher_right = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    float z = b;
    for (int f = 0; f < kFeaturesPerExample; ++f) z += w[i * kFeaturesPerExample + f];
    right += (z > 0) == (test[i].label > 0.5f);
    teacher_right += (teacher.Logit(test[i]) > 0) == (test[i].label > 0.5f);
  }
  return Evaluation{static_cast<double>(right) / test.size(),
                    static_cast<double>(teacher_right) / test.size()};
}

}  // namespace

// The training loop stays in main, in one piece (about 120 lines): it is the part of this example
// that a program of its own copies, so it reads from top to bottom.
int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  std::unique_ptr<ps::Session> session;  // a program job's, or null
  std::unique_ptr<ps::Client> own_client;
  auto connected = Connect(flags, session, own_client);
  if (!connected.ok()) return Fail(flags.session ? "session" : "connect", connected.status());
  ps::Client& client = **connected;
  auto tables = CreateTables(client);
  if (!tables.ok()) return Fail("create tables", tables.status());

  // Held-out examples first (the same for every worker), then this worker's own stream.
  const Teacher teacher(7);
  std::mt19937_64 test_rng(1), train_rng(1000 + flags.worker);
  std::vector<Example> test(4000);
  for (Example& e : test) e = teacher.Draw(test_rng);

  const int batch = flags.batch;
  const size_t n = static_cast<size_t>(batch) * kFeaturesPerExample;
  std::vector<Example> cur(batch), next(batch);
  std::vector<uint64_t> cur_keys(n), next_keys(n);
  std::vector<float> cur_w(n), next_w(n), grads(n);
  const std::vector<uint64_t> bias_key = {0};
  float cur_b = 0, next_b = 0, bias_grad = 0;
  auto fill = [&](std::vector<Example>& ex, std::vector<uint64_t>& keys) {
    for (int i = 0; i < batch; ++i) {
      ex[i] = teacher.Draw(train_rng);
      std::memcpy(&keys[static_cast<size_t>(i) * kFeaturesPerExample], ex[i].features,
                  sizeof(ex[i].features));
    }
  };
  auto pull = [&](std::vector<uint64_t>& keys, std::vector<float>& w, float* b) {
    return client.PullAsync({ps::PullOp{tables->weights, keys, absl::MakeSpan(w)},
                             ps::PullOp{tables->bias, bias_key, absl::MakeSpan(b, 1)}});
  };

  fill(cur, cur_keys);
  ps::Pending in_flight = pull(cur_keys, cur_w, &cur_b);
  double loss_sum = 0;
  int loss_count = 0;
  int64_t step = 0;
  if (session != nullptr) {
    auto first = session->Begin(flags.steps);  // 0, or where a restarted program resumes
    if (!first.ok()) return Fail("session", first.status());
    step = *first;
  }
  // A server died (a program job only): the step is cut short. Next() recovers and says which
  // step to run; the batch's rows are pulled again.
  auto interrupted = [&]() -> absl::Status {
    if (session->step_interrupted()) {
      auto next_step = session->Next();
      if (!next_step.ok()) return next_step.status();
      step = *next_step;
    }  // else the request was sent before a recovery that has happened since
    in_flight = pull(cur_keys, cur_w, &cur_b);
    return absl::OkStatus();
  };
  while (step < flags.steps) {
    if (absl::Status s = in_flight.Wait(); ps::IsStepInterrupted(s)) {
      if (absl::Status r = interrupted(); !r.ok()) return Fail("next step", r);
      continue;
    } else if (!s.ok()) {
      return Fail("pull", s);
    }
    // Start the next batch's pull now: it travels while this batch's gradients are computed.
    fill(next, next_keys);
    in_flight = pull(next_keys, next_w, &next_b);
    ComputeGradients(cur, cur_w, cur_b, grads, bias_grad, loss_sum);
    loss_count += batch;
    // Repeated feature ids in the batch: the library sums their gradients.
    absl::Status pushed = client.Push(tables->weights, cur_keys, grads);
    if (pushed.ok()) {
      pushed = client.Push(tables->bias, bias_key, absl::MakeConstSpan(&bias_grad, 1));
    }
    if (ps::IsStepInterrupted(pushed)) {
      if (absl::Status r = interrupted(); !r.ok()) return Fail("next step", r);
      continue;
    }
    if (!pushed.ok()) return Fail("push", pushed);
    const int64_t done = step + 1;
    if (done % 100 == 0 || done == flags.steps) {
      std::printf("step %lld/%d  loss %.4f\n", static_cast<long long>(done), flags.steps,
                  loss_sum / loss_count);
      std::fflush(stdout);
    }
    if (session != nullptr) {
      ps::StepReport report;
      report.loss = loss_sum / loss_count;
      report.samples = batch;
      if (absl::Status s = session->Report(report); !s.ok()) return Fail("report", s);
      // Advances the clock, recovers from a lost server, reports: the step to run next.
      auto next_step = session->Next();
      if (!next_step.ok()) return Fail("next step", next_step.status());
      step = *next_step;
    } else {
      if (absl::Status s = client.Clock(); !s.ok()) return Fail("clock", s);
      step = done;
    }
    if (done % 100 == 0) {
      loss_sum = 0;
      loss_count = 0;
    }
    std::swap(cur, next);
    std::swap(cur_keys, next_keys);
    std::swap(cur_w, next_w);
    std::swap(cur_b, next_b);
  }
  if (absl::Status s = in_flight.Wait(); !s.ok()) return Fail("pull", s);

  auto evaluation = Evaluate(client, *tables, teacher, test);
  if (!evaluation.ok()) return Fail("pull", evaluation.status());
  std::printf("held-out accuracy %.4f (the teacher's: %.4f)\n", evaluation->accuracy,
              evaluation->teacher);
  if (session != nullptr) {
    absl::Status s = session->ReportEvaluation(std::nullopt, evaluation->accuracy,
                                               {{"teacher_accuracy", evaluation->teacher}});
    if (!s.ok()) return Fail("report", s);
  }
  return evaluation->accuracy >= evaluation->teacher - 0.05 ? 0 : 1;
}
