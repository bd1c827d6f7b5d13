// The scheduler's durable state (nodes, jobs, job events, counters) in RocksDB.
#ifndef PS_SCHEDULER_STATE_STORE_H_
#define PS_SCHEDULER_STATE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/scheduler.pb.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace ps {

// Everything Load() finds in a state dir.
struct StoredState {
  std::vector<v1::NodeInfo> nodes;
  std::vector<v1::JobInfo> jobs;  // events are stored apart: see `events`
  // job id -> (sequence number, event), oldest first.
  std::map<std::string, std::vector<std::pair<uint64_t, v1::JobEvent>>> events;
  // job id -> its checkpoint catalog, by checkpoint id.
  std::map<std::string, std::map<uint64_t, v1::CheckpointInfo>> checkpoints;
  uint64_t next_node_id = 1;
  uint64_t next_job_id = 1;
};

// Keys: "node/<node id>", "job/<job id>" (JobInfo without events),
// "event/<job id>/<seq, 10 digits>" (JobEvent), "ckpt/<job id>/<checkpoint id, 10 digits>"
// (CheckpointInfo), "meta/next_node_id", "meta/next_job_id"
// (decimal). Values are serialized protos. Thread-safe (RocksDB is); the one place where
// rocksdb::Status becomes absl::Status.
class StateStore {
 public:
  // Changes written atomically by Write().
  class Batch {
   public:
    void PutNode(const v1::NodeInfo& node);
    void DeleteNode(uint64_t node_id);
    void PutJob(const v1::JobInfo& job);  // any events in `job` are not stored
    void PutEvent(const std::string& job_id, uint64_t seq, const v1::JobEvent& event);
    void DeleteEvent(const std::string& job_id, uint64_t seq);
    void PutCheckpoint(const v1::CheckpointInfo& checkpoint);
    void PutNextNodeId(uint64_t id);
    void PutNextJobId(uint64_t id);
    bool empty() const { return ops_.empty(); }

   private:
    friend class StateStore;
    // key -> value; nullopt deletes the key.
    std::vector<std::pair<std::string, std::optional<std::string>>> ops_;
  };

  // Opens (or creates) the RocksDB database in `dir`. A corrupt or unreadable dir is an error.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& dir);
  ~StateStore();

  // Reads everything; a value that does not parse is DATA_LOSS naming its key.
  absl::StatusOr<StoredState> Load() const;
  // `sync`: fsync the write-ahead log before returning (for changes that must survive a crash
  // of the machine, not only of the process).
  absl::Status Write(const Batch& batch, bool sync);

  const std::string& dir() const { return dir_; }

 private:
  StateStore(std::string dir, std::unique_ptr<rocksdb::DB> db);

  const std::string dir_;
  const std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_STATE_STORE_H_
