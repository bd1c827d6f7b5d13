// Membership: the node table without a scheduler, clock, lock or store; time is an argument.
#include "scheduler/membership.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::membership_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

SchedulerOptions Options() {
  SchedulerOptions options;
  options.heartbeat_interval = absl::Seconds(1);
  options.heartbeat_timeout = absl::Seconds(5);
  options.max_nodes = 100;
  options.max_registrations_per_minute = 100;
  options.forget_dead_nodes_after = absl::Hours(1);
  return options;
}

v1::RegisterRequest Request(v1::NodeRole role, const std::string& address = "",
                            const std::string& secret = "") {
  v1::RegisterRequest req;
  req.set_role(role);
  req.set_address(role == v1::SERVER && address.empty() ? "10.0.0.1:7100" : address);
  req.set_hostname("host");
  req.set_node_secret(secret);
  return req;
}

class MembershipTest : public ::testing::Test {
 protected:
  uint64_t Register(v1::NodeRole role, absl::Time now, const std::string& address = "") {
    auto registration = membership_->Register(Request(role, address), now, in_use_);
    EXPECT_TRUE(registration.ok()) << registration.status();
    return registration.ok() ? registration->node_id : 0;
  }
  void Reset(const SchedulerOptions& options) { membership_.emplace(options); }
  v1::NodeState State(uint64_t id) { return membership_->Get(id).state(); }

  std::optional<Membership> membership_{Options()};
  std::set<uint64_t> in_use_;
};

TEST_F(MembershipTest, RegistrationGivesANewIdAndSecret) {
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::SERVER, kT0 + absl::Seconds(1), "10.0.0.2:7100");
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(membership_->next_node_id(), 3u);
  const v1::NodeInfo& server = membership_->Get(b);
  EXPECT_EQ(server.node_id(), b);
  EXPECT_EQ(server.role(), v1::SERVER);
  EXPECT_EQ(server.state(), v1::ALIVE);
  EXPECT_EQ(server.address(), "10.0.0.2:7100");
  EXPECT_EQ(server.registered_unix_ms(), absl::ToUnixMillis(kT0 + absl::Seconds(1)));
  EXPECT_EQ(server.last_heartbeat_unix_ms(), server.registered_unix_ms());
  EXPECT_EQ(server.node_secret().size(), 64u);
  EXPECT_NE(server.node_secret(), membership_->Get(a).node_secret());
  EXPECT_EQ(membership_->Find(99), nullptr);
  EXPECT_EQ(membership_->Get(99).node_id(), 0u);
}

TEST_F(MembershipTest, IdsAreNeverReused) {
  const uint64_t a = Register(v1::WORKER, kT0);
  membership_->MarkDead(a);
  EXPECT_THAT(membership_->ForgetDeadNodes(kT0 + absl::Hours(2), in_use_), ElementsAre(a));
  EXPECT_EQ(membership_->Find(a), nullptr);
  EXPECT_EQ(Register(v1::WORKER, kT0 + absl::Hours(2)), a + 1);
}

TEST_F(MembershipTest, RegistrationsPerMinuteAreCapped) {
  SchedulerOptions options = Options();
  options.max_registrations_per_minute = 2;
  Reset(options);
  Register(v1::SERVER, kT0, "10.0.0.1:7100");
  // Refused for its address, it still counts.
  auto refused = membership_->Register(Request(v1::SERVER, "10.0.0.1:7100"), kT0, in_use_);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  auto capped = membership_->Register(Request(v1::WORKER), kT0 + absl::Seconds(59), in_use_);
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(capped.status().message()),
              HasSubstr("--max_registrations_per_minute=2"));
  EXPECT_NE(Register(v1::WORKER, kT0 + absl::Seconds(60)), 0u);
}

TEST_F(MembershipTest, AServerTakesTheAddressOfASilentOneOrItsOwn) {
  const uint64_t old = Register(v1::SERVER, kT0, "10.0.0.1:7100");
  const std::string secret = membership_->Get(old).node_secret();
  // Heard from, and the caller does not show its secret: refused.
  auto refused = membership_->ServersToReplace(Request(v1::SERVER, "10.0.0.1:7100", "wrong"),
                                               kT0 + absl::Seconds(5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("belongs to server node 1"));
  // Its own secret, or silent past the timeout: replaced.
  auto same = membership_->ServersToReplace(Request(v1::SERVER, "10.0.0.1:7100", secret), kT0);
  ASSERT_TRUE(same.ok());
  EXPECT_THAT(*same, ElementsAre(old));
  auto silent =
      membership_->ServersToReplace(Request(v1::SERVER, "10.0.0.1:7100"), kT0 + absl::Seconds(6));
  ASSERT_TRUE(silent.ok());
  EXPECT_THAT(*silent, ElementsAre(old));
  // Another address, a worker, a dead server: nothing to replace.
  EXPECT_THAT(*membership_->ServersToReplace(Request(v1::SERVER, "10.0.0.2:7100"), kT0), IsEmpty());
  EXPECT_THAT(*membership_->ServersToReplace(Request(v1::WORKER, "10.0.0.1:7100"), kT0), IsEmpty());
  auto registration =
      membership_->Register(Request(v1::SERVER, "10.0.0.1:7100"), kT0 + absl::Seconds(6), in_use_);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_THAT(registration->replaced, ElementsAre(old));
  EXPECT_EQ(State(old), v1::ALIVE);  // the caller declares it dead (and handles its jobs)
}

TEST_F(MembershipTest, RoomIsMadeByForgettingTheOldestDeadNodesNoJobUses) {
  SchedulerOptions options = Options();
  options.max_nodes = 3;
  Reset(options);
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::WORKER, kT0);
  const uint64_t s = Register(v1::SERVER, kT0, "10.0.0.1:7100");
  auto full = membership_->Register(Request(v1::WORKER), kT0, in_use_);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.status().message()), HasSubstr("holds 3 nodes (3 alive)"));
  membership_->MarkDead(a);
  membership_->MarkDead(b);
  in_use_ = {a};  // a job still names it
  auto registration = membership_->Register(Request(v1::WORKER), kT0, in_use_);
  ASSERT_TRUE(registration.ok()) << registration.status();
  EXPECT_THAT(registration->forgotten, ElementsAre(b));
  EXPECT_EQ(membership_->nodes().size(), 3u);
  EXPECT_NE(membership_->Find(a), nullptr);
  // Only `a` is dead, and in use: no room...
  EXPECT_EQ(membership_->Register(Request(v1::WORKER), kT0, in_use_).status().code(),
            absl::StatusCode::kResourceExhausted);
  // ... but a server replacing an alive one at its address is let in beyond the cap.
  auto replacing =
      membership_->Register(Request(v1::SERVER, "10.0.0.1:7100"), kT0 + absl::Seconds(6), in_use_);
  ASSERT_TRUE(replacing.ok()) << replacing.status();
  EXPECT_THAT(replacing->replaced, ElementsAre(s));
  EXPECT_THAT(replacing->forgotten, IsEmpty());
  EXPECT_EQ(membership_->nodes().size(), 4u);
}

TEST_F(MembershipTest, SilentNodesAreDeclaredDead) {
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::SERVER, kT0 + absl::Seconds(3));
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(5)), IsEmpty());
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(6)), ElementsAre(a));
  EXPECT_EQ(State(a), v1::DEAD);
  EXPECT_EQ(State(b), v1::ALIVE);
  // Heard: a fresh timeout.
  const Membership::Heard heard = membership_->RecordHeartbeat(b, kT0 + absl::Seconds(7));
  EXPECT_EQ(heard.lag, absl::Seconds(4));
  EXPECT_THAT(heard.refreshed, ElementsAre(b));
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(12)), IsEmpty());
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(13)), ElementsAre(b));
  // Dead is final.
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Hours(1)), IsEmpty());
}

TEST_F(MembershipTest, ASchedulerCutOffFromEveryNodeDeclaresNobodyDead) {
  SchedulerOptions options = Options();
  options.suspect_own_partition = true;
  Reset(options);
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::SERVER, kT0 + absl::Milliseconds(500));
  // a times out, but nobody was heard for over 2 heartbeat intervals: the scheduler is cut off.
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(6)), IsEmpty());
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(60)), IsEmpty());
  EXPECT_EQ(State(a), v1::ALIVE);
  // The first heartbeat gives every live node a fresh grace period.
  const Membership::Heard heard = membership_->RecordHeartbeat(b, kT0 + absl::Seconds(61));
  EXPECT_THAT(std::set<uint64_t>(heard.refreshed.begin(), heard.refreshed.end()),
              UnorderedElementsAre(a, b));
  EXPECT_EQ(heard.lag, absl::ZeroDuration());
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(65)), IsEmpty());
  // b keeps heartbeating, a does not: a is dead once its timeout passes.
  membership_->RecordHeartbeat(b, kT0 + absl::Seconds(66));
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(67)), ElementsAre(a));
}

TEST_F(MembershipTest, WithoutSuspicionEverySilentNodeIsDead) {
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::SERVER, kT0);
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(60)), ElementsAre(a, b));
}

TEST_F(MembershipTest, DeadNodesAreForgottenInTimeUnlessInUse) {
  const uint64_t a = Register(v1::WORKER, kT0);
  const uint64_t b = Register(v1::WORKER, kT0);
  const uint64_t alive = Register(v1::WORKER, kT0 + absl::Hours(3));
  membership_->MarkDead(a);
  membership_->MarkDead(b);
  EXPECT_THAT(membership_->ForgetDeadNodes(kT0 + absl::Minutes(59), in_use_), IsEmpty());
  in_use_ = {b};
  EXPECT_THAT(membership_->ForgetDeadNodes(kT0 + absl::Hours(2), in_use_), ElementsAre(a));
  EXPECT_NE(membership_->Find(b), nullptr);
  EXPECT_NE(membership_->Find(alive), nullptr);

  SchedulerOptions options = Options();
  options.forget_dead_nodes_after = absl::ZeroDuration();  // never
  Reset(options);
  const uint64_t c = Register(v1::WORKER, kT0);
  membership_->MarkDead(c);
  EXPECT_THAT(membership_->ForgetDeadNodes(kT0 + absl::Hours(1000), {}), IsEmpty());
}

TEST_F(MembershipTest, SecretsSpeakForANode) {
  const uint64_t a = Register(v1::WORKER, kT0);
  const std::string secret = membership_->Get(a).node_secret();
  EXPECT_TRUE(membership_->CheckHeartbeatSecret(a, secret).ok());
  EXPECT_EQ(membership_->CheckHeartbeatSecret(a, "").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(membership_->CheckNodeSecret(a, secret).ok());
  EXPECT_EQ(membership_->CheckNodeSecret(a, secret + "0").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(membership_->CheckNodeSecret(99, "anything").ok());  // unknown: nothing to check
  // A node registered before secrets existed has none.
  v1::NodeInfo old;
  old.set_node_id(7);
  old.set_role(v1::WORKER);
  old.set_state(v1::ALIVE);
  Membership loaded(Options());
  loaded.Load({old}, 1, kT0);
  EXPECT_TRUE(loaded.CheckHeartbeatSecret(7, "").ok());
  EXPECT_TRUE(loaded.CheckNodeSecret(7, "x").ok());
}

TEST_F(MembershipTest, LoadGivesLiveNodesAFreshGracePeriod) {
  std::vector<v1::NodeInfo> stored(2);
  stored[0].set_node_id(4);
  stored[0].set_state(v1::ALIVE);
  stored[0].set_last_heartbeat_unix_ms(absl::ToUnixMillis(kT0 - absl::Hours(5)));
  stored[1].set_node_id(9);
  stored[1].set_state(v1::DEAD);
  stored[1].set_last_heartbeat_unix_ms(absl::ToUnixMillis(kT0 - absl::Hours(5)));
  EXPECT_THAT(membership_->Load(stored, 3, kT0), ElementsAre(4u));
  EXPECT_EQ(membership_->Get(4).last_heartbeat_unix_ms(), absl::ToUnixMillis(kT0));
  EXPECT_EQ(membership_->Get(9).last_heartbeat_unix_ms(), absl::ToUnixMillis(kT0 - absl::Hours(5)));
  EXPECT_EQ(membership_->next_node_id(), 10u);  // above every stored id
  EXPECT_THAT(membership_->DeclareSilentNodesDead(kT0 + absl::Seconds(5)), IsEmpty());
}

}  // namespace
}  // namespace ps::membership_test
