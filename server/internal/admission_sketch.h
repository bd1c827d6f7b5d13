// A count-min sketch of 8-bit counters: how often keys were seen, approximately, in little
// memory (admission of a sparse table's keys).
#ifndef PS_SERVER_INTERNAL_ADMISSION_SKETCH_H_
#define PS_SERVER_INTERNAL_ADMISSION_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ps {

// Two rows of `width` counters (a power of two), each key counted in one counter per row under
// two independent hashes; its estimate is the smaller count, which can only err upwards (keys
// that share both counters). Counters stop at 255. Memory is taken at the first Add.
// Thread-compatible: the caller serializes (the slot's lock).
class AdmissionSketch {
 public:
  static constexpr uint32_t kMaxCount = 255;
  static constexpr int kRows = 2;

  AdmissionSketch() = default;
  // Counts one more sighting of `key`; returns its estimate after it. `width`: counters per row
  // (a power of two), fixed at the first call.
  uint32_t Add(uint64_t key, uint32_t width);
  // The estimate of `key` (0 before any Add).
  uint32_t Estimate(uint64_t key) const;
  // Halves every counter (decay: old sightings count less).
  void Halve();
  size_t bytes() const { return counters_ == nullptr ? 0 : size_t{kRows} * width_; }

 private:
  uint32_t Index(uint64_t key, int row) const;
  std::unique_ptr<uint8_t[]> counters_;
  uint32_t width_ = 0;
};

inline uint32_t AdmissionSketch::Index(uint64_t key, int row) const {
  uint64_t z = key + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(row + 7);
  z = (z ^ (z >> 31)) * 0x7fb5d329728ea185ULL;
  z = (z ^ (z >> 27)) * 0x81dadef4bc2dd44dULL;
  z ^= z >> 33;
  return static_cast<uint32_t>(row) * width_ + static_cast<uint32_t>(z & (width_ - 1));
}

inline uint32_t AdmissionSketch::Add(uint64_t key, uint32_t width) {
  if (counters_ == nullptr) {
    width_ = width;
    counters_ = std::make_unique<uint8_t[]>(size_t{kRows} * width_);  // zeroed
  }
  uint32_t estimate = kMaxCount;
  for (int r = 0; r < kRows; ++r) {
    uint8_t& c = counters_[Index(key, r)];
    if (c < kMaxCount) ++c;
    if (c < estimate) estimate = c;
  }
  return estimate;
}

inline uint32_t AdmissionSketch::Estimate(uint64_t key) const {
  if (counters_ == nullptr) return 0;
  uint32_t estimate = kMaxCount;
  for (int r = 0; r < kRows; ++r) {
    const uint32_t c = counters_[Index(key, r)];
    if (c < estimate) estimate = c;
  }
  return estimate;
}

inline void AdmissionSketch::Halve() {
  for (size_t i = 0; i < bytes(); ++i) counters_[i] >>= 1;
}

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_ADMISSION_SKETCH_H_
