// PullAnswer: the bytes it writes are protobuf's own serialization of the PullResponse, for
// plain, encoded and delta blocks.
#include "server/pull_answer.h"

#include <google/protobuf/descriptor.h>

#include <string>
#include <vector>

#include "common/testing/key_blocks.h"
#include "common/value_codec.h"
#include "gtest/gtest.h"
#include "server/table_store.h"

namespace ps::pull_answer_test {
namespace {

using google::protobuf::FieldDescriptor;
using testing::Block;
using v1::KeyBlock;
using v1::PullResponse;

constexpr char kJob[] = "job";
constexpr float kInitial = 0.5f;

v1::TableSpec Dense(uint32_t id, v1::ValueCodec pull_codec = v1::CODEC_NONE, bool delta = false) {
  v1::TableSpec spec;
  spec.set_table_id(id);
  spec.set_name("t");
  spec.set_job_id(kJob);
  spec.set_kind(v1::DENSE);
  spec.set_dim(4);
  spec.set_num_rows(8);
  spec.mutable_initializer()->set_kind(v1::InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(kInitial);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_pull_codec()->set_codec(pull_codec);
  spec.mutable_pull_codec()->set_delta(delta);
  return spec;
}

// The answer to `blocks` (resolved against `store`), as written, and parsed.
std::string Answer(TableStore& store, const google::protobuf::RepeatedPtrField<KeyBlock>& blocks,
                   int64_t min_clock, int64_t wait_micros) {
  std::vector<TableStore::BlockView> views(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    const absl::Status s = store.Resolve(kJob, blocks[i], /*with_values=*/false, &views[i]);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return "";
  }
  absl::StatusOr<PullAnswer> answer =
      PullAnswer::Read(&store, blocks, views, min_clock, wait_micros);
  EXPECT_TRUE(answer.ok()) << answer.status();
  if (!answer.ok()) return "";
  std::string bytes(answer->bytes(), '\0');
  const absl::Status s = answer->Write(bytes.data());
  EXPECT_TRUE(s.ok()) << s;
  return bytes;
}

TEST(PullAnswerTest, PlainAndEncodedBlocksAreProtobufsOwnBytes) {
  TableStore store(TableStoreOptions{});
  ASSERT_TRUE(store.CreateTable(Dense(1)).ok());
  ASSERT_TRUE(store.CreateTable(Dense(2, v1::CODEC_FP16)).ok());
  google::protobuf::RepeatedPtrField<KeyBlock> blocks;
  *blocks.Add() = Block(1, {0, 3});
  *blocks.Add() = Block(2, {5});
  blocks[1].set_codec(v1::CODEC_FP16);
  *blocks.Add() = Block(1, {});  // no keys: an empty block, as protobuf writes it

  PullResponse want;
  KeyBlock* plain = want.add_blocks();
  plain->set_table_id(1);
  const std::vector<float> initial(8, kInitial);
  plain->set_values(std::string(reinterpret_cast<const char*>(initial.data()), 8 * sizeof(float)));
  KeyBlock* encoded = want.add_blocks();
  encoded->set_table_id(2);
  encoded->set_codec(v1::CODEC_FP16);
  EncodeValueBlock(Dense(2, v1::CODEC_FP16).pull_codec(), std::vector<float>(4, kInitial),
                   encoded->mutable_values());
  want.add_blocks()->set_table_id(1);
  want.set_min_clock(7);
  want.set_wait_micros(300);
  EXPECT_EQ(Answer(store, blocks, 7, 300), want.SerializeAsString());
  // Zeros are left out, as protobuf leaves them out.
  want.clear_min_clock();
  want.clear_wait_micros();
  EXPECT_EQ(Answer(store, blocks, 0, 0), want.SerializeAsString());
}

TEST(PullAnswerTest, DeltaBlocksCarryTheirTokenAndOnlyWhatChanged) {
  TableStore store(TableStoreOptions{});
  ASSERT_TRUE(store.CreateTable(Dense(3, v1::CODEC_NONE, /*delta=*/true)).ok());
  google::protobuf::RepeatedPtrField<KeyBlock> blocks;
  *blocks.Add() = Block(3, {0, 1, 2, 3, 4, 5, 6, 7});

  PullResponse whole;
  ASSERT_TRUE(whole.ParseFromString(Answer(store, blocks, 0, 0)));
  ASSERT_EQ(whole.blocks_size(), 1);
  EXPECT_FALSE(whole.blocks(0).delta());
  EXPECT_NE(whole.blocks(0).since(), 0u);
  EXPECT_EQ(whole.blocks(0).values().size(), 32 * sizeof(float));

  // Nothing changed since that token: an empty delta block, with a newer token.
  blocks[0].set_since(whole.blocks(0).since());
  const std::string bytes = Answer(store, blocks, 0, 0);
  PullResponse delta;
  ASSERT_TRUE(delta.ParseFromString(bytes));
  ASSERT_EQ(delta.blocks_size(), 1);
  EXPECT_TRUE(delta.blocks(0).delta());
  EXPECT_GT(delta.blocks(0).since(), whole.blocks(0).since());
  std::vector<uint32_t> indices;
  std::vector<float> values;
  ASSERT_TRUE(
      DecodeDeltaBlock(v1::CODEC_NONE, delta.blocks(0).values(), 32, &indices, &values).ok());
  EXPECT_TRUE(indices.empty());
  EXPECT_EQ(bytes, delta.SerializeAsString());  // protobuf's own bytes
}

// The wire types PullAnswer (and the in-place push reader) write and read each field with are
// those of the fields' declared types; the C++ types (static_asserts beside the code) cannot
// tell a fixed64 from a uint64.
TEST(PullAnswerTest, WireTypesAreTheDeclaredOnes) {
  const auto type = [](const google::protobuf::Descriptor* d, int number) {
    const FieldDescriptor* f = d->FindFieldByNumber(number);
    return f == nullptr ? FieldDescriptor::Type(0) : f->type();
  };
  const google::protobuf::Descriptor* block = KeyBlock::descriptor();
  EXPECT_EQ(type(block, KeyBlock::kTableIdFieldNumber), FieldDescriptor::TYPE_UINT32);
  EXPECT_EQ(type(block, KeyBlock::kKeysFieldNumber), FieldDescriptor::TYPE_BYTES);
  EXPECT_EQ(type(block, KeyBlock::kValuesFieldNumber), FieldDescriptor::TYPE_BYTES);
  EXPECT_EQ(type(block, KeyBlock::kCodecFieldNumber), FieldDescriptor::TYPE_ENUM);
  EXPECT_EQ(type(block, KeyBlock::kMomentumFieldNumber), FieldDescriptor::TYPE_FLOAT);
  EXPECT_EQ(type(block, KeyBlock::kSinceFieldNumber), FieldDescriptor::TYPE_FIXED64);
  EXPECT_EQ(type(block, KeyBlock::kDeltaFieldNumber), FieldDescriptor::TYPE_BOOL);
  const google::protobuf::Descriptor* answer = PullResponse::descriptor();
  EXPECT_EQ(type(answer, PullResponse::kBlocksFieldNumber), FieldDescriptor::TYPE_MESSAGE);
  EXPECT_EQ(type(answer, PullResponse::kMinClockFieldNumber), FieldDescriptor::TYPE_INT64);
  EXPECT_EQ(type(answer, PullResponse::kWaitMicrosFieldNumber), FieldDescriptor::TYPE_INT64);
}

}  // namespace
}  // namespace ps::pull_answer_test
