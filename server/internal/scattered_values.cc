#include "server/internal/scattered_values.h"

#include <algorithm>
#include <cstring>

#include "common/packed_bytes.h"

namespace ps {

void ScatteredValues::Add(const char* data, size_t n) {
  if (n == 0) return;
  data_.push_back(data);
  start_.push_back(start_.back() + n);
}

bool ScatteredValues::AllFinite() const {
  // Whole floats of each piece in place; a float cut by a piece boundary is put together first.
  char carry[sizeof(float)];
  size_t carried = 0;
  for (size_t i = 0; i < data_.size(); ++i) {
    const char* p = data_[i];
    size_t n = start_[i + 1] - start_[i];
    if (carried > 0) {
      const size_t take = std::min(n, sizeof(float) - carried);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      n -= take;
      if (carried < sizeof(float)) continue;
      if (NonFiniteBits(carry, 1) != 0) return false;
      carried = 0;
    }
    const size_t whole = n / sizeof(float);
    if (NonFiniteBits(p, whole) != 0) return false;
    carried = n - whole * sizeof(float);
    std::memcpy(carry, p + whole * sizeof(float), carried);
  }
  return true;
}

const void* ScatteredValues::Floats(size_t first, size_t n, float* scratch) const {
  if (n == 0) return scratch;
  size_t offset = first * sizeof(float);
  size_t left = n * sizeof(float);
  // The piece holding `offset`: the last one starting at or before it.
  size_t i = std::upper_bound(start_.begin(), start_.end(), offset) - start_.begin() - 1;
  if (offset + left <= start_[i + 1]) return data_[i] + (offset - start_[i]);
  char* out = reinterpret_cast<char*>(scratch);
  while (left > 0) {
    const size_t here = std::min(left, start_[i + 1] - offset);
    std::memcpy(out, data_[i] + (offset - start_[i]), here);
    out += here;
    offset += here;
    left -= here;
    ++i;
  }
  return scratch;
}

void ScatteredValues::CopyTo(char* out) const {
  for (size_t i = 0; i < data_.size(); ++i) {
    std::memcpy(out + start_[i], data_[i], start_[i + 1] - start_[i]);
  }
}

}  // namespace ps
