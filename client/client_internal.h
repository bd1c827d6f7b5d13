// What the Session needs of a Client beyond the public API: a client whose engine it swaps on
// a new shard map, and which consults it about failed requests and tables.
#ifndef PS_CLIENT_CLIENT_INTERNAL_H_
#define PS_CLIENT_CLIENT_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/client.h"
#include "ps/v1/types.pb.h"
#include "client/rpc_client.h"

namespace ps {

// Implemented by the Session; called from any thread that uses the client.
class SessionLink {
 public:
  virtual ~SessionLink() = default;
  // A request failed with `s`: true if the session takes the failure (a server was lost: it
  // recovers at the end of the step), and the request then reports StepInterruptedError.
  virtual bool Absorb(const absl::Status& s) = 0;
  // True while the current step is interrupted: requests are not sent (they report
  // StepInterruptedError).
  virtual bool interrupted() const = 0;
  // What a request of the interrupted step reports: StepInterruptedError(the cause).
  virtual absl::Status InterruptedStatus() const = 0;
  // Recoveries so far: a request sent before the latest one that fails reports
  // StepInterruptedError without interrupting the step now running.
  virtual uint64_t generation() const = 0;
  // The declared table named `name` (or with id `id`): the job's tables only.
  virtual absl::StatusOr<v1::TableSpec> DeclaredTable(const std::string& name) const = 0;
  virtual absl::StatusOr<v1::TableSpec> DeclaredTableById(uint32_t id) const = 0;
};

// ABORTED "step interrupted: <cause>", marked so that IsStepInterrupted() recognises it.
absl::Status StepInterruptedError(const absl::Status& cause);

// A client over `engine` that asks `link` (which must outlive every request) as above.
std::shared_ptr<Client> MakeSessionClient(ClientOptions options, std::shared_ptr<RpcClient> engine,
                                          std::shared_ptr<SessionLink> link);
// Requests from now on go to `engine` (a new shard map); the old one's requests in flight are
// cancelled. Returns the old engine.
std::shared_ptr<RpcClient> SwapEngine(Client& client, std::shared_ptr<RpcClient> engine);
// The engine requests go to now.
std::shared_ptr<RpcClient> EngineOf(Client& client);

}  // namespace ps

#endif  // PS_CLIENT_CLIENT_INTERNAL_H_
