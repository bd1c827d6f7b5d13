// The framing of the fuzz targets' inputs: a byte, or a field of [length u16 LE][bytes]
// (the length clipped to what is left). Seeds are written in it by tests/fuzz/make_corpus.sh.
#ifndef PS_TESTS_FUZZ_FUZZ_INPUT_H_
#define PS_TESTS_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ps {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return at_ == size_; }
  // 0 once the input is used up.
  uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::string Field() {
    const size_t n = std::min<size_t>(Byte() | (size_t{Byte()} << 8), size_ - at_);
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace ps

#endif  // PS_TESTS_FUZZ_FUZZ_INPUT_H_
