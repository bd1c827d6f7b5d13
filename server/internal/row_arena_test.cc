#include "server/internal/row_arena.h"

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

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

uintptr_t Addr(const char* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(RowArenaTest, RowsAreDistinctAlignedAndKeepTheirBytes) {
  for (size_t row_bytes : {1, 12, 32, 80, 96, 272, 4000}) {
    SCOPED_TRACE(row_bytes);
    RowArena arena(row_bytes);
    std::vector<uint32_t> rows;
    // Enough rows to span several chunks.
    const size_t n = (size_t{6} << 20) / row_bytes + 1;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t row = arena.Allocate();
      ASSERT_NE(row, RowArena::kNoRow);
      EXPECT_EQ(Addr(arena.At(row)) % 16, 0u);
      if (arena.stride() % 64 == 0) {
        EXPECT_EQ(Addr(arena.At(row)) % 64, 0u);
      }
      std::memset(arena.At(row), static_cast<int>(i % 251), row_bytes);
      rows.push_back(row);
    }
    // No row overlaps another: every row still holds what was written to it.
    for (size_t i = 0; i < n; ++i) {
      const char* p = arena.At(rows[i]);
      ASSERT_EQ(p[0], static_cast<char>(i % 251)) << "row " << i;
      ASSERT_EQ(p[row_bytes - 1], static_cast<char>(i % 251)) << "row " << i;
    }
    EXPECT_EQ(arena.rows_in_use(), n);
    EXPECT_EQ(arena.carved_bytes(), n * arena.stride());
  }
}

TEST(RowArenaTest, HandlesCountUpAndChunksHoldAPowerOfTwoRows) {
  RowArena arena(80);
  const size_t stride = arena.stride();  // 80 (112 under ASan: a fence after each row)
  EXPECT_GE(stride, 80u);
  const size_t per_chunk = arena.rows_per_chunk();
  EXPECT_EQ(per_chunk & (per_chunk - 1), 0u);
  EXPECT_LE(per_chunk * arena.stride(), RowArena::kChunkBytes);
  EXPECT_GT(2 * per_chunk * arena.stride(), RowArena::kChunkBytes);
  for (uint32_t i = 0; i < 3 * per_chunk; ++i) EXPECT_EQ(arena.Allocate(), i);
  // Consecutive rows of one chunk lie one stride apart.
  EXPECT_EQ(static_cast<size_t>(arena.At(1) - arena.At(0)), stride);
  EXPECT_EQ(static_cast<size_t>(arena.At(per_chunk + 5) - arena.At(per_chunk)), 5 * stride);
}

TEST(RowArenaTest, ASmallTableTouchesFewPages) {
  RowArena arena(80);
  for (int i = 0; i < 10; ++i) arena.Allocate();
  EXPECT_EQ(arena.carved_bytes(), 10 * arena.stride());  // the chunk's other pages: never written
}

TEST(RowArenaTest, HugePageChunksAreAligned) {
  RowArena arena(1024, /*huge_pages=*/true);
  const uint32_t first = arena.Allocate();
  EXPECT_EQ(Addr(arena.At(first)) % RowArena::kChunkBytes, 0u);
  for (size_t i = 1; i < arena.rows_per_chunk(); ++i) arena.Allocate();
  const uint32_t next_chunk = arena.Allocate();
  EXPECT_EQ(Addr(arena.At(next_chunk)) % RowArena::kChunkBytes, 0u);
}

TEST(RowArenaTest, RowsLargerThanAChunkGetTheirOwn) {
  const size_t row_bytes = size_t{5} << 20;  // 5 MiB rows
  RowArena arena(row_bytes);
  EXPECT_EQ(arena.rows_per_chunk(), 1u);
  char* a = arena.At(arena.Allocate());
  char* b = arena.At(arena.Allocate());
  a[0] = 1;
  a[row_bytes - 1] = 2;
  b[0] = 3;
  b[row_bytes - 1] = 4;
  EXPECT_EQ(a[0] + a[row_bytes - 1] + b[0] + b[row_bytes - 1], 10);
  EXPECT_TRUE(Addr(b) >= Addr(a + row_bytes) || Addr(a) >= Addr(b + row_bytes));
}

TEST(RowArenaTest, FreedRowsAreHandedOutAgainBeforeNewMemory) {
  RowArena arena(32);
  std::vector<uint32_t> rows;
  for (int i = 0; i < 100; ++i) rows.push_back(arena.Allocate());
  const size_t carved = arena.carved_bytes();
  const absl::flat_hash_set<uint32_t> freed(rows.begin() + 10, rows.begin() + 60);
  for (uint32_t r : freed) arena.Free(r);
  arena.Free(RowArena::kNoRow);  // ignored
  EXPECT_EQ(arena.rows_in_use(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(freed.contains(arena.Allocate()));
  EXPECT_EQ(arena.carved_bytes(), carved);
  EXPECT_EQ(arena.rows_in_use(), 100u);
}

#ifndef PS_TEST_ASAN  // ASan would write the shadow of every row handed out: 128 GiB here
TEST(RowArenaTest, AFullArenaSaysSo) {
  // Rows of 256 MiB: 2^40 bytes hold 4096 of them (never touched: no memory is used).
  RowArena arena(size_t{256} << 20);
  EXPECT_EQ(arena.max_rows(), 4096u);
  for (int i = 0; i < 4096; ++i) ASSERT_NE(arena.Allocate(), RowArena::kNoRow) << i;
  EXPECT_EQ(arena.Allocate(), RowArena::kNoRow);
}
#endif

TEST(RowArenaTest, ThreadsAllocateDistinctRowsAndReadThemWithoutALock) {
  RowArena arena(64);
  constexpr int kThreads = 4;
  constexpr int kRows = 40000;  // several chunks
  std::vector<std::vector<uint32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRows; ++i) {
        const uint32_t row = arena.Allocate();
        arena.At(row)[0] = static_cast<char>(t);
        got[t].push_back(row);
        if (i % 3 == 0) {
          arena.Free(row);
          got[t].pop_back();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::flat_hash_set<uint32_t> all;
  for (int t = 0; t < kThreads; ++t) {
    for (uint32_t row : got[t]) {
      EXPECT_TRUE(all.insert(row).second) << "a row handed out twice";
      EXPECT_EQ(arena.At(row)[0], static_cast<char>(t));
    }
  }
}

#ifdef PS_TEST_ASAN
// Rows share chunks, yet ASan still reports an overrun past a row or a use after Free: the
// bytes after each row and freed rows are poisoned. (Checked with ASan's own query, not by
// crashing: the sanitizer runs fail on any report written, a death test's included.)
TEST(RowArenaTest, RowsAreFencedAndFreedRowsPoisonedUnderAsan) {
  RowArena arena(32);
  const uint32_t row = arena.Allocate();
  const uint32_t neighbour = arena.Allocate();
  char* p = arena.At(row);
  EXPECT_FALSE(__asan_address_is_poisoned(p));
  EXPECT_FALSE(__asan_address_is_poisoned(p + 31));  // the row's last byte
  EXPECT_TRUE(__asan_address_is_poisoned(p + 32));   // one past it
  EXPECT_FALSE(__asan_address_is_poisoned(arena.At(neighbour)));
  arena.Free(row);
  EXPECT_TRUE(__asan_address_is_poisoned(p));
  EXPECT_TRUE(__asan_address_is_poisoned(p + 31));
  EXPECT_FALSE(__asan_address_is_poisoned(arena.At(neighbour)));
  EXPECT_EQ(arena.Allocate(), row);  // reused, and usable again
  EXPECT_FALSE(__asan_address_is_poisoned(p + 31));
}
#endif

}  // namespace
}  // namespace ps
