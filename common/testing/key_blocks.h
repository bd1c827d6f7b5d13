// Test support: build KeyBlocks and read packed float values back. Tests only.
#ifndef PS_COMMON_TESTING_KEY_BLOCKS_H_
#define PS_COMMON_TESTING_KEY_BLOCKS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/packed_bytes.h"
#include "ps/v1/types.pb.h"

namespace ps {
namespace testing {

// A block of `table_id` with `keys` and (for pushes) `values`, packed as on the wire.
inline v1::KeyBlock Block(uint32_t table_id, const std::vector<uint64_t>& keys,
                          const std::vector<float>& values = {}) {
  v1::KeyBlock b;
  b.set_table_id(table_id);
  AppendKeys(keys, b.mutable_keys());
  AppendValues(values.data(), values.size(), b.mutable_values());
  return b;
}

// Packed little-endian float32 bytes as floats.
inline std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace testing
}  // namespace ps

#endif  // PS_COMMON_TESTING_KEY_BLOCKS_H_
