// psctl tables JOB: each of the job's tables on each of its servers (DescribeTable), as the
// servers count them: rows, memory, bytes per row, what admission and eviction did, and the
// compression its codecs achieved in each direction.
#include <algorithm>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/security.h"
#include "common/value_codec.h"
#include "ps/v1/parameter_server.grpc.pb.h"
#include "tools/psctl/psctl_commands.h"

namespace ps {
namespace psctl {
namespace {

std::string BytesPerRow(const v1::TableStats& s) {
  if (s.rows() == 0) return "-";
  return absl::StrFormat("%.1f", static_cast<double>(s.bytes()) / static_cast<double>(s.rows()));
}

std::string StorageName(const v1::TableSpec& spec) {
  return v1::TableSpec::Storage_Name(spec.storage());
}

// raw / wire, or a negative number where nothing was encoded yet.
double Ratio(uint64_t raw_bytes, uint64_t wire_bytes) {
  if (wire_bytes == 0) return -1;
  return static_cast<double>(raw_bytes) / static_cast<double>(wire_bytes);
}

// Whether a direction's values are encoded (counted by the servers): a codec, or delta pulls.
bool Encoded(const v1::CodecSpec& codec) {
  return codec.codec() != v1::CODEC_NONE || codec.delta();
}

// A direction's codec by name: "int8", "int8+delta" (delta pulls), "none+delta".
std::string CodecLabel(const v1::CodecSpec& codec) {
  return absl::StrCat(CodecName(codec.codec()), codec.delta() ? "+delta" : "");
}

// One direction's codec and the ratio its bytes achieved on this server: "none" (no codec),
// "topk 24.6x", or "fp16 -" (a codec, nothing encoded yet).
std::string CodecColumn(const v1::CodecSpec& codec, uint64_t raw_bytes, uint64_t wire_bytes) {
  if (!Encoded(codec)) return "none";
  const double ratio = Ratio(raw_bytes, wire_bytes);
  if (ratio < 0) return absl::StrCat(CodecLabel(codec), " -");
  return absl::StrFormat("%s %.2fx", CodecLabel(codec), ratio);
}

// A direction's codec and ratio as JSON fields: "push_codec":"topk","push_ratio":24.6 (null
// where nothing was encoded yet; 1 without a codec, which sends float32).
std::string JsonCodec(const char* direction, const v1::CodecSpec& codec, uint64_t raw_bytes,
                      uint64_t wire_bytes) {
  std::string ratio = "1";
  if (Encoded(codec)) {
    const double r = Ratio(raw_bytes, wire_bytes);
    ratio = r < 0 ? "null" : absl::StrFormat("%.4g", r);
  }
  return absl::StrCat(R"(,")", direction, R"(_codec":")", CodecLabel(codec), R"(",")", direction,
                      R"(_ratio":)", ratio);
}

// One JSON object: a table on a server, its stats as protobuf JSON.
std::string JsonLine(const std::string& server, const v1::TableSpec& table,
                     const v1::DescribeTableResponse& answer) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  std::string stats;
  (void)google::protobuf::util::MessageToJsonString(answer.stats(), &stats, opts);
  const v1::TableStats& st = answer.stats();
  return absl::StrCat(
      R"({"server":")", server, R"(","table_id":)", table.table_id(), R"(,"name":")", table.name(),
      R"(","storage":")", StorageName(answer.spec()), R"(")",
      JsonCodec("push", answer.spec().push_codec(), st.push_raw_bytes(), st.push_wire_bytes()),
      JsonCodec("pull", answer.spec().pull_codec(), st.pull_raw_bytes(), st.pull_wire_bytes()),
      R"(,"stats":)", stats, "}");
}

// The disk tier's columns (TierColumns' values, in order).
constexpr const char* kTierHeader[] = {"DISK-ROWS",  "DISK-BYTES", "RAM-HIT%",
                                       "DISK-READS", "PINNED",     "PF-SKIPPED"};

// A table with a disk tier: its rows and bytes there, the share of keys found in RAM, the
// rows read back from disk, the prefetched rows pinned in RAM now, and the keys prefetches
// did not read (over the pin bound or the cap); "-" each for a table without one.
std::vector<std::string> TierColumns(const v1::TableSpec& spec, const v1::TableStats& st) {
  if (!spec.tier().disk()) return std::vector<std::string>(std::size(kTierHeader), "-");
  const uint64_t looked_up = st.ram_hits() + st.disk_lookups();
  return {absl::StrCat(st.disk_rows()),
          absl::StrCat(st.disk_bytes()),
          looked_up == 0 ? std::string("-")
                         : absl::StrFormat("%.1f", 100.0 * st.ram_hits() / looked_up),
          absl::StrCat(st.disk_reads()),
          absl::StrCat(st.prefetch_pinned()),
          absl::StrCat(st.prefetch_skipped())};
}

}  // namespace

void Commands::DescribeTables(
    const JobInfo& job,
    const std::function<void(const v1::TableSpec& table, const std::string& server,
                             const grpc::Status& s, const v1::DescribeTableResponse& answer)>&
        answer) const {
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs;
  for (const std::string& address : job.server_addresses()) {
    stubs.push_back(v1::ParameterServer::NewStub(DialChannel(address, grpc::ChannelArguments())));
  }
  for (const v1::TableSpec& t : job.spec().tables()) {
    for (int i = 0; i < job.server_addresses_size(); ++i) {
      grpc::ClientContext context;
      Prepare(context);
      v1::DescribeTableRequest request;
      request.set_table_id(t.table_id());
      v1::DescribeTableResponse response;
      const grpc::Status s = stubs[i]->DescribeTable(&context, request, &response);
      answer(t, job.server_addresses(i), s, response);
    }
  }
}

void Commands::PrintCompression(const JobInfo& job) const {
  bool any = false;
  for (const v1::TableSpec& t : job.spec().tables()) {
    any = any || Encoded(t.push_codec()) || Encoded(t.pull_codec());
  }
  if (!any || job.server_addresses_size() == 0) return;
  struct Sums {
    uint64_t push_raw = 0, push_wire = 0, pull_raw = 0, pull_wire = 0;
    int answered = 0;
  };
  std::map<uint32_t, Sums> sums;
  std::vector<std::string> unanswered;
  DescribeTables(job, [&](const v1::TableSpec& t, const std::string& server, const grpc::Status& s,
                          const v1::DescribeTableResponse& answer) {
    if (!s.ok()) {
      unanswered.push_back(absl::StrCat(t.name(), " on ", server, ": ", Describe(s)));
      return;
    }
    Sums& sum = sums[t.table_id()];
    sum.push_raw += answer.stats().push_raw_bytes();
    sum.push_wire += answer.stats().push_wire_bytes();
    sum.pull_raw += answer.stats().pull_raw_bytes();
    sum.pull_wire += answer.stats().pull_wire_bytes();
    ++sum.answered;
  });
  for (const v1::TableSpec& t : job.spec().tables()) {
    if (!Encoded(t.push_codec()) && !Encoded(t.pull_codec())) continue;
    const Sums& sum = sums[t.table_id()];
    std::cout << "compression " << t.name() << ": push "
              << CodecColumn(t.push_codec(), sum.push_raw, sum.push_wire) << ", pull "
              << CodecColumn(t.pull_codec(), sum.pull_raw, sum.pull_wire) << " (" << sum.answered
              << " of " << job.server_addresses_size() << " servers)\n";
  }
  for (const std::string& line : unanswered) {
    std::cerr << "psctl: status: compression of " << line << "\n";
  }
}

int Commands::Tables(const std::string& job_id) {
  JobInfo job;
  grpc::Status s = GetJob(job_id, job);
  if (!s.ok()) return Fail("tables", s);
  if (job.spec().tables_size() == 0) {
    std::cerr << "psctl: tables: job " << job_id
              << " lists no tables in its spec (a zoo job's workers create theirs)\n";
    return kRefused;
  }
  if (job.server_addresses_size() == 0) {
    std::cerr << "psctl: tables: job " << job_id << " has no servers placed (state "
              << v1::JobState_Name(job.state()) << ")\n";
    return kRefused;
  }
  // The disk tier's columns only where a table of the job has one.
  const bool tiered = std::any_of(job.spec().tables().begin(), job.spec().tables().end(),
                                  [](const v1::TableSpec& t) { return t.tier().disk(); });
  std::vector<std::string> header({"TABLE", "SERVER", "STORAGE", "ROWS", "BYTES", "BYTES/ROW",
                                   "ADMITTED", "REJECTED", "EVICTED", "EXPIRED", "PUSH", "PULL"});
  if (tiered) header.insert(header.end(), std::begin(kTierHeader), std::end(kTierHeader));
  Table table;
  table.AddRow(header);
  std::vector<std::string> json;
  int exit_code = kOk;
  DescribeTables(job, [&](const v1::TableSpec& t, const std::string& address,
                          const grpc::Status& ds, const v1::DescribeTableResponse& answer) {
    if (!ds.ok()) {
      std::cerr << "psctl: tables: " << t.name() << " on " << address << ": " << Describe(ds)
                << "\n";
      exit_code = kRefused;  // the others are still printed
      return;
    }
    const v1::TableStats& st = answer.stats();
    if (options_.json) {
      json.push_back(JsonLine(address, t, answer));
      return;
    }
    std::vector<std::string> row(
        {t.name(), address, StorageName(answer.spec()), absl::StrCat(st.rows()),
         absl::StrCat(st.bytes()), BytesPerRow(st), absl::StrCat(st.admitted()),
         absl::StrCat(st.rejected()), absl::StrCat(st.evicted()), absl::StrCat(st.expired()),
         CodecColumn(answer.spec().push_codec(), st.push_raw_bytes(), st.push_wire_bytes()),
         CodecColumn(answer.spec().pull_codec(), st.pull_raw_bytes(), st.pull_wire_bytes())});
    if (tiered) {
      for (std::string& column : TierColumns(answer.spec(), st)) row.push_back(std::move(column));
    }
    table.AddRow(row);
  });
  if (options_.json) {
    std::cout << "[" << absl::StrJoin(json, ",\n ") << "]\n";
  } else {
    table.Print(std::cout);
  }
  return exit_code;
}

}  // namespace psctl
}  // namespace ps
