#include "worker/daemon/model_zoo.h"

#include "common/zoo_models.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Every model the registry describes (and the scheduler accepts) can be built here.
TEST(ModelZooTest, EveryRegisteredModelHasABuilder) {
  ASSERT_FALSE(ZooModels().empty());
  for (const ZooModel* model : ZooModels()) {
    EXPECT_TRUE(HasBuilder(model->name)) << model->name;
  }
  EXPECT_FALSE(HasBuilder("resnet"));
}

TEST(ModelZooTest, UnknownModelNamesTheZoo) {
  v1::JobSpec spec;
  spec.set_model("resnet");
  auto model = MakeModel(spec);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find(ZooModelNames()), absl::string_view::npos)
      << model.status();
}

// The registry's defaults reach the model: a missing data set is reported under its default
// directory, and bad settings are refused as the scheduler refuses them.
TEST(ModelZooTest, AppliesTheRegistrysDefaultsAndChecks) {
  v1::JobSpec spec;
  spec.set_model("fashion_mlp");
  spec.add_layers(784);
  spec.add_layers(11);
  auto model = MakeModel(spec);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_NE(model.status().message().find("spec.layers"), absl::string_view::npos)
      << model.status();
  spec.set_model("spam_logreg");
  spec.set_hash_bits(31);
  model = MakeModel(spec);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
}

}  // namespace
}  // namespace ps
