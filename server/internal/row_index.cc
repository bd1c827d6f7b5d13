#include "server/internal/row_index.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace ps {

RowIndex::~RowIndex() { Clear(); }

void RowIndex::Clear() {
  std::free(buckets_);
  buckets_ = nullptr;
  capacity_ = 0;
  size_ = 0;
}

uint32_t RowIndex::Find(const RowArena& arena, uint64_t key) const {
  if (size_ == 0) return RowArena::kNoRow;
  const uint64_t hash = Hash(key);
  const uint8_t tag = Tag(hash);
  const size_t mask = capacity_ - 1;
  for (size_t i = Position(hash);; i = (i + 1) & mask) {
    const uint8_t c = Ctrl(i);
    if (c == kEmpty) return RowArena::kNoRow;
    if (c == tag && KeyOf(arena.At(RowAt(i))) == key) return RowAt(i);
  }
}

void RowIndex::PlaceNew(uint64_t hash, uint32_t row) {
  const size_t mask = capacity_ - 1;
  size_t i = Position(hash);
  while (Ctrl(i) != kEmpty) i = (i + 1) & mask;
  Set(i, Tag(hash), row);
  ++size_;
}

bool RowIndex::Resize(const RowArena& arena, size_t capacity) {
  auto* block = static_cast<uint8_t*>(std::malloc(capacity * kBucketBytes + kPadBytes));
  if (block == nullptr) return false;
  std::memset(block, 0, capacity * kBucketBytes + kPadBytes);  // every control byte kEmpty
  uint8_t* old = buckets_;
  const size_t old_capacity = capacity_;
  buckets_ = block;
  capacity_ = capacity;
  size_ = 0;
  auto old_row = [&](size_t i) {
    uint32_t row;
    std::memcpy(&row, old + i * kBucketBytes + 1, sizeof(row));
    return row;
  };
  // The keys are read from the rows: fetched a few entries ahead, so the misses overlap.
  constexpr size_t kAhead = 8;
  size_t ahead = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i * kBucketBytes] == kEmpty) continue;
    for (ahead = std::max(ahead, i + 1); ahead < old_capacity && ahead < i + kAhead; ++ahead) {
      if (old[ahead * kBucketBytes] != kEmpty) PrefetchRead(arena.At(old_row(ahead)));
    }
    PlaceNew(Hash(KeyOf(arena.At(old_row(i)))), old_row(i));
  }
  std::free(old);
  return true;
}

bool RowIndex::Insert(const RowArena& arena, uint32_t row) {
  // Grown at 3/4 full: linear probing's misses stay short (a few control bytes).
  if (capacity_ == 0 || (size_ + 1) * 4 > capacity_ * 3) {
    if (!Resize(arena, capacity_ == 0 ? kMinCapacity : capacity_ * 2)) return false;
  }
  PlaceNew(Hash(KeyOf(arena.At(row))), row);
  return true;
}

uint32_t RowIndex::Erase(const RowArena& arena, uint64_t key) {
  if (size_ == 0) return RowArena::kNoRow;
  const uint64_t hash = Hash(key);
  const uint8_t tag = Tag(hash);
  const size_t mask = capacity_ - 1;
  size_t i = Position(hash);
  for (;; i = (i + 1) & mask) {
    const uint8_t c = Ctrl(i);
    if (c == kEmpty) return RowArena::kNoRow;
    if (c == tag && KeyOf(arena.At(RowAt(i))) == key) break;
  }
  const uint32_t erased = RowAt(i);
  // Backward shift: entries after the hole that may live there (their home is not in the
  // cyclic range (hole, entry]) move into it, until an empty bucket ends the run.
  size_t hole = i;
  for (size_t j = (hole + 1) & mask; Ctrl(j) != kEmpty; j = (j + 1) & mask) {
    const size_t home = Position(Hash(KeyOf(arena.At(RowAt(j)))));
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    Set(hole, Ctrl(j), RowAt(j));
    hole = j;
  }
  Set(hole, kEmpty, 0);
  --size_;
  return erased;
}

size_t RowIndex::Sample(uint64_t start, uint32_t* out, size_t n) const {
  size_t found = 0;
  if (size_ == 0) return 0;
  const size_t mask = capacity_ - 1;
  for (size_t i = start & mask, seen = 0; found < n && seen < capacity_; i = (i + 1) & mask) {
    ++seen;
    if (Ctrl(i) != kEmpty) out[found++] = RowAt(i);
  }
  return found;
}

}  // namespace ps
