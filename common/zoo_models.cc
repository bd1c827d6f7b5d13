#include "common/zoo_models.h"

#include <vector>

#include "absl/strings/str_join.h"

namespace ps {

absl::Span<const ZooModel* const> ZooModels() {
  // The registration: one line per model.
  static const ZooModel* const kModels[] = {
      &FashionMlpZooModel(),
      &SpamLogregZooModel(),
  };
  return kModels;
}

const ZooModel* FindZooModel(absl::string_view name) {
  for (const ZooModel* m : ZooModels()) {
    if (name == m->name) return m;
  }
  return nullptr;
}

std::string ZooModelNames(absl::string_view separator) {
  std::vector<absl::string_view> names;
  for (const ZooModel* m : ZooModels()) names.push_back(m->name);
  return absl::StrJoin(names, separator);
}

}  // namespace ps
