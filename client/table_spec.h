// A ps::TableConfig (the public API's) as the TableSpec the servers get. The config's typed
// fields map one to one; any other setting travels in TableConfig::spec, the TableSpec's own
// fields in text format or JSON, so that a new setting (a TableSpec field and its check in
// common/table_features.cc) needs no edit here, in include/ps/client.h or in the Python binding.
#ifndef PS_CLIENT_TABLE_SPEC_H_
#define PS_CLIENT_TABLE_SPEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/client.h"
#include "ps/v1/types.pb.h"

namespace ps {

// The spec of `config` in job `job_id` (table_id: config.id, or TableIdFor(job_id, name)): its
// typed fields (a zero setting stays unset: off), then config.spec merged over them (protobuf's
// MergeFrom). INVALID_ARGUMENT, naming the field, where config.spec does not parse as TableSpec
// fields or sets one that is not a setting (TableSettingsOf: the table's identity and shape,
// initializer and optimizer are the config's own fields). The settings are not checked here
// (ValidateTableFeatures does).
absl::StatusOr<v1::TableSpec> TableSpecOf(const TableConfig& config, const std::string& job_id);

// A program job's tables are the job file's: OK where `config` asks for no setting (all off, the
// job file's apply) or for exactly `declared`'s settings; INVALID_ARGUMENT otherwise, rather
// than silently ignored.
absl::Status CheckDeclaredSettings(const TableConfig& config, const v1::TableSpec& declared);

}  // namespace ps

#endif  // PS_CLIENT_TABLE_SPEC_H_
