#include "scheduler/state_store.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace ps {
namespace {

constexpr absl::string_view kNodePrefix = "node/";
constexpr absl::string_view kJobPrefix = "job/";
constexpr absl::string_view kEventPrefix = "event/";
constexpr absl::string_view kCheckpointPrefix = "ckpt/";
constexpr absl::string_view kNextNodeIdKey = "meta/next_node_id";
constexpr absl::string_view kNextJobIdKey = "meta/next_job_id";

// The one conversion of rocksdb::Status.
absl::Status FromRocksDb(const rocksdb::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(context, ": ", s.ToString());
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(message);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(message);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(message);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(message);
    case rocksdb::Status::kIOError:
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kTryAgain:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

std::string EventKey(const std::string& job_id, uint64_t seq) {
  return absl::StrFormat("%s%s/%010d", kEventPrefix, job_id, seq);
}

absl::Status Unparsable(absl::string_view dir, absl::string_view key) {
  return absl::DataLossError(
      absl::StrCat("state dir ", dir, ": cannot parse the value of key '", key, "'"));
}

}  // namespace

void StateStore::Batch::PutNode(const v1::NodeInfo& node) {
  ops_.emplace_back(absl::StrCat(kNodePrefix, node.node_id()), node.SerializeAsString());
}

void StateStore::Batch::DeleteNode(uint64_t node_id) {
  ops_.emplace_back(absl::StrCat(kNodePrefix, node_id), std::nullopt);
}

void StateStore::Batch::PutJob(const v1::JobInfo& job) {
  v1::JobInfo copy = job;
  copy.clear_events();
  ops_.emplace_back(absl::StrCat(kJobPrefix, job.job_id()), copy.SerializeAsString());
}

void StateStore::Batch::PutEvent(const std::string& job_id, uint64_t seq,
                                 const v1::JobEvent& event) {
  ops_.emplace_back(EventKey(job_id, seq), event.SerializeAsString());
}

void StateStore::Batch::DeleteEvent(const std::string& job_id, uint64_t seq) {
  ops_.emplace_back(EventKey(job_id, seq), std::nullopt);
}

void StateStore::Batch::PutCheckpoint(const v1::CheckpointInfo& checkpoint) {
  ops_.emplace_back(absl::StrFormat("%s%s/%010d", kCheckpointPrefix, checkpoint.job_id(),
                                    checkpoint.checkpoint_id()),
                    checkpoint.SerializeAsString());
}

void StateStore::Batch::PutNextNodeId(uint64_t id) {
  ops_.emplace_back(std::string(kNextNodeIdKey), absl::StrCat(id));
}

void StateStore::Batch::PutNextJobId(uint64_t id) {
  ops_.emplace_back(std::string(kNextJobIdKey), absl::StrCat(id));
}

StateStore::StateStore(std::string dir, std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)), db_(std::move(db)) {}

StateStore::~StateStore() = default;

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.keep_log_file_num = 3;
  rocksdb::DB* raw = nullptr;
  absl::Status s = FromRocksDb(rocksdb::DB::Open(options, dir, &raw),
                               absl::StrCat("cannot open state dir ", dir));
  if (!s.ok()) return s;
  return std::unique_ptr<StateStore>(new StateStore(dir, std::unique_ptr<rocksdb::DB>(raw)));
}

absl::StatusOr<StoredState> StateStore::Load() const {
  StoredState state;
  rocksdb::ReadOptions read_options;
  read_options.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const absl::string_view key(it->key().data(), it->key().size());
    const rocksdb::Slice value = it->value();
    if (absl::StartsWith(key, kNodePrefix)) {
      v1::NodeInfo node;
      if (!node.ParseFromArray(value.data(), value.size())) return Unparsable(dir_, key);
      state.nodes.push_back(std::move(node));
    } else if (absl::StartsWith(key, kJobPrefix)) {
      v1::JobInfo job;
      if (!job.ParseFromArray(value.data(), value.size())) return Unparsable(dir_, key);
      state.jobs.push_back(std::move(job));
    } else if (absl::StartsWith(key, kEventPrefix)) {
      const absl::string_view rest = key.substr(kEventPrefix.size());
      const size_t slash = rest.rfind('/');
      uint64_t seq = 0;
      v1::JobEvent event;
      if (slash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(slash + 1), &seq) ||
          !event.ParseFromArray(value.data(), value.size())) {
        return Unparsable(dir_, key);
      }
      state.events[std::string(rest.substr(0, slash))].emplace_back(seq, std::move(event));
    } else if (absl::StartsWith(key, kCheckpointPrefix)) {
      v1::CheckpointInfo checkpoint;
      if (!checkpoint.ParseFromArray(value.data(), value.size())) return Unparsable(dir_, key);
      state.checkpoints[checkpoint.job_id()][checkpoint.checkpoint_id()] = std::move(checkpoint);
    } else if (key == kNextNodeIdKey || key == kNextJobIdKey) {
      uint64_t id = 0;
      if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &id)) {
        return Unparsable(dir_, key);
      }
      (key == kNextNodeIdKey ? state.next_node_id : state.next_job_id) = id;
    } else {
      return absl::DataLossError(absl::StrCat("state dir ", dir_, ": unexpected key '", key, "'"));
    }
  }
  absl::Status s = FromRocksDb(it->status(), absl::StrCat("cannot read state dir ", dir_));
  if (!s.ok()) return s;
  return state;
}

absl::Status StateStore::Write(const Batch& batch, bool sync) {
  if (batch.empty()) return absl::OkStatus();
  rocksdb::WriteBatch wb;
  for (const auto& [key, value] : batch.ops_) {
    if (value.has_value()) {
      wb.Put(key, *value);
    } else {
      wb.Delete(key);
    }
  }
  rocksdb::WriteOptions options;
  options.sync = sync;
  return FromRocksDb(db_->Write(options, &wb), absl::StrCat("cannot write state dir ", dir_));
}

}  // namespace ps
