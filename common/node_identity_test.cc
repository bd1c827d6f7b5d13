#include "common/node_identity.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(NodeIdentityTest, SecretsAreFreshHex) {
  const std::string a = NewSecret(), b = NewSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
}

TEST(NodeIdentityTest, HmacMatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(NodeIdentityTest, ReceiptsBindTheServerTheCheckpointAndTheFigures) {
  const std::string r = CheckpointReceipt("s1", "job-1", 3, 10, 400);
  EXPECT_EQ(r.size(), 64u);
  EXPECT_NE(r, CheckpointReceipt("s2", "job-1", 3, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-2", 3, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 4, 10, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 3, 11, 400));
  EXPECT_NE(r, CheckpointReceipt("s1", "job-1", 3, 10, 401));
  EXPECT_EQ(CheckpointReceipt("", "job-1", 3, 10, 400), "");  // no secret: no receipt
}

TEST(NodeIdentityTest, RestoreOrderSignaturesBindTheJobAndWhatTheOrderDoes) {
  v1::RestoreOrder order;
  order.set_shard_epoch(2);
  order.set_source_job_id("job-1");
  order.set_checkpoint_id(3);
  order.set_clock(40);
  order.set_rollback(true);
  order.set_slots(std::string(128, '\xff'));
  v1::CheckpointShard* shard = order.add_shards();
  shard->set_server_index(0);
  shard->set_node_id(5);
  shard->set_path("/ckpt/job-1/ckpt-3/shard-0");
  shard->set_slots(std::string(128, '\xff'));
  const std::string s = RestoreOrderSignature("cluster", "job-2", order);
  EXPECT_EQ(s.size(), 64u);
  EXPECT_NE(s, RestoreOrderSignature("another", "job-2", order));
  EXPECT_NE(s, RestoreOrderSignature("cluster", "job-1", order));
  EXPECT_EQ(RestoreOrderSignature("", "job-2", order), "");  // no cluster token: none
  // Every field that changes what a server does changes the signature.
  const std::vector<std::function<void(v1::RestoreOrder*)>> changes = {
      [](v1::RestoreOrder* o) { o->set_shard_epoch(3); },
      [](v1::RestoreOrder* o) { o->set_source_job_id("job-3"); },
      [](v1::RestoreOrder* o) { o->clear_source_job_id(); },
      [](v1::RestoreOrder* o) { o->set_checkpoint_id(4); },
      [](v1::RestoreOrder* o) { o->set_clock(41); },
      [](v1::RestoreOrder* o) { o->set_rollback(false); },
      [](v1::RestoreOrder* o) { o->set_slots(std::string(128, '\x0f')); },
      [](v1::RestoreOrder* o) { o->mutable_shards(0)->set_server_index(1); },
      [](v1::RestoreOrder* o) { o->mutable_shards(0)->set_node_id(6); },
      [](v1::RestoreOrder* o) { o->mutable_shards(0)->set_path("/ckpt/job-3/ckpt-3/shard-0"); },
      [](v1::RestoreOrder* o) { o->mutable_shards(0)->set_slots(std::string(128, '\x0f')); },
      [](v1::RestoreOrder* o) { *o->add_shards() = o->shards(0); },
      [](v1::RestoreOrder* o) { o->clear_shards(); },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    v1::RestoreOrder changed = order;
    changes[i](&changed);
    EXPECT_NE(RestoreOrderSignature("cluster", "job-2", changed), s) << "change " << i;
  }
  // What changes nothing a server does (and the signature itself) is left out.
  v1::RestoreOrder same = order;
  same.set_reason("server 2 dead");
  same.set_signature(s);
  same.mutable_shards(0)->set_address("10.0.0.1:7100");
  same.mutable_shards(0)->set_rows(7);
  same.mutable_shards(0)->set_bytes(700);
  same.mutable_shards(0)->set_receipt("r");
  EXPECT_EQ(RestoreOrderSignature("cluster", "job-2", same), s);
}

TEST(NodeIdentityTest, HostPortMustParse) {
  for (const char* good : {"10.0.0.1:7100", "[::1]:7100", "[fe80::1]:1", "host-a.example.com:65535",
                           "localhost:80", "a_b:9"}) {
    EXPECT_TRUE(ValidateHostPort("address", good).ok()) << good;
  }
  for (const char* bad :
       {"",           "not an address", "../../etc:99999", "host",    "host:",  ":80",    "host:0",
        "host:65536", "host:-1",        "host:+1",         "host:1x", "[::1]",  "[::1]:", "[]:80",
        "[::1]80",    "a/b:80",         ".x:80",           "-x:80",   "h\n:80", "[x]:80"}) {
    absl::Status s = ValidateHostPort("address", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("address"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace ps
