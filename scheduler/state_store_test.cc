#include "scheduler/state_store.h"

#include <rocksdb/db.h>

#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "scheduler/internal/test_util.h"
#include "scheduler/scheduler.h"

namespace ps {
namespace {

TEST(StateStoreTest, WritesAndLoadsEverything) {
  ScopedTempDir dir;
  {
    auto store = StateStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    StateStore::Batch batch;
    v1::NodeInfo node;
    node.set_node_id(7);
    node.set_role(v1::WORKER);
    batch.PutNode(node);
    node.set_node_id(9);
    batch.PutNode(node);
    batch.DeleteNode(9);  // a dead node forgotten (Scheduler: --max_nodes)
    v1::JobInfo job;
    job.set_job_id("job-3");
    job.add_events()->set_message("not stored with the job");
    batch.PutJob(job);
    for (uint64_t seq : {1, 2, 3}) {
      v1::JobEvent event;
      event.set_message(absl::StrCat("event ", seq));
      batch.PutEvent("job-3", seq, event);
    }
    batch.DeleteEvent("job-3", 1);
    batch.PutNextNodeId(8);
    batch.PutNextJobId(4);
    ASSERT_TRUE((*store)->Write(batch, /*sync=*/true).ok());
  }
  auto store = StateStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->nodes.size(), 1u);
  EXPECT_EQ(state->nodes[0].node_id(), 7u);
  ASSERT_EQ(state->jobs.size(), 1u);
  EXPECT_EQ(state->jobs[0].job_id(), "job-3");
  EXPECT_TRUE(state->jobs[0].events().empty());
  ASSERT_EQ(state->events["job-3"].size(), 2u);
  EXPECT_EQ(state->events["job-3"][0].first, 2u);
  EXPECT_EQ(state->events["job-3"][1].second.message(), "event 3");
  EXPECT_EQ(state->next_node_id, 8u);
  EXPECT_EQ(state->next_job_id, 4u);
}

TEST(StateStoreTest, EmptyDirLoadsNothing) {
  ScopedTempDir dir;
  auto store = StateStore::Open(dir.path() + "/new");
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->nodes.empty());
  EXPECT_EQ(state->next_node_id, 1u);
  EXPECT_EQ(state->next_job_id, 1u);
}

SchedulerOptions OptionsFor(const std::string& state_dir) {
  SchedulerOptions options;
  options.state_dir = state_dir;
  return options;
}

TEST(StateStoreTest, CorruptDatabaseIsAStartupError) {
  ScopedTempDir dir;
  {
    auto scheduler = Scheduler::Open(OptionsFor(dir.path()));
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  }
  std::ofstream(dir.path() + "/CURRENT", std::ios::trunc) << "garbage\n";
  auto scheduler = Scheduler::Open(OptionsFor(dir.path()));
  ASSERT_FALSE(scheduler.ok());
  EXPECT_NE(scheduler.status().message().find(dir.path()), std::string::npos) << scheduler.status();
}

TEST(StateStoreTest, StateDirThatIsAFileIsAStartupError) {
  ScopedTempDir dir;
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "not a folder\n";
  auto scheduler = Scheduler::Open(OptionsFor(file));
  ASSERT_FALSE(scheduler.ok());
  EXPECT_NE(scheduler.status().message().find(file), std::string::npos) << scheduler.status();
}

TEST(StateStoreTest, UnparsableValueIsDataLossNamingTheKey) {
  ScopedTempDir dir;
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    // Field 1 as a length-delimited value of 255 bytes, cut short: no NodeInfo.
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "node/1",
                        std::string("\x0a\xff\x01"
                                    "abc"))
                    .ok());
  }
  auto scheduler = Scheduler::Open(OptionsFor(dir.path()));
  ASSERT_FALSE(scheduler.ok());
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(scheduler.status().message().find("'node/1'"), std::string::npos) << scheduler.status();
}

TEST(StateStoreTest, OptionsNeedAStateDir) {
  auto scheduler = Scheduler::Open(SchedulerOptions());
  ASSERT_FALSE(scheduler.ok());
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(scheduler.status().message().find("--state_dir"), std::string::npos);
}

}  // namespace
}  // namespace ps
