// Transport security for every gRPC port and channel of the cluster: TLS or mutual TLS from PEM
// files, and the tokens a caller presents and a service checks.
//
// A process has one Security, set once at start (daemons: from their flags; psctl: from its
// flags). A process that sets none (a user's program, the Python package, tests) takes it from
// the environment on first use: PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY (file paths) and
// PS_CLUSTER_TOKEN. The worker daemon exports its TLS files to the programs it starts, and in
// PS_CLUSTER_TOKEN their job's credential (JobToken), not the cluster token.
//
// Certificates and tokens are read once: rotating them takes a restart.
#ifndef PS_COMMON_SECURITY_H_
#define PS_COMMON_SECURITY_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/v1/checkpoint.pb.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Counter;
}  // namespace prometheus

namespace ps {

// Where the PEM files and the token come from.
struct SecurityOptions {
  std::string tls_cert_file;  // this node's certificate chain (serve TLS; client cert for mTLS)
  std::string tls_key_file;   // its private key
  std::string tls_ca_file;    // verify peers against this CA; with a cert: require client certs
  std::string token;          // presented on every call this process makes (empty: none)
};

class Security {
 public:
  // Reads the PEM files. Errors name the file. A cert without a key (or the reverse) is
  // INVALID_ARGUMENT.
  static absl::StatusOr<std::shared_ptr<const Security>> Load(const SecurityOptions& options);
  // From PS_TLS_CA, PS_TLS_CERT, PS_TLS_KEY and PS_CLUSTER_TOKEN.
  static absl::StatusOr<std::shared_ptr<const Security>> FromEnvironment();

  // TLS when a CA is given (server verified against it; this node's cert presented if any),
  // else plaintext.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  // TLS when a cert and key are given; clients must present a certificate of the CA when a CA
  // is given too (mutual TLS). Else plaintext.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

  bool client_tls() const { return !ca_pem_.empty(); }
  bool server_tls() const { return !cert_pem_.empty(); }
  bool mutual_tls() const { return server_tls() && client_tls(); }
  const std::string& token() const { return token_; }
  const SecurityOptions& options() const { return options_; }
  // "plaintext", "TLS" or "mutual TLS", and whether a token is presented: for start-up logs.
  std::string Describe() const;

 private:
  Security() = default;
  SecurityOptions options_;
  std::string cert_pem_, key_pem_, ca_pem_;
  std::string token_;
};

// The process's Security: the one set by SetProcessSecurity, else the environment's (an error
// there is logged once and the process dials in plaintext without a token).
std::shared_ptr<const Security> ProcessSecurity();
void SetProcessSecurity(std::shared_ptr<const Security> security);

// A channel to `address` with the process's credentials; every call on it carries the process's
// token ("authorization: Bearer ..." metadata) when it has one.
std::shared_ptr<grpc::Channel> DialChannel(const std::string& address,
                                           const grpc::ChannelArguments& args = {});

// Reads a token file (trailing whitespace and newlines dropped); an empty file is an error, as
// is a file other users may read (mode & 077), which could leak it.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
// A token from `file` if given, else from the environment variable `env` (may be unset: "").
absl::StatusOr<std::string> TokenFromFileOrEnv(const std::string& file, const char* env);

// What a call needs.
enum class Access {
  kNode,   // the cluster's own traffic and read-only views: the cluster or the admin token
  kJob,    // a job's calls to the servers: those, or that job's credential (JobToken); the
           // handler checks the job with Authorizer::CheckJob
  kAdmin,  // changing the cluster's jobs (submit, cancel, checkpoint, restore, drain)
};

// A job's credential, what a worker daemon hands the programs of job `job_id` for the cluster
// token: "job:<job_id>:<HMAC-SHA256 keyed with the cluster token of "job-token\n" + job id, in
// lowercase hex>". Every daemon holding the cluster token can mint and check it; it reaches
// only that job's calls to the servers (Access::kJob), never the scheduler or another job.
std::string JobToken(const std::string& cluster_token, const std::string& job_id);

// Checks the token a call presents. Thread-safe. With no tokens configured every call passes.
class Authorizer {
 public:
  // `cluster_token`: what nodes present (empty: node calls need no token unless an admin token
  // is set, which then passes too). `admin_token`: what changing commands need (empty: they
  // need what node calls need). `registry` (may be null) gets ps_auth_refused_total{reason}.
  Authorizer(std::string cluster_token, std::string admin_token,
             prometheus::Registry* registry = nullptr);

  // OK, or UNAUTHENTICATED (no token, wrong token) or PERMISSION_DENIED (the cluster token on
  // an admin call, a job's credential on a call that is not Access::kJob). Compares in
  // constant time.
  grpc::Status Check(const grpc::ServerContextBase& context, Access access) const;
  // After Check(context, Access::kJob): PERMISSION_DENIED if the call carries another job's
  // credential than `job_id`'s; OK for the cluster and admin tokens.
  grpc::Status CheckJob(const grpc::ServerContextBase& context, const std::string& job_id) const;
  // The job whose credential the call carries ("" for any other token, or none).
  std::string JobScope(const grpc::ServerContextBase& context) const;

  // The scheduler's, as an order leaves it for a job's workers: sets `order`'s signature for job
  // `job_id` (RestoreOrderSignature under the cluster token; none without one).
  void SignRestoreOrder(const std::string& job_id, v1::RestoreOrder* order) const;
  // A server's, on a Restore of job `job_id` that passed CheckJob: a call carrying a job's
  // credential may only carry out an order the scheduler signed for that job, else
  // PERMISSION_DENIED (so a program cannot name another job's checkpoint, or alter its own
  // job's order). OK for every other caller: the cluster and admin tokens, or no tokens.
  grpc::Status CheckRestoreOrder(const grpc::ServerContextBase& context, const std::string& job_id,
                                 const v1::RestoreOrder& order) const;

  bool enabled() const { return !cluster_token_.empty() || !admin_token_.empty(); }
  // Whether the call would pass Check(context, Access::kAdmin), without counting a refusal:
  // true in a cluster without tokens, and for the cluster token where no admin token is set.
  bool IsAdmin(const grpc::ServerContextBase& context) const;
  // Counts a refusal a handler made itself (a job's credential naming what is not its job's:
  // server/job_grants.h) in ps_auth_refused_total{reason}.
  void CountRefusal(const char* reason) const { Count(reason); }

 private:
  void Count(const char* reason) const;
  // The job `token` is a valid credential of ("" if it is none).
  std::string JobOf(const std::string& token) const;
  const std::string cluster_token_;
  const std::string admin_token_;
  prometheus::Family<prometheus::Counter>* refused_ = nullptr;
};

// `order` as the scheduler hands it to job `job_id`'s workers: signed by `authorizer`
// (Authorizer::SignRestoreOrder); unsigned when `authorizer` is null (a cluster without tokens).
v1::RestoreOrder SignedRestoreOrder(const Authorizer* authorizer, const std::string& job_id,
                                    v1::RestoreOrder order);

// Returns from the enclosing handler unless the call may act on job `job_id` (Access::kJob).
#define PS_AUTHORIZE_JOB(authorizer, context, job_id)                                             \
  do {                                                                                            \
    PS_AUTHORIZE(authorizer, context, ::ps::Access::kJob);                                        \
    if ((authorizer) != nullptr) {                                                                \
      if (::grpc::Status _ps_job = (authorizer)->CheckJob(*(context), (job_id)); !_ps_job.ok()) { \
        return _ps_job;                                                                           \
      }                                                                                           \
    }                                                                                             \
  } while (0)

// Returns `status` from the enclosing handler if the call is not allowed.
#define PS_AUTHORIZE(authorizer, context, access)                                                \
  do {                                                                                           \
    if ((authorizer) != nullptr) {                                                               \
      if (::grpc::Status _ps_auth = (authorizer)->Check(*(context), (access)); !_ps_auth.ok()) { \
        return _ps_auth;                                                                         \
      }                                                                                          \
    }                                                                                            \
  } while (0)

// Equal strings, in time that depends on the lengths only.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace ps

#endif  // PS_COMMON_SECURITY_H_
