#include "common/shard_map.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ShardMapTest, SlotsSpreadEvenlyOverDenseKeys) {
  std::vector<int> count(kNumSlots, 0);
  for (uint64_t k = 0; k < 102400; ++k) ++count[SlotOf(3, k)];
  for (int c : count) {
    EXPECT_GT(c, 50);
    EXPECT_LT(c, 150);
  }
  EXPECT_NE(SlotOf(1, 5), SlotOf(2, 5));  // tables do not share placement
}

TEST(ShardMapTest, RoundRobinBalances) {
  ShardMap m = ShardMap::RoundRobin({"a", "b", "c"});
  int per[3] = {0, 0, 0};
  for (uint32_t s = 0; s < kNumSlots; ++s) ++per[m.OwnerOfSlot(s)];
  EXPECT_EQ(per[0], 342);
  EXPECT_EQ(per[1], 341);
  EXPECT_EQ(per[2], 341);
  EXPECT_EQ(m.SlotsOf(1)[1], true);
  EXPECT_EQ(m.SlotsOf(1)[2], false);
}

TEST(ShardMapTest, ParsesFile) {
  auto m = ShardMap::Parse("# two servers\nhost1:7100 0-511\nhost2:7100 512-1000 1001-1023\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->servers().size(), 2u);
  EXPECT_EQ(m->OwnerOfSlot(511), 0);
  EXPECT_EQ(m->OwnerOfSlot(1023), 1);
}

TEST(ShardMapTest, RejectsGapsOverlapsAndJunk) {
  EXPECT_NE(ShardMap::Parse("h:1 0-1022\n").status().message().find("slot 1023 has no owner"),
            std::string::npos);
  EXPECT_NE(ShardMap::Parse("h:1 0-1023\ng:1 5-5\n").status().message().find("owned twice"),
            std::string::npos);
  EXPECT_FALSE(ShardMap::Parse("h:1 0-2000\n").ok());
  EXPECT_FALSE(ShardMap::Parse("h:1 x-y\n").ok());
  EXPECT_FALSE(ShardMap::Parse("h:1\n").ok());
  EXPECT_EQ(ShardMap::FromFile("/nonexistent/map").status().code(), absl::StatusCode::kNotFound);
}

TEST(ShardMapTest, SlotBitmapRoundTrips) {
  ShardMap m = ShardMap::RoundRobin({"a", "b", "c"});
  const std::string bytes = EncodeSlotBitmap(m.SlotsOf(2));
  ASSERT_EQ(bytes.size(), 128u);
  auto slots = DecodeSlotBitmap(bytes);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(*slots, m.SlotsOf(2));
  EXPECT_EQ(DecodeSlotBitmap(std::string(127, '\0')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(ShardMapTest, FromOwnersRoutesEverySlotToItsOwner) {
  std::vector<uint32_t> owners(kNumSlots);
  for (uint32_t s = 0; s < kNumSlots; ++s) owners[s] = s < 10 ? 1 : 0;
  auto map = ShardMap::FromOwners({"a:1", "b:2"}, owners, 7);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->epoch(), 7u);
  EXPECT_EQ(map->OwnerOfSlot(3), 1);
  EXPECT_EQ(map->OwnerOfSlot(500), 0);
  const std::vector<bool> second = map->SlotsOf(1);
  EXPECT_EQ(std::count(second.begin(), second.end(), true), 10);
}

TEST(ShardMapTest, FromOwnersRejectsBadMaps) {
  EXPECT_EQ(ShardMap::FromOwners({"a:1"}, std::vector<uint32_t>(5, 0), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint32_t> owners(kNumSlots, 0);
  owners[9] = 2;
  auto bad = ShardMap::FromOwners({"a:1", "b:2"}, owners, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("slot 9"), std::string::npos);
}

}  // namespace
}  // namespace ps
