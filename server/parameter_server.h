// A parameter server: a TableStore served over gRPC on one port.
#ifndef PS_SERVER_PARAMETER_SERVER_H_
#define PS_SERVER_PARAMETER_SERVER_H_

#include <grpcpp/server.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shard_map.h"
#include "common/transport_options.h"
#include "server/parameter_service.h"
#include "server/server_metrics.h"
#include "server/table_store.h"

namespace ps {

struct ParameterServerOptions {
  // host:port to listen on; port 0 picks a free port (see ParameterServer::port()).
  std::string listen = "0.0.0.0:7100";
  // This server's index in the shard map, and the map itself (round robin over
  // `num_servers` when no map file is given).
  int server_index = 0;
  int num_servers = 1;
  std::string shard_map_file;
  NonFinitePolicy nonfinite = NonFinitePolicy::kReject;
  // Longest a pull waits on slow workers before DEADLINE_EXCEEDED.
  absl::Duration max_pull_wait = absl::Seconds(120);
  // Largest gRPC message accepted, bytes (clients send large tensors in parts below this).
  int max_message_bytes = 256 << 20;
  // Most row bytes (values + optimizer state) one job's tables may hold on this server (dense
  // tables: this server's share, counted at CreateTable; sparse rows: as pulls and pushes of
  // new keys create them). Beyond it: RESOURCE_EXHAUSTED naming the job, table and cap.
  uint64_t max_job_bytes = uint64_t{16} << 30;
  // Rows in 2 MiB chunks marked for transparent huge pages (TableStoreOptions::huge_pages).
  bool huge_pages = false;
  // Most gRPC sync-server threads, which serve the calls other than Pull, Push and PushPull (0:
  // gRPC's default). Those three run on gRPC's callback threads and the service's hand-off pool.
  int num_threads = 0;
  // HTTP/2 and TCP settings of the listening port's connections (docs/operations.md,
  // "Transport settings"); clients set theirs in RpcClientOptions::transport.
  TransportOptions transport;
  // Fault-injection test hook: each checkpoint write starts this long after its snapshot, so
  // that tests can kill a server mid-checkpoint. 0 (the default) in production.
  absl::Duration checkpoint_write_delay = absl::ZeroDuration();
  // Absolute directories under which this server writes checkpoints and reads them back
  // (Checkpoint paths and restore orders' shard paths must lie under one of them, symlinks
  // resolved). Empty (the default): every checkpoint and every restore from one is refused.
  std::vector<std::string> checkpoint_roots;
  // The disk tier's directory (TableStoreOptions::tier; --tier_roots). Empty: none.
  std::string tier_dir;
  // Bytes the disk tier leaves free on its filesystem (DiskTier::Options::min_free_bytes;
  // --tier_min_free_mb).
  uint64_t tier_min_free_bytes = uint64_t{1} << 30;
  // The disk tier's fixed memory: its block cache and each of its two write buffers
  // (DiskTier::Options; --tier_block_cache_mb, --tier_write_buffer_mb).
  uint64_t tier_block_cache_bytes = uint64_t{32} << 20;
  uint64_t tier_write_buffer_bytes = uint64_t{8} << 20;
  // How long a prefetched row (PullRequest.prefetch) stays pinned in RAM at most when no pull
  // reads it (TableStoreOptions::prefetch_pin; --prefetch_pin). At least 1 s, at most 1 h.
  absl::Duration prefetch_pin = absl::Seconds(30);
  // The tokens every call must carry (null: none).
  std::shared_ptr<const Authorizer> authorizer;

  absl::Status Validate() const;
};

// Owns the store, the service and the gRPC server (with grpc.health.v1 and server reflection).
// Thread-safe after Start().
class ParameterServer {
 public:
  // Registers the ps_server_* metrics in `registry` (may be null: no metrics; else it must
  // outlive the server).
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Start(
      ParameterServerOptions options, prometheus::Registry* registry = nullptr);
  ~ParameterServer();

  int port() const { return port_; }
  TableStore* store() { return store_.get(); }
  ParameterService* service() { return service_.get(); }
  // Health checks ("" and "ps.v1.ParameterServer") answer NOT_SERVING from now on, so load
  // balancers and probes stop sending work; requests are still served until Shutdown().
  void Drain();
  // Wakes pulls waiting on slow workers (they answer UNAVAILABLE) and stops checkpoint writes
  // (a running one between slots; its partial output is removed), then stops accepting
  // requests, gives those in flight `grace` to finish and cancels the rest. Returns once every
  // handler returned: nothing a request waits on outlives `grace` by much. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));
  void Wait();

 private:
  ParameterServer() = default;
  // Starts the thread that moves the store's clock once a second (TableStore::Tick: row expiry,
  // admission decay) until Shutdown.
  void StartTicker();
  std::unique_ptr<ServerMetrics> metrics_;  // null without a registry
  std::unique_ptr<TableStore> store_;
  std::unique_ptr<ParameterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex ticker_mu_;
  bool stopping_ ABSL_GUARDED_BY(ticker_mu_) = false;
  std::thread ticker_;
};

}  // namespace ps

#endif  // PS_SERVER_PARAMETER_SERVER_H_
