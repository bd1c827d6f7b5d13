// Exactly once under retry with a compressed push: a real server behind a proxy that loses its
// reply to a push, so that the client sees UNAVAILABLE and sends the request again.
#include <prometheus/registry.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/testing/daemon_probes.h"
#include "common/testing/reply_losing_proxy.h"
#include "gtest/gtest.h"
#include "ps/client.h"
#include "server/parameter_server.h"

namespace ps {
namespace {

// A topk push whose reply is lost is sent again with the same bytes and request id: the server
// applies it once (the retry is its duplicate), and the client's residual (error feedback) was
// taken once, when the request was encoded.
TEST(ClientRetryTest, ARetriedTopkPushIsAppliedOnceAndItsResidualKeptOnce) {
  prometheus::Registry registry;
  ParameterServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  auto server = ParameterServer::Start(server_options, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  auto proxy = testing::ReplyLosingProxy::Start((*server)->port());
  ASSERT_NE(proxy, nullptr);

  ClientOptions options;
  options.servers = {proxy->address()};
  options.job_id = "retry";
  options.rpc_timeout = absl::Seconds(20);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TableConfig config;
  config.name = "w";
  config.kind = TableKind::kDense;
  config.num_rows = 4;
  config.dim = 8;
  config.optimizer = Optimizer::Sgd(1.0f);
  config.push_codec = WireCodec{Codec::kTopk, 0.25f};  // 8 of the block's 32 values
  auto table = (*client)->CreateTable(config);
  ASSERT_TRUE(table.ok()) << table.status();

  std::vector<uint64_t> keys(4);
  std::iota(keys.begin(), keys.end(), 0);
  // |g| grows with the index (values exact in float32): topk sends 24..31, keeps 0..23.
  std::vector<float> g(32);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i + 1) / 8 * (i % 2 ? -1 : 1);

  proxy->LoseReplies(1);
  const absl::Status pushed = (*client)->Push(*table, keys, g);
  ASSERT_TRUE(pushed.ok()) << pushed;
  EXPECT_EQ(proxy->lost(), 1);  // the first answer never arrived: the push was sent twice
  EXPECT_EQ(testing::MetricValue(registry, "ps_server_duplicate_pushes_total", {{"job", "retry"}}),
            1);

  // Applied once: -g on the values sent (twice would be -2g).
  std::vector<float> out(32);
  ASSERT_TRUE((*client)->Pull(*table, keys, absl::MakeSpan(out)).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i], i >= 24 ? -g[i] : 0.0f) << "value " << i;
  }

  // The residual holds g[0..23] once: a zero gradient now sends its 8 largest, g[16..23]. Had
  // the retry encoded the gradient again, the residual would hold 2 g[0..23].
  ASSERT_TRUE((*client)->Push(*table, keys, std::vector<float>(32, 0.0f)).ok());
  ASSERT_TRUE((*client)->Pull(*table, keys, absl::MakeSpan(out)).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i], i >= 16 ? -g[i] : 0.0f) << "value " << i;
  }
  EXPECT_EQ(proxy->lost(), 1);
  (*client).reset();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace ps
