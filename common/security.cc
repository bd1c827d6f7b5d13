#include "common/security.h"

#include <glog/logging.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/node_identity.h"
#include "common/printable.h"

namespace ps {
namespace {

constexpr char kAuthHeader[] = "authorization";
constexpr char kBearer[] = "Bearer ";
constexpr char kJobTokenPrefix[] = "job:";

// The token a call carries ("" if none).
std::string TokenOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthHeader);
  if (it == metadata.end()) return "";
  const std::string value(it->second.data(), it->second.size());
  return absl::StartsWith(value, kBearer) ? value.substr(sizeof(kBearer) - 1) : "";
}
// Tokens and PEM files are small; anything larger is a wrong path.
constexpr std::streamsize kMaxFileBytes = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::string data(kMaxFileBytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", what, " ", path));
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > static_cast<size_t>(kMaxFileBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is larger than ", kMaxFileBytes, " bytes"));
  }
  return data;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> pem = ReadSmallFile(path, what);
  if (!pem.ok()) return pem.status();
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a PEM file"));
  }
  return pem;
}

class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthHeader, *header_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>(absl::StrCat(kBearer, token))) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(header_);
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

absl::Mutex process_mu(absl::kConstInit);
std::shared_ptr<const Security>* process_security ABSL_GUARDED_BY(process_mu) = nullptr;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Security>> Security::Load(const SecurityOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both (or neither)");
  }
  std::shared_ptr<Security> s(new Security);
  s->options_ = options;
  s->token_ = options.token;
  absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "--tls_key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "--tls_ca");
  if (!ca.ok()) return ca.status();
  s->cert_pem_ = *std::move(cert);
  s->key_pem_ = *std::move(key);
  s->ca_pem_ = *std::move(ca);
  return std::shared_ptr<const Security>(std::move(s));
}

absl::StatusOr<std::shared_ptr<const Security>> Security::FromEnvironment() {
  SecurityOptions options;
  options.tls_ca_file = Env("PS_TLS_CA");
  options.tls_cert_file = Env("PS_TLS_CERT");
  options.tls_key_file = Env("PS_TLS_KEY");
  options.token = Env("PS_CLUSTER_TOKEN");
  absl::StripAsciiWhitespace(&options.token);
  return Load(options);
}

std::shared_ptr<grpc::ChannelCredentials> Security::ChannelCredentials() const {
  if (!client_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem_;
  ssl.pem_private_key = key_pem_;
  ssl.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::ServerCredentials> Security::ServerCredentials() const {
  if (!server_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      client_tls() ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_root_certs = ca_pem_;
  ssl.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(ssl);
}

std::string Security::Describe() const {
  std::string serve = mutual_tls() ? "mutual TLS" : server_tls() ? "TLS" : "plaintext";
  std::string dial =
      client_tls() ? (cert_pem_.empty() ? "TLS" : "TLS with a client certificate") : "plaintext";
  return absl::StrCat("serves ", serve, ", dials ", dial,
                      token_.empty() ? ", no token" : ", token");
}

std::shared_ptr<const Security> ProcessSecurity() {
  absl::MutexLock l(&process_mu);
  if (process_security == nullptr) {
    absl::StatusOr<std::shared_ptr<const Security>> env = Security::FromEnvironment();
    if (!env.ok()) {
      LOG(ERROR) << "transport security from PS_TLS_* / PS_CLUSTER_TOKEN: " << env.status()
                 << "; dialing in plaintext without a token";
      env = Security::Load({});
    }
    process_security = new std::shared_ptr<const Security>(*std::move(env));
  }
  return *process_security;
}

void SetProcessSecurity(std::shared_ptr<const Security> security) {
  absl::MutexLock l(&process_mu);
  if (process_security == nullptr) {
    process_security = new std::shared_ptr<const Security>(std::move(security));
  } else {
    *process_security = std::move(security);
  }
}

std::shared_ptr<grpc::Channel> DialChannel(const std::string& address,
                                           const grpc::ChannelArguments& args) {
  std::shared_ptr<const Security> security = ProcessSecurity();
  if (security->token().empty()) {
    return grpc::CreateCustomChannel(address, security->ChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<TokenInterceptorFactory>(security->token()));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, security->ChannelCredentials(), args, std::move(factories));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadSmallFile(path, "token file");
  if (!token.ok()) return token.status();
  absl::StripAsciiWhitespace(&*token);
  if (token->empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  if (token->find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, " holds more than one word; a token is one line"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    LOG(WARNING) << "token file " << path << " may be read by other users (mode " << std::oct
                 << (st.st_mode & 0777) << std::dec << "); chmod 600 it";
  }
  return token;
}

absl::StatusOr<std::string> TokenFromFileOrEnv(const std::string& file, const char* env) {
  if (!file.empty()) return ReadTokenFile(file);
  std::string token = Env(env);
  absl::StripAsciiWhitespace(&token);
  return token;
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Walk the longer one whole, so that the time says nothing of where they differ.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

Authorizer::Authorizer(std::string cluster_token, std::string admin_token,
                       prometheus::Registry* registry)
    : cluster_token_(std::move(cluster_token)), admin_token_(std::move(admin_token)) {
  if (registry != nullptr) {
    refused_ = &prometheus::BuildCounter()
                    .Name("ps_auth_refused_total")
                    .Help(
                        "Calls refused for their token, by reason: missing_token, wrong_token "
                        "(UNAUTHENTICATED), not_admin (PERMISSION_DENIED: the cluster token on "
                        "a changing command), job_token and other_job (PERMISSION_DENIED: a "
                        "job's credential beyond its job), restore_order (PERMISSION_DENIED: a "
                        "restore order the scheduler did not sign for the job), table_id and "
                        "checkpoint_path (PERMISSION_DENIED: a job's credential creating a table "
                        "id or writing a checkpoint folder the scheduler did not give its job)")
                    .Register(*registry);
    for (const char* reason : {"missing_token", "wrong_token", "not_admin"}) {
      refused_->Add({{"reason", reason}});
    }
  }
}

void Authorizer::Count(const char* reason) const {
  if (refused_ != nullptr) refused_->Add({{"reason", reason}}).Increment();
}

std::string JobToken(const std::string& cluster_token, const std::string& job_id) {
  return absl::StrCat(kJobTokenPrefix, job_id, ":",
                      HmacSha256Hex(cluster_token, absl::StrCat("job-token\n", job_id)));
}

std::string Authorizer::JobOf(const std::string& token) const {
  constexpr size_t kPrefix = sizeof(kJobTokenPrefix) - 1;
  if (cluster_token_.empty() || !absl::StartsWith(token, kJobTokenPrefix)) return "";
  const size_t colon = token.rfind(':');
  if (colon == std::string::npos || colon <= kPrefix) return "";
  const std::string job = token.substr(kPrefix, colon - kPrefix);
  return ConstantTimeEquals(token, JobToken(cluster_token_, job)) ? job : "";
}

std::string Authorizer::JobScope(const grpc::ServerContextBase& context) const {
  if (!enabled()) return "";
  return JobOf(TokenOf(context));
}

grpc::Status Authorizer::CheckJob(const grpc::ServerContextBase& context,
                                  const std::string& job_id) const {
  const std::string scope = JobScope(context);
  if (scope.empty() || scope == job_id) return grpc::Status::OK;
  Count("other_job");
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("the call carries job ", scope, "'s credential; it cannot act on job '",
                   Printable(job_id, 64), "'"));
}

void Authorizer::SignRestoreOrder(const std::string& job_id, v1::RestoreOrder* order) const {
  order->clear_signature();
  order->set_signature(RestoreOrderSignature(cluster_token_, job_id, *order));
}

v1::RestoreOrder SignedRestoreOrder(const Authorizer* authorizer, const std::string& job_id,
                                    v1::RestoreOrder order) {
  if (authorizer != nullptr) authorizer->SignRestoreOrder(job_id, &order);
  return order;
}

grpc::Status Authorizer::CheckRestoreOrder(const grpc::ServerContextBase& context,
                                           const std::string& job_id,
                                           const v1::RestoreOrder& order) const {
  if (JobScope(context).empty()) return grpc::Status::OK;
  if (!order.signature().empty() &&
      ConstantTimeEquals(order.signature(), RestoreOrderSignature(cluster_token_, job_id, order))) {
    return grpc::Status::OK;
  }
  Count("restore_order");
  const std::string source = order.source_job_id().empty() ? job_id : order.source_job_id();
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat("restore order of job '", Printable(job_id, 64), "' (checkpoint ",
                   order.checkpoint_id(), " of job '", Printable(source, 64), "', shard epoch ",
                   order.shard_epoch(), ") ",
                   order.signature().empty() ? "is not signed" : "has a wrong signature",
                   ": a job's credential carries out only the orders the scheduler signed for "
                   "that job; nothing was restored"));
}

bool Authorizer::IsAdmin(const grpc::ServerContextBase& context) const {
  if (!enabled()) return true;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthHeader);
  if (it == metadata.end()) return admin_token_.empty() && cluster_token_.empty();
  const std::string value(it->second.data(), it->second.size());
  std::string token;
  if (absl::StartsWith(value, kBearer)) token = value.substr(sizeof(kBearer) - 1);
  if (!admin_token_.empty()) return ConstantTimeEquals(token, admin_token_);
  return ConstantTimeEquals(token, cluster_token_);
}

grpc::Status Authorizer::Check(const grpc::ServerContextBase& context, Access access) const {
  if (!enabled()) return grpc::Status::OK;
  // With only an admin token configured, node (and job) calls need none.
  if (access != Access::kAdmin && cluster_token_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthHeader);
  if (it == metadata.end()) {
    Count("missing_token");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this cluster needs a token: the call carried none (nodes: "
                        "--cluster_token_file or PS_CLUSTER_TOKEN; psctl: --token_file or "
                        "PS_TOKEN)");
  }
  const std::string value(it->second.data(), it->second.size());
  std::string token;
  if (absl::StartsWith(value, kBearer)) token = value.substr(sizeof(kBearer) - 1);
  const bool is_admin = !admin_token_.empty() && ConstantTimeEquals(token, admin_token_);
  const bool is_cluster = !cluster_token_.empty() && ConstantTimeEquals(token, cluster_token_);
  if (access == Access::kAdmin && !admin_token_.empty()) {
    if (is_admin) return grpc::Status::OK;
    if (is_cluster) {
      Count("not_admin");
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "this command changes the cluster's jobs and needs the admin token; "
                          "the call carried the cluster token");
    }
  } else if (is_admin || is_cluster) {
    return grpc::Status::OK;
  }
  if (!JobOf(token).empty()) {
    if (access == Access::kJob) return grpc::Status::OK;
    Count("job_token");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "a job's credential (what a worker hands to a job's programs) reaches that "
                        "job's calls to the servers only; this call needs the cluster token");
  }
  Count("wrong_token");
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the call's token is not this cluster's");
}

}  // namespace ps
