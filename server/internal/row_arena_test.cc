#include "server/internal/row_arena.h"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_ADDRESS__)
#define PS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PS_TEST_ASAN 1
#endif
#endif
#ifdef PS_TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace ps {
namespace {

uintptr_t Addr(const float* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(RowArenaTest, RowsAreDistinctAlignedAndKeepTheirValues) {
  for (size_t row_floats : {1, 3, 8, 16, 24, 64, 192, 1000}) {
    SCOPED_TRACE(row_floats);
    RowArena arena(row_floats);
    std::vector<float*> rows;
    // Enough rows to span several chunks (64 KiB, 128 KiB, ... and 2 MiB ones).
    const size_t n = (size_t{6} << 20) / (row_floats * sizeof(float)) + 1;
    for (size_t i = 0; i < n; ++i) {
      float* row = arena.Allocate();
      ASSERT_NE(row, nullptr);
      EXPECT_EQ(Addr(row) % 16, 0u);
      if (arena.stride() % 64 == 0) {
        EXPECT_EQ(Addr(row) % 64, 0u);
      }
      for (size_t f = 0; f < row_floats; ++f) row[f] = static_cast<float>(i * 7 + f);
      rows.push_back(row);
    }
    // No row overlaps another: every row still holds what was written to it.
    for (size_t i = 0; i < n; ++i) {
      for (size_t f = 0; f < row_floats; ++f) {
        ASSERT_EQ(rows[i][f], static_cast<float>(i * 7 + f)) << "row " << i;
      }
    }
    EXPECT_GE(arena.reserved_bytes(), n * row_floats * sizeof(float));
  }
}

TEST(RowArenaTest, ChunksGrowFrom64KiBTo2MiBAndASmallTableStaysSmall) {
  RowArena arena(64);  // 256-byte rows
  const size_t per_first_chunk = RowArena::kFirstChunkBytes / arena.stride();
  arena.Allocate();
  EXPECT_EQ(arena.reserved_bytes(), RowArena::kFirstChunkBytes);
  for (size_t i = 1; i < per_first_chunk; ++i) arena.Allocate();
  EXPECT_EQ(arena.reserved_bytes(), RowArena::kFirstChunkBytes);  // full
  arena.Allocate();
  EXPECT_EQ(arena.reserved_bytes(), 3 * RowArena::kFirstChunkBytes);  // then 128 KiB
  // 64 + 128 + ... + 2048 KiB, then 2 MiB chunks: 30 MiB of rows take 32 MiB at most.
  for (size_t i = 0; i < (size_t{30} << 20) / arena.stride(); ++i) arena.Allocate();
  EXPECT_LE(arena.reserved_bytes(), size_t{32} << 20);
}

TEST(RowArenaTest, HugeChunksAreAlignedForHugePages) {
  for (bool huge_pages : {true, false}) {  // false: the same chunks, not marked
    RowArena arena(256, huge_pages);       // 1 KiB rows
    // Past the growing chunks (64 KiB .. 1 MiB, 1984 KiB in all), rows come from 2 MiB chunks.
    std::vector<float*> rows;
    for (size_t i = 0; i < 8192; ++i) {
      rows.push_back(arena.Allocate());
      rows.back()[255] = static_cast<float>(i);
    }
    const float* last = rows.back();
    const uintptr_t chunk = Addr(last) & ~(uintptr_t{RowArena::kHugeChunkBytes} - 1);
    // The 2 MiB-aligned block holding the last row is all rows: a chunk starts at the boundary.
    EXPECT_TRUE(absl::c_any_of(rows, [&](float* r) { return Addr(r) == chunk; }));
    EXPECT_EQ(rows[5000][255], 5000.0f);
  }
}

TEST(RowArenaTest, RowsLargerThanAChunkGetTheirOwn) {
  const size_t row_floats = (size_t{5} << 20) / sizeof(float);  // 5 MiB rows
  RowArena arena(row_floats);
  float* a = arena.Allocate();
  float* b = arena.Allocate();
  a[0] = 1;
  a[row_floats - 1] = 2;
  b[0] = 3;
  b[row_floats - 1] = 4;
  EXPECT_EQ(a[0] + a[row_floats - 1] + b[0] + b[row_floats - 1], 10.0f);
  EXPECT_TRUE(Addr(b) >= Addr(a + row_floats) || Addr(a) >= Addr(b + row_floats));
}

TEST(RowArenaTest, FreedRowsAreHandedOutAgainBeforeNewMemory) {
  RowArena arena(8);
  std::vector<float*> rows;
  for (int i = 0; i < 100; ++i) rows.push_back(arena.Allocate());
  const size_t reserved = arena.reserved_bytes();
  const absl::flat_hash_set<float*> freed(rows.begin() + 10, rows.begin() + 60);
  for (float* r : freed) arena.Free(r);
  arena.Free(nullptr);  // ignored
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(freed.contains(arena.Allocate()));
  EXPECT_EQ(arena.reserved_bytes(), reserved);
}

TEST(RowArenaTest, ThreadsAllocateDistinctRows) {
  RowArena arena(16);
  constexpr int kThreads = 4;
  constexpr int kRows = 20000;
  std::vector<std::vector<float*>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRows; ++i) {
        float* row = arena.Allocate();
        row[0] = static_cast<float>(t);
        got[t].push_back(row);
        if (i % 3 == 0) {
          arena.Free(row);
          got[t].pop_back();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::flat_hash_set<float*> all;
  for (int t = 0; t < kThreads; ++t) {
    for (float* row : got[t]) {
      EXPECT_TRUE(all.insert(row).second) << "a row handed out twice";
      EXPECT_EQ(row[0], static_cast<float>(t));
    }
  }
}

#ifdef PS_TEST_ASAN
// Rows share chunks, yet ASan still reports an overrun past a row or a use after Free: the
// bytes after each row and freed rows are poisoned. (Checked with ASan's own query, not by
// crashing: the sanitizer runs fail on any report written, a death test's included.)
TEST(RowArenaTest, RowsAreFencedAndFreedRowsPoisonedUnderAsan) {
  RowArena arena(8);
  float* row = arena.Allocate();
  float* neighbour = arena.Allocate();
  EXPECT_FALSE(__asan_address_is_poisoned(row));
  EXPECT_FALSE(__asan_address_is_poisoned(row + 7));  // the row's last float
  EXPECT_TRUE(__asan_address_is_poisoned(row + 8));   // one past it
  EXPECT_FALSE(__asan_address_is_poisoned(neighbour));
  arena.Free(row);
  EXPECT_TRUE(__asan_address_is_poisoned(row));
  EXPECT_TRUE(__asan_address_is_poisoned(row + 7));
  EXPECT_FALSE(__asan_address_is_poisoned(neighbour));
  EXPECT_EQ(arena.Allocate(), row);  // reused, and usable again
  EXPECT_FALSE(__asan_address_is_poisoned(row + 7));
}
#endif

}  // namespace
}  // namespace ps
