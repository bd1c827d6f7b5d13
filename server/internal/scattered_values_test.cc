// Gradients read where they arrived: whatever the pieces' sizes and alignment, the floats read
// are the bytes sent, and a NaN or Inf cut in two by a piece boundary is still found.
#include "server/internal/scattered_values.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace ps {
namespace {

// `bytes` cut into pieces of `piece` bytes, each at a misaligned address (one byte in).
struct Cut {
  std::vector<std::string> storage;
  ScatteredValues values;
  Cut(const std::string& bytes, size_t piece, size_t misalign) {
    for (size_t at = 0; at < bytes.size(); at += piece) {
      storage.push_back(std::string(misalign, 'x') +
                        bytes.substr(at, std::min(piece, bytes.size() - at)));
    }
    for (const std::string& s : storage) values.Add(s.data() + misalign, s.size() - misalign);
  }
};

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(ScatteredValuesTest, RowsReadBackAsSentWhateverThePieces) {
  std::vector<float> floats(64 * 5);
  std::iota(floats.begin(), floats.end(), -7.25f);
  const std::string bytes = Bytes(floats);
  for (size_t piece : {1, 3, 4, 7, 64, 256, 1000, 4096}) {
    for (size_t misalign : {0, 1, 2}) {
      Cut cut(bytes, piece, misalign);
      ASSERT_EQ(cut.values.bytes(), bytes.size());
      std::vector<float> scratch(64);
      for (size_t row = 0; row < 5; ++row) {
        const void* got = cut.values.Floats(row * 64, 64, scratch.data());
        EXPECT_EQ(std::memcmp(got, &floats[row * 64], 64 * sizeof(float)), 0)
            << "piece " << piece << " misalign " << misalign << " row " << row;
      }
      std::string copy(bytes.size(), '\0');
      cut.values.CopyTo(copy.data());
      EXPECT_EQ(copy, bytes);
      EXPECT_TRUE(cut.values.AllFinite());
    }
  }
}

TEST(ScatteredValuesTest, RowsInOnePieceAreReadInPlaceAtAnyAlignment) {
  std::vector<float> floats(32, 1.0f);
  ScatteredValues values;
  values.Add(reinterpret_cast<const char*>(floats.data()), 64);
  values.Add(reinterpret_cast<const char*>(floats.data()) + 64, 64);
  std::vector<float> scratch(8);
  EXPECT_EQ(values.Floats(8, 8, scratch.data()), floats.data() + 8);
  EXPECT_EQ(values.Floats(16, 8, scratch.data()), floats.data() + 16);
  EXPECT_EQ(values.Floats(12, 8, scratch.data()), scratch.data());  // straddles the two pieces
  // A piece one byte past an aligned address: its rows are still read where they are.
  std::string bytes(1 + 64, 'x');
  ScatteredValues odd;
  odd.Add(bytes.data() + 1, 64);
  EXPECT_EQ(odd.Floats(0, 8, scratch.data()), bytes.data() + 1);
  EXPECT_EQ(odd.Floats(8, 8, scratch.data()), bytes.data() + 1 + 32);
}

TEST(ScatteredValuesTest, NonFiniteFloatIsFoundAnywhereEvenCutInTwo) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (size_t at : {0, 1, 6, 17}) {
      std::vector<float> floats(18, 2.0f);
      floats[at] = bad;
      for (size_t piece : {1, 2, 3, 5, 8, 13, 100}) {
        Cut cut(Bytes(floats), piece, 1);
        EXPECT_FALSE(cut.values.AllFinite()) << "at " << at << " piece " << piece;
      }
    }
  }
  EXPECT_TRUE(ScatteredValues().AllFinite());
}

}  // namespace
}  // namespace ps
