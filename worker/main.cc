// ps_worker: trains a model on its shard of the data through the parameter servers.
#include <glog/logging.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/flags_usage.h"
#include "worker/client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::vector<std::string>, servers, {},
          "parameter servers host:port, comma-separated, in shard-map order (slot s lives on "
          "server s % n)");
ABSL_FLAG(std::string, shard_map, "", "static shard map file instead of --servers");
ABSL_FLAG(std::string, job_id, "fashion", "job name; tables and clocks are per job");
ABSL_FLAG(int, worker_id, 0,
          "this worker's index, 0..num_workers-1; it reads data shard worker_id");
ABSL_FLAG(int, num_workers, 1, "workers in the job");
ABSL_FLAG(std::string, model, "784,128,10",
          "MLP layer sizes, comma-separated: inputs,hidden...,classes ('784,10' is softmax "
          "regression)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Fashion-MNIST directory (Debian package dataset-fashion-mnist)");
ABSL_FLAG(int, epochs, 5, "passes over the data");
ABSL_FLAG(int, batch_size, 64, "examples per step on this worker");
ABSL_FLAG(std::string, consistency, "sync", "sync | ssp | async");
ABSL_FLAG(int, staleness, 2, "ssp: how many clocks a worker may run ahead of the slowest");
ABSL_FLAG(std::string, optimizer, "adam", "server-side optimizer: sgd|momentum|adagrad|adam|ftrl");
ABSL_FLAG(double, learning_rate, 0.001, "the optimizer's learning rate");
ABSL_FLAG(uint64_t, seed, 1, "seed of the initial weights and of the data order");
ABSL_FLAG(bool, evaluate, false, "evaluate on the test set after every epoch");
ABSL_FLAG(int, log_every_steps, 100, "print a progress line every this many steps (0: never)");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(180), "deadline of one request");

namespace {

int Fail(const std::string& message) {
  std::cerr << "ps_worker: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ps::SetUsage(
      "Worker: trains an MLP on Fashion-MNIST through the parameter servers.\n"
      "Example: ps_worker --servers=127.0.0.1:7100,127.0.0.1:7101 --worker_id=0 "
      "--num_workers=2 --evaluate",
      __FILE__);
  absl::ParseCommandLine(argc, argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  ps::ClientOptions copts;
  copts.servers = absl::GetFlag(FLAGS_servers);
  copts.shard_map_file = absl::GetFlag(FLAGS_shard_map);
  copts.job_id = absl::GetFlag(FLAGS_job_id);
  copts.worker_id = static_cast<uint32_t>(absl::GetFlag(FLAGS_worker_id));
  copts.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  if (absl::GetFlag(FLAGS_worker_id) < 0) return Fail("--worker_id must be >= 0");

  ps::TrainerOptions topts;
  topts.data_dir = absl::GetFlag(FLAGS_data_dir);
  topts.layers.clear();
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_model), ',')) {
    int units = 0;
    if (!absl::SimpleAtoi(part, &units)) {
      return Fail(absl::StrCat("--model: '", part, "' is not a layer size"));
    }
    topts.layers.push_back(units);
  }
  topts.epochs = absl::GetFlag(FLAGS_epochs);
  topts.batch_size = absl::GetFlag(FLAGS_batch_size);
  topts.worker_id = copts.worker_id;
  topts.num_workers = absl::GetFlag(FLAGS_num_workers);
  topts.seed = absl::GetFlag(FLAGS_seed);
  topts.evaluate = absl::GetFlag(FLAGS_evaluate);
  topts.log_every_steps = absl::GetFlag(FLAGS_log_every_steps);

  const std::string mode = absl::GetFlag(FLAGS_consistency);
  if (mode == "sync") {
    topts.consistency.set_mode(ps::v1::ConsistencySpec::SYNC);
  } else if (mode == "ssp") {
    topts.consistency.set_mode(ps::v1::ConsistencySpec::SSP);
    topts.consistency.set_staleness(absl::GetFlag(FLAGS_staleness));
  } else if (mode == "async") {
    topts.consistency.set_mode(ps::v1::ConsistencySpec::ASYNC);
  } else {
    return Fail(absl::StrCat("--consistency must be sync, ssp or async, not '", mode, "'"));
  }
  ps::v1::OptimizerSpec::Kind kind;
  if (!ps::v1::OptimizerSpec::Kind_Parse(absl::AsciiStrToUpper(absl::GetFlag(FLAGS_optimizer)),
                                         &kind)) {
    return Fail(absl::StrCat("--optimizer '", absl::GetFlag(FLAGS_optimizer),
                             "' is unknown; want sgd, momentum, adagrad, adam or ftrl"));
  }
  topts.optimizer.set_kind(kind);
  topts.optimizer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_learning_rate)));
  if (absl::Status s = topts.Validate(); !s.ok()) return Fail(std::string(s.message()));

  auto client = ps::Client::Connect(copts);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  const std::string who = absl::StrCat("worker ", copts.worker_id, "/", topts.num_workers);
  ps::Trainer trainer(topts, client->get());
  auto on_progress = [&](int epoch, int64_t step, int64_t steps, double loss) {
    std::cout << absl::StrFormat("%s epoch %d step %d/%d loss %.4f\n", who, epoch, step, steps,
                                 loss)
              << std::flush;
  };
  auto on_epoch = [&](const ps::EpochReport& r) {
    std::string line = absl::StrFormat(
        "%s epoch %d/%d done: train loss %.4f acc %.2f%%, %.0f samples/s, %.1f s", who, r.epoch,
        topts.epochs, r.train_loss, 100 * r.train_accuracy, r.samples_per_second, r.seconds);
    if (r.test_accuracy >= 0) {
      absl::StrAppendFormat(&line, "; test loss %.4f acc %.2f%%", r.test_loss,
                            100 * r.test_accuracy);
    }
    std::cout << line << "\n" << std::flush;
  };
  auto result = trainer.Run(on_epoch, on_progress);
  if (!result.ok()) {
    std::cerr << "ps_worker: " << who << " failed: " << result.status() << "\n";
    return 1;
  }
  if (result->test_accuracy >= 0) {
    std::cout << absl::StrFormat("%s final test accuracy %.2f%%\n", who,
                                 100 * result->test_accuracy);
  }
  return 0;
}
