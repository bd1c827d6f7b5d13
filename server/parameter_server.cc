#include "server/parameter_server.h"

#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "common/security.h"

namespace ps {

absl::Status ParameterServerOptions::Validate() const {
  if (listen.empty()) return absl::InvalidArgumentError("--listen is empty");
  if (shard_map_file.empty() &&
      (num_servers < 1 || server_index < 0 || server_index >= num_servers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server_index ", server_index, " must be in 0..--num_servers-1 (", num_servers, ")"));
  }
  if (max_pull_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_pull_wait must be positive");
  }
  if (checkpoint_write_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--checkpoint_write_delay must not be negative");
  }
  if (prefetch_pin < absl::Seconds(1) || prefetch_pin > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefetch_pin ", absl::FormatDuration(prefetch_pin), " must be in [1s, 1h]"));
  }
  if (max_job_bytes == 0) return absl::InvalidArgumentError("--max_job_bytes must be positive");
  if (max_message_bytes < (1 << 20)) {
    return absl::InvalidArgumentError("--max_message_bytes must be at least 1 MiB");
  }
  return transport.Validate();
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Start(
    ParameterServerOptions options, prometheus::Registry* registry) {
  absl::Status valid = options.Validate();
  if (!valid.ok()) return valid;
  ShardMap map;
  if (!options.shard_map_file.empty()) {
    auto parsed = ShardMap::FromFile(options.shard_map_file);
    if (!parsed.ok()) return parsed.status();
    map = std::move(*parsed);
    if (options.server_index < 0 ||
        options.server_index >= static_cast<int>(map.servers().size())) {
      return absl::InvalidArgumentError(absl::StrCat("--server_index ", options.server_index,
                                                     " is not in the shard map's ",
                                                     map.servers().size(), " servers"));
    }
  } else {
    map = ShardMap::RoundRobin(std::vector<std::string>(options.num_servers));
  }
  TableStoreOptions store_options;
  store_options.owned_slots = map.SlotsOf(options.server_index);
  store_options.shard_epoch = map.epoch();
  store_options.nonfinite = options.nonfinite;
  store_options.max_pull_bytes = static_cast<uint64_t>(options.max_message_bytes);
  store_options.max_job_bytes = options.max_job_bytes;
  store_options.huge_pages = options.huge_pages;
  store_options.tier.dir = options.tier_dir;
  store_options.tier.min_free_bytes = options.tier_min_free_bytes;
  store_options.tier.block_cache_bytes = options.tier_block_cache_bytes;
  store_options.tier.write_buffer_bytes = options.tier_write_buffer_bytes;
  store_options.prefetch_pin = options.prefetch_pin;

  std::unique_ptr<ParameterServer> ps(new ParameterServer);
  if (registry != nullptr) {
    auto metrics = ServerMetrics::Create(*registry);
    if (!metrics.ok()) return metrics.status();
    ps->metrics_ = std::move(*metrics);
  }
  ps->store_ = std::make_unique<TableStore>(std::move(store_options), ps->metrics_.get());
  CheckpointerOptions checkpoints;
  checkpoints.write_delay = options.checkpoint_write_delay;
  auto roots = CheckpointRoots::Create(options.checkpoint_roots);
  if (!roots.ok()) return roots.status();
  checkpoints.roots = std::move(*roots);
  ps->service_ = std::make_unique<ParameterService>(ps->store_.get(), options.max_pull_wait,
                                                    ps->metrics_.get(), std::move(checkpoints));
  ps->service_->set_authorizer(options.authorizer);

  // Process-wide gRPC settings, read by every ServerBuilder built after them.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, ProcessSecurity()->ServerCredentials(), &ps->port_);
  builder.RegisterService(ps->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  ApplyTransportOptions(options.transport, &builder);
  if (options.num_threads > 0) {
    grpc::ResourceQuota quota("ps_server");
    quota.SetMaxThreads(options.num_threads);
    builder.SetResourceQuota(quota);
  }
  ps->server_ = builder.BuildAndStart();
  if (ps->server_ == nullptr || ps->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  if (grpc::HealthCheckServiceInterface* health = ps->server_->GetHealthCheckService()) {
    health->SetServingStatus(v1::ParameterServer::service_full_name(), true);
  }
  ps->StartTicker();
  return ps;
}

void ParameterServer::Drain() {
  if (server_ == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(false);  // every service name, "" included
  }
  LOG(INFO) << "parameter server on port " << port_ << " draining: health is NOT_SERVING";
}

ParameterServer::~ParameterServer() { Shutdown(); }

void ParameterServer::StartTicker() {
  ticker_ = std::thread([this] {
    absl::MutexLock l(&ticker_mu_);
    while (!stopping_) {
      ticker_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
      if (stopping_) break;
      ticker_mu_.Unlock();  // the sweep takes slot locks; Shutdown must not wait on it to ask
      store_->Tick(absl::Now());
      ticker_mu_.Lock();
    }
  });
}

void ParameterServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock l(&ticker_mu_);
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
  if (service_ != nullptr) service_->Shutdown();
  if (server_ != nullptr)
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));  // not truncated to seconds
}

void ParameterServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace ps
