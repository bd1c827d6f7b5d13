// A compact hash index from a sparse key to its row's handle in a RowArena, for the rows of one
// table in one slot. The key lives in the row itself (its first 8 bytes), not in the index.
#ifndef PS_SERVER_INTERNAL_ROW_INDEX_H_
#define PS_SERVER_INTERNAL_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "server/internal/prefetch.h"
#include "server/internal/row_arena.h"

namespace ps {

// Open addressing with linear probing over packed 5-byte buckets: a control byte (empty, or 7
// bits of the key's hash) and the 4-byte row handle beside it, so that a lookup reads one cache
// line of buckets (rarely two) and then the row, whose key it compares only where the 7 bits
// match (a false match is 1 in 128). Buckets are 3/8 to 3/4 full: about 7-13 bytes a row.
// Erase shifts the following entries back (no tombstones). Thread-compatible: the caller
// serializes (the slot's lock).
class RowIndex {
 public:
  RowIndex() = default;
  ~RowIndex();
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;

  // The key a row holds (its first 8 bytes).
  static uint64_t KeyOf(const char* row) {
    uint64_t key;
    std::memcpy(&key, row, sizeof(key));
    return key;
  }
  static uint64_t Hash(uint64_t key) {
    // A different mix from SlotOf's: keys of one slot share its bits.
    uint64_t z = key ^ 0x2545f4914f6cdd1dULL;
    z = (z ^ (z >> 32)) * 0xd6e8feb86659fd93ULL;
    z = (z ^ (z >> 32)) * 0xd6e8feb86659fd93ULL;
    return z ^ (z >> 32);
  }

  // The handle of `key`'s row, or RowArena::kNoRow.
  uint32_t Find(const RowArena& arena, uint64_t key) const;
  // Fetches the control bytes where `key` would be into cache (a lookup soon after costs less).
  void Prefetch(uint64_t key) const {
    if (capacity_ != 0) PrefetchRead(Bucket(Position(Hash(key))));
  }
  // Fetches the row `key` probably has (the first whose control byte matches) into cache: after
  // Prefetch, once its buckets arrived, so that Find then finds the row's key in cache.
  void PrefetchRow(const RowArena& arena, uint64_t key) const {
    if (size_ == 0) return;
    const uint64_t hash = Hash(key);
    const uint8_t tag = Tag(hash);
    for (size_t i = Position(hash);; i = (i + 1) & (capacity_ - 1)) {
      const uint8_t c = Ctrl(i);
      if (c == kEmpty) return;
      if (c == tag) {
        PrefetchRead(arena.At(RowAt(i)));
        return;
      }
    }
  }
  // Adds `row`, whose first 8 bytes hold its key (not in the index yet). May grow the index,
  // reading the keys of its rows. Returns false (nothing added) if no memory was to be had.
  bool Insert(const RowArena& arena, uint32_t row);
  // Removes `key`; returns its row's handle (kNoRow if absent). The row itself is the caller's.
  uint32_t Erase(const RowArena& arena, uint64_t key);
  // Forgets every row (the rows themselves are the caller's) and frees the buckets.
  void Clear();

  size_t size() const { return size_; }
  // Bytes of the buckets.
  size_t bytes() const { return capacity_ == 0 ? 0 : capacity_ * kBucketBytes + kPadBytes; }
  // Calls fn(handle) for every row, in bucket order. fn must not change the index.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (Ctrl(i) != kEmpty) fn(RowAt(i));
    }
  }
  // Up to `n` handles of rows in consecutive buckets from bucket `start` % capacity on (wrapping
  // around): a sample of the rows when `start` is random. Returns how many.
  size_t Sample(uint64_t start, uint32_t* out, size_t n) const;

  static constexpr size_t kBucketBytes = 5;
  static constexpr size_t kMinCapacity = 8;

 private:
  static constexpr uint8_t kEmpty = 0;
  static constexpr size_t kPadBytes = 8;  // after the last bucket: its handle is read as 8 bytes
  const uint8_t* Bucket(size_t i) const { return buckets_ + i * kBucketBytes; }
  uint8_t* Bucket(size_t i) { return buckets_ + i * kBucketBytes; }
  uint8_t Ctrl(size_t i) const { return buckets_[i * kBucketBytes]; }
  uint32_t RowAt(size_t i) const {
    uint32_t row;
    std::memcpy(&row, Bucket(i) + 1, sizeof(row));
    return row;
  }
  void Set(size_t i, uint8_t ctrl, uint32_t row) {
    Bucket(i)[0] = ctrl;
    std::memcpy(Bucket(i) + 1, &row, sizeof(row));
  }
  static uint8_t Tag(uint64_t hash) { return static_cast<uint8_t>(0x80u | (hash & 0x7fu)); }
  size_t Position(uint64_t hash) const { return (hash >> 7) & (capacity_ - 1); }
  // Moves every row into `capacity` buckets (a power of two); false if no memory.
  bool Resize(const RowArena& arena, size_t capacity);
  void PlaceNew(uint64_t hash, uint32_t row);  // no growth, key absent

  uint8_t* buckets_ = nullptr;  // capacity_ buckets of 5 bytes (control byte, row handle)
  size_t capacity_ = 0;         // 0 or a power of two >= kMinCapacity
  size_t size_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_ROW_INDEX_H_
