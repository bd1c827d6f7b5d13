// A pushed block's gradients left where gRPC received them: the pieces of the values field in the
// request's slices, applied from there instead of from a protobuf copy (see docs/data-plane.md).
#ifndef PS_SERVER_INTERNAL_SCATTERED_VALUES_H_
#define PS_SERVER_INTERNAL_SCATTERED_VALUES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

// The bytes of one values field, in order, as contiguous pieces at any alignment (a float may
// straddle two pieces). Does not own the memory: the received buffer must outlive it.
class ScatteredValues {
 public:
  // Appends the next `n` bytes (n > 0), which lie at `data`.
  void Add(const char* data, size_t n);
  size_t bytes() const { return start_.back(); }
  size_t num_pieces() const { return data_.size(); }

  // False if a float is NaN or Inf (bytes() must be a multiple of 4).
  bool AllFinite() const;
  // The bytes of the `n` floats from float index `first`, at any alignment (read them with
  // memcpy or unaligned loads): a pointer into the pieces when they lie in one piece, else
  // copied into `scratch` (room for n floats) and `scratch` returned. [first, first + n) must
  // lie within bytes() / 4.
  const void* Floats(size_t first, size_t n, float* scratch) const;
  // Copies every byte to `out` (bytes() of room).
  void CopyTo(char* out) const;

 private:
  std::vector<const char*> data_;
  std::vector<size_t> start_{0};  // byte offset of each piece, then the total
};

}  // namespace ps

#endif  // PS_SERVER_INTERNAL_SCATTERED_VALUES_H_
