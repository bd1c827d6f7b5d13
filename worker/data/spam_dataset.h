// The SpamAssassin public corpus as hashed bag-of-token features, for sparse logistic regression.
// deploy/fetch-spam-assassin.sh installs it as `messages.tsv` (format below).
#ifndef PS_WORKER_DATA_SPAM_DATASET_H_
#define PS_WORKER_DATA_SPAM_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// Where deploy/fetch-spam-assassin.sh installs the corpus by default.
inline constexpr char kDefaultSpamAssassinDir[] = "/usr/share/datasets/spam-assassin";
inline constexpr char kSpamMessagesFile[] = "messages.tsv";

// One message: the distinct hashed tokens (binary features) and the class.
struct SpamExample {
  std::vector<uint64_t> features;  // sorted, unique, each < 2^hash_bits
  int32_t label = 0;               // 1 = spam, 0 = ham
};

struct SpamDatasetOptions {
  // Feature ids are the top `hash_bits` bits of a token's 64-bit hash: 2^hash_bits ids; 1..63.
  int hash_bits = 20;
  // Percent of messages held out for testing, chosen by a hash of "group/id" (so the split does
  // not depend on file order); 0..100.
  int test_percent = 20;

  absl::Status Validate() const;
};

// Train and test examples in memory. Immutable after construction; thread-compatible.
class SpamDataset {
 public:
  SpamDataset() = default;
  SpamDataset(std::vector<SpamExample> train, std::vector<SpamExample> test)
      : train_(std::move(train)), test_(std::move(test)) {}

  // Reads `<dir>/messages.tsv`, one message per line:
  //   <label 0|1> TAB <group> TAB <id> TAB <raw RFC 822 text, with \\ \t \n \r escaped>
  // Errors: INVALID_ARGUMENT for bad options; NOT_FOUND (with a hint to run
  // deploy/fetch-spam-assassin.sh) for a missing file; DATA_LOSS naming file:line for a malformed
  // line (wrong field count, bad label, empty group or id, unknown escape).
  static absl::StatusOr<SpamDataset> Load(const std::string& dir,
                                          const SpamDatasetOptions& options = {});

  const std::vector<SpamExample>& train() const { return train_; }
  const std::vector<SpamExample>& test() const { return test_; }
  int64_t num_train() const { return static_cast<int64_t>(train_.size()); }
  int64_t num_test() const { return static_cast<int64_t>(test_.size()); }
  int64_t num_examples() const { return num_train() + num_test(); }
  // Spam messages in the train and test sets together.
  int64_t num_spam() const;

 private:
  std::vector<SpamExample> train_;
  std::vector<SpamExample> test_;
};

// The tokens of a raw email, in order of appearance (with repeats): maximal runs of ASCII letters
// and digits, lowercased, of length 2..30. Headers end at the first empty line; only Subject,
// From and To (folded continuation lines included) contribute, as "subject:<word>", "from:<word>"
// and "to:<word>"; every other header is skipped. Body lines that look like base64 (>= 40 chars
// of the base64 alphabet, no spaces) are skipped.
std::vector<std::string> TokenizeMessage(absl::string_view raw);

// A stable 64-bit hash of `bytes` (FNV-1a, then the splitmix64 finalizer), and a token's feature
// id: the top `hash_bits` bits of it.
uint64_t StableHash64(absl::string_view bytes);
uint64_t TokenFeature(absl::string_view token, int hash_bits);

// The sorted unique feature ids of a raw email.
std::vector<uint64_t> MessageFeatures(absl::string_view raw, int hash_bits);

// Whether the message `group`/`id` belongs to the test split.
bool InTestSplit(absl::string_view group, absl::string_view id, int test_percent);

// Decodes the escapes of a messages.tsv text field; INVALID_ARGUMENT for an unknown escape or a
// trailing backslash.
absl::StatusOr<std::string> UnescapeSpamField(absl::string_view field);

}  // namespace ps

#endif  // PS_WORKER_DATA_SPAM_DATASET_H_
