#include "common/shard_map.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {

ShardMap ShardMap::RoundRobin(std::vector<std::string> servers, uint64_t epoch) {
  ShardMap m;
  m.epoch_ = epoch;
  m.owner_.resize(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) m.owner_[s] = static_cast<int>(s % servers.size());
  m.servers_ = std::move(servers);
  return m;
}

absl::StatusOr<ShardMap> ShardMap::FromOwners(std::vector<std::string> servers,
                                              const std::vector<uint32_t>& owners, uint64_t epoch) {
  if (owners.size() != kNumSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shard map needs ", kNumSlots, " slot owners, not ", owners.size()));
  }
  ShardMap m;
  m.epoch_ = epoch;
  m.owner_.resize(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (owners[s] >= servers.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, " is owned by server ", owners[s], " of ", servers.size()));
    }
    m.owner_[s] = static_cast<int>(owners[s]);
  }
  m.servers_ = std::move(servers);
  return m;
}

std::vector<bool> ShardMap::SlotsOf(int index) const {
  std::vector<bool> mine(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) mine[s] = owner_[s] == index;
  return mine;
}

absl::StatusOr<ShardMap> ShardMap::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open shard map file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str());
}

absl::StatusOr<ShardMap> ShardMap::Parse(const std::string& text) {
  ShardMap m;
  m.epoch_ = 1;
  m.owner_.assign(kNumSlots, -1);
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t,"), absl::SkipWhitespace());
    if (words.empty()) continue;
    if (words.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map line ", line_no, ": want 'address slot-range...'"));
    }
    const int index = static_cast<int>(m.servers_.size());
    m.servers_.emplace_back(words[0]);
    for (size_t i = 1; i < words.size(); ++i) {
      std::vector<absl::string_view> ends = absl::StrSplit(words[i], '-');
      uint32_t lo = 0, hi = 0;
      if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &lo) ||
          !absl::SimpleAtoi(ends.back(), &hi) || lo > hi || hi >= kNumSlots) {
        return absl::InvalidArgumentError(
            absl::StrCat("shard map line ", line_no, ": bad slot range '", words[i],
                         "' (want A-B within 0-", kNumSlots - 1, ")"));
      }
      for (uint32_t s = lo; s <= hi; ++s) {
        if (m.owner_[s] != -1) {
          return absl::InvalidArgumentError(
              absl::StrCat("shard map line ", line_no, ": slot ", s, " is owned twice"));
        }
        m.owner_[s] = index;
      }
    }
  }
  for (uint32_t s = 0; s < kNumSlots; ++s) {
    if (m.owner_[s] == -1) {
      return absl::InvalidArgumentError(absl::StrCat("shard map: slot ", s, " has no owner"));
    }
  }
  return m;
}

std::string EncodeSlotBitmap(const std::vector<bool>& slots) {
  std::string bytes(kNumSlots / 8, '\0');
  for (uint32_t s = 0; s < kNumSlots && s < slots.size(); ++s) {
    if (slots[s]) bytes[s / 8] = static_cast<char>(bytes[s / 8] | (1 << (s % 8)));
  }
  return bytes;
}

absl::StatusOr<std::vector<bool>> DecodeSlotBitmap(const std::string& bytes) {
  if (bytes.size() != kNumSlots / 8) {
    return absl::InvalidArgumentError(absl::StrCat("owned_slots is ", bytes.size(), " bytes; want ",
                                                   kNumSlots / 8, " (one bit per slot)"));
  }
  std::vector<bool> slots(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) slots[s] = (bytes[s / 8] >> (s % 8)) & 1;
  return slots;
}

}  // namespace ps
