#include "server/internal/checkpoint_format.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "gtest/gtest.h"
#include "server/internal/crc32c.h"

namespace ps {
namespace {

constexpr char kPath[] = "/ckpt/shard-0";

std::string RowKey(uint32_t slot, uint32_t table, uint64_t key) {
  char k[kRowKeyBytes];
  PutBigEndian(slot, 2, k);
  PutBigEndian(table, 4, k + 2);
  PutBigEndian(key, 8, k + 6);
  return std::string(k, kRowKeyBytes);
}

std::string RowValue(int64_t updates, const std::vector<float>& floats) {
  std::string v(kUpdateBytes + floats.size() * sizeof(float), '\0');
  PutLittleEndian64(static_cast<uint64_t>(updates), v.data());
  std::memcpy(v.data() + kUpdateBytes, floats.data(), floats.size() * sizeof(float));
  return v;
}

std::string SlotRecord(uint64_t rows, uint32_t crc) {
  char r[kSlotRecordBytes];
  PutBigEndian(rows, 8, r);
  PutBigEndian(crc, 4, r + 8);
  return std::string(r, kSlotRecordBytes);
}

class SlotDecoderTest : public ::testing::Test {
 protected:
  const std::string path_ = kPath;
  const TableMapping tables_ = {{1, Target{1, 2}}};
  const std::vector<bool> wanted_ = std::vector<bool>(kNumSlots, true);
  const ShardRead shard_{path_, tables_, /*remap=*/false, wanted_, /*last_table=*/1};
};

TEST_F(SlotDecoderTest, RowsMatchingTheSlotRecordAreCollected) {
  const std::string k0 = RowKey(3, 1, 10), v0 = RowValue(2, {0.5f, -1.0f});
  const std::string k1 = RowKey(3, 1, 11), v1 = RowValue(1, {4.0f, 8.0f});
  uint32_t crc = Crc32cExtend(0, k0.data(), k0.size());
  crc = Crc32cExtend(crc, v0.data(), v0.size());
  crc = Crc32cExtend(crc, k1.data(), k1.size());
  crc = Crc32cExtend(crc, v1.data(), v1.size());
  auto decoder = SlotDecoder::Start(shard_, 3, SlotRecord(2, crc));
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  RowCollector rows;
  ASSERT_TRUE(decoder->Add(k0, v0, rows).ok());
  ASSERT_TRUE(decoder->Add(k1, v1, rows).ok());
  EXPECT_TRUE(decoder->Finish().ok()) << decoder->Finish();
  const CheckpointRows out = rows.Take();
  ASSERT_EQ(out.rows.size(), 1u);
  EXPECT_EQ(out.num_rows, 2u);
  EXPECT_EQ(out.rows[0].keys, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(out.rows[0].updates, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(out.rows[0].row(1)[1], 8.0f);
}

TEST_F(SlotDecoderTest, MalformedRecordsAreDataLossNamingShardAndSlot) {
  EXPECT_EQ(SlotDecoder::Start(shard_, 3, "short").status().code(), absl::StatusCode::kDataLoss);
  auto decoder = SlotDecoder::Start(shard_, 3, SlotRecord(1, 0));
  ASSERT_TRUE(decoder.ok());
  RowCollector rows;
  const absl::Status s = decoder->Add("key", RowValue(0, {1.0f, 2.0f}), rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checkpoint shard /ckpt/shard-0: slot 3:"), std::string::npos) << s;
  // A row of the wrong width for its table.
  EXPECT_EQ(decoder->Add(RowKey(3, 1, 1), RowValue(0, {1.0f}), rows).code(),
            absl::StatusCode::kDataLoss);
}

// Found by fuzz_checkpoint_reader (corpus: regression-slot-record-claims-2-40-rows): a slot
// record claiming 2^40 rows made the reader reserve, and with the bulk allocator populate,
// 1 GiB for the slot's first table before the CRC check failed.
TEST_F(SlotDecoderTest, ASlotRecordThatLiesReservesAtMostkMaxReserveBytes) {
  auto decoder = SlotDecoder::Start(shard_, 3, SlotRecord(uint64_t{1} << 40, 0));
  ASSERT_TRUE(decoder.ok());
  RowCollector rows;
  ASSERT_TRUE(decoder->Add(RowKey(3, 1, 7), RowValue(0, {1.0f, 2.0f}), rows).ok());
  EXPECT_EQ(decoder->Finish().code(), absl::StatusCode::kDataLoss);
  const CheckpointRows out = rows.Take();
  ASSERT_EQ(out.rows.size(), 1u);
  EXPECT_LE(out.rows[0].data.capacity() * sizeof(float), kMaxReserveBytes);
  EXPECT_LE(out.rows[0].keys.capacity() * 2 * sizeof(float), kMaxReserveBytes);
}

}  // namespace
}  // namespace ps
