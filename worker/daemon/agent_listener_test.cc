// The agent's socket checks who connects (SO_PEERCRED), not the path alone: a real gRPC server
// behind a real Unix socket, called from this process.
#include "worker/daemon/agent_listener.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps/v1/agent.grpc.pb.h"

namespace ps {
namespace {

// This process's session, as the agent's program has its own (the daemon starts it with setsid).
// Where the session's leader is outside this pid namespace (a CI container: getsid says 0), the
// test makes its own session first, which a process that leads no group can always do.
pid_t OwnSession() {
  const pid_t session = getsid(0);
  if (session > 0) return session;
  return setsid() == -1 ? 0 : getpid();
}

TEST(CheckAgentPeerTest, TheProgramsUidAndSessionOnly) {
  const pid_t session = OwnSession();
  if (session == 0) GTEST_SKIP() << "this process has no session of its own and cannot make one";
  EXPECT_TRUE(CheckAgentPeer(Peer{getpid(), getuid(), getgid()}, getuid(), session).ok());
  // Another user: refused whatever its session.
  absl::Status s = CheckAgentPeer(Peer{getpid(), getuid() + 1, getgid()}, getuid(), session);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("runs as uid"), std::string::npos) << s;
  // The same user in another session (another job's program, without --program_uids).
  s = CheckAgentPeer(Peer{getpid(), getuid(), getgid()}, getuid(), session + 1);
  EXPECT_NE(s.message().find("is not this agent's program"), std::string::npos) << s;
  // No program running.
  EXPECT_FALSE(CheckAgentPeer(Peer{getpid(), getuid(), getgid()}, getuid(), 0).ok());
}

class AgentListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("agent_listener_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "agent.sock").string();
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);  // every method UNIMPLEMENTED: enough to be served
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    listener_.reset();
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }
  // A call through the socket: UNIMPLEMENTED if served, UNAVAILABLE if the connection was shut.
  grpc::StatusCode Call() {
    auto stub = v1::WorkerAgent::NewStub(
        grpc::CreateChannel("unix:" + path_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    v1::GetAssignmentRequest req;
    v1::WorkerAssignment resp;
    return stub->GetAssignment(&ctx, req, &resp).error_code();
  }

  std::filesystem::path dir_;
  std::string path_;
  v1::WorkerAgent::Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<AgentListener> listener_;
};

TEST_F(AgentListenerTest, ServesThePeersItAdmitsOnly) {
  const pid_t session = OwnSession();
  if (session == 0) GTEST_SKIP() << "this process has no session of its own and cannot make one";
  auto admit_session = [](pid_t session) {
    return [session](const Peer& peer) { return CheckAgentPeer(peer, getuid(), session); };
  };
  auto listener =
      AgentListener::Start(path_, getuid(), getgid(), server_.get(), admit_session(session));
  ASSERT_TRUE(listener.ok()) << listener.status();
  listener_ = std::move(*listener);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(st.st_uid, getuid());
  EXPECT_EQ(Call(), grpc::StatusCode::UNIMPLEMENTED);  // this process's session: served
  EXPECT_EQ(listener_->refused(), 0u);

  // The same socket path, another program's session: this process is refused at connect.
  listener_.reset();
  listener =
      AgentListener::Start(path_, getuid(), getgid(), server_.get(), admit_session(session + 1));
  ASSERT_TRUE(listener.ok()) << listener.status();
  listener_ = std::move(*listener);
  EXPECT_EQ(Call(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_GE(listener_->refused(), 1u);
}

}  // namespace
}  // namespace ps
