// Model directories: single-file and sharded checkpoints written like transformers and read
// back through ModelFiles; the index is checked byte for byte; broken indexes fail loudly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/check.h"
#include "io/model_files.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::TempDir;
using testing::throws_with;

// Tensors of `counts` floats each, named t0, t1, ..., values distinct per tensor.
struct Fixture {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  explicit Fixture(const std::vector<int64_t>& counts) {
    data.reserve(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      data.emplace_back(size_t(counts[i]));
      std::iota(data.back().begin(), data.back().end(), float(1000 * i));
      tensors.push_back(f32_tensor(str_cat("t", i), {counts[i]}, data.back().data()));
    }
  }
};

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

TEST(ModelFiles, ShardFileNamesFollowTransformers) {
  EXPECT_EQ(shard_file_name(0, 3), "model-00001-of-00003.safetensors");
  EXPECT_EQ(shard_file_name(11, 12), "model-00012-of-00012.safetensors");
}

TEST(ModelFiles, SingleFileRoundTrip) {
  TempDir dir;
  Fixture fx({4, 3, 1});
  write_model_files(dir.path(), fx.tensors, 0, {{"format", "pt"}});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
  auto ckpt = ModelFiles::open(dir.path());
  EXPECT_EQ(ckpt.keys(), (std::vector<std::string>{"t0", "t1", "t2"}));
  ASSERT_EQ(ckpt.files().size(), 1u);
  EXPECT_EQ(ckpt.files()[0]->metadata().at("format"), "pt");
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(read_f32(ckpt.at("t" + std::to_string(i))), fx.data[i]);
  EXPECT_EQ(ckpt.find("nope"), nullptr);
  EXPECT_TRUE(throws_with([&] { ckpt.at("nope"); }, {"'nope'", dir.path().filename().string()}));
  // Everything fits in one shard: still a single file, no index.
  write_model_files(dir.path(), fx.tensors, 1 << 20);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"model.safetensors"});
}

TEST(ModelFiles, ShardsLikeTransformersAndReadsBack) {
  TempDir dir;
  // Bytes: 40, 40, 400 (larger than a shard), 8, 80, 4; shard limit 100.
  // Greedy in order: [t0 t1] [t2] [t3 t4] [t5]; t3+t4 = 88 fits, +t5 = 92 fits too.
  // So: [t0 t1] (80) | [t2] (400, alone) | [t3 t4 t5] (92).
  Fixture fx({10, 10, 100, 2, 20, 1});
  write_model_files(dir.path(), fx.tensors, 100, {{"format", "pt"}});
  EXPECT_EQ(dir.list(), (std::vector<std::string>{
                            "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  auto index = read_json(dir / "model.safetensors.index.json");
  const nlohmann::json want = {{"metadata", {{"total_size", 572}}},
                               {"weight_map",
                                {{"t0", "model-00001-of-00003.safetensors"},
                                 {"t1", "model-00001-of-00003.safetensors"},
                                 {"t2", "model-00002-of-00003.safetensors"},
                                 {"t3", "model-00003-of-00003.safetensors"},
                                 {"t4", "model-00003-of-00003.safetensors"},
                                 {"t5", "model-00003-of-00003.safetensors"}}}};
  EXPECT_EQ(index, want);
  // Layout as json.dumps(index, indent=2, sort_keys=True) + "\n".
  std::ifstream in(dir / "model.safetensors.index.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.substr(0, 39), "{\n  \"metadata\": {\n    \"total_size\": 572");
  EXPECT_EQ(text.back(), '\n');

  auto shard3 = SafetensorsFile::open(dir / "model-00003-of-00003.safetensors");
  ASSERT_EQ(shard3->tensors().size(), 3u);
  EXPECT_EQ(shard3->tensors()[0].name, "t3");  // order within a shard is the given order
  EXPECT_EQ(shard3->tensors()[2].name, "t5");
  EXPECT_EQ(shard3->metadata().at("format"), "pt");

  std::shared_ptr<const void> owner;
  const TensorInfo* t2;
  {
    auto ckpt = ModelFiles::open(dir.path());
    EXPECT_EQ(ckpt.keys(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4", "t5"}));
    EXPECT_EQ(ckpt.files().size(), 3u);
    for (size_t i = 0; i < 6; ++i)
      EXPECT_EQ(read_f32(ckpt.at("t" + std::to_string(i))), fx.data[i]) << i;
    owner = ckpt.owner("t2");
    t2 = ckpt.find("t2");
    EXPECT_EQ(owner.get(), ckpt.owner("t2").get());
    EXPECT_NE(owner.get(), ckpt.owner("t0").get());
    EXPECT_TRUE(throws_with([&] { ckpt.owner("zz"); }, {"'zz'"}));
  }
  EXPECT_EQ(read_f32(*t2), fx.data[2]);  // the owner keeps the shard mapped
}

TEST(ModelFiles, ATensorExactlyAtTheLimitFillsAShard) {
  TempDir dir;
  Fixture fx({25, 1, 25});  // 100, 4, 100 bytes with limit 100
  write_model_files(dir.path(), fx.tensors, 100);
  auto index = read_json(dir / "model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["t1"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["t2"], "model-00003-of-00003.safetensors");
}

TEST(ModelFiles, ShardsFillUpToTheLimitExactly) {
  TempDir dir;
  Fixture fx({12, 13, 1});  // 48 + 52 = 100 bytes fit a 100-byte shard; 4 more do not
  write_model_files(dir.path(), fx.tensors, 100);
  auto index = read_json(dir / "model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["t1"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["t2"], "model-00002-of-00002.safetensors");
}

TEST(ModelFiles, ANewSaveRemovesTheOldOnesWeightFiles) {
  TempDir dir;
  Fixture big({30, 30, 30}), small({2});
  std::ofstream(dir / "config.json") << "{}";
  write_model_files(dir.path(), big.tensors, 100);
  EXPECT_EQ(dir.list().size(), 5u);  // 3 shards, index, config
  write_model_files(dir.path(), small.tensors);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"config.json", "model.safetensors"}));
  write_model_files(dir.path(), big.tensors, 250);  // [t0 t1] [t2]
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "model.safetensors.index.json"}));
  EXPECT_EQ(ModelFiles::open(dir.path()).keys().size(), 3u);
}

TEST(ModelFiles, WriterRejectsDuplicatesBeforeWritingAnything) {
  TempDir dir;
  Fixture fx({1, 1});
  fx.tensors[1].name = "t0";
  EXPECT_TRUE(
      throws_with([&] { write_model_files(dir.path(), fx.tensors, 4); }, {"'t0'", "twice"}));
  EXPECT_TRUE(dir.list().empty());
}

class BrokenIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    Fixture fx({10, 10, 10});
    write_model_files(dir_.path(), fx.tensors, 40);
    ASSERT_EQ(dir_.list().size(), 4u);
  }
  void write_index(const std::string& text) {
    std::ofstream(dir_ / "model.safetensors.index.json") << text;
  }
  ::testing::AssertionResult rejects(std::vector<std::string> parts) {
    parts.push_back("model.safetensors.index.json");
    return throws_with([&] { ModelFiles::open(dir_.path()); }, parts);
  }
  TempDir dir_;
};

TEST_F(BrokenIndex, MissingShard) {
  std::filesystem::remove(dir_ / "model-00002-of-00003.safetensors");
  EXPECT_TRUE(rejects({"'t1'", "model-00002-of-00003.safetensors", "does not exist"}));
}

TEST_F(BrokenIndex, ShardLacksTheKey) {
  auto index = read_json(dir_ / "model.safetensors.index.json");
  index["weight_map"]["t1"] = "model-00003-of-00003.safetensors";
  write_index(index.dump());
  EXPECT_TRUE(rejects({"'t1'", "model-00003-of-00003.safetensors", "no such tensor"}));
}

TEST_F(BrokenIndex, NotJsonOrNoWeightMap) {
  write_index("{\"weight_map\": ");
  EXPECT_TRUE(rejects({"invalid JSON"}));
  write_index(R"({"metadata": {}})");
  EXPECT_TRUE(rejects({"'weight_map'"}));
  write_index(R"({"weight_map": {"t0": 3}})");
  EXPECT_TRUE(rejects({"'t0'", "number"}));
}

TEST_F(BrokenIndex, ShardOutsideTheDirectory) {
  write_index(R"({"weight_map": {"t0": "../model-00001-of-00003.safetensors"}})");
  EXPECT_TRUE(rejects({"'t0'", "not a file name in the directory"}));
}

TEST_F(BrokenIndex, CorruptShardNamesTheShard) {
  std::filesystem::resize_file(dir_ / "model-00002-of-00003.safetensors", 30);
  EXPECT_TRUE(
      throws_with([&] { ModelFiles::open(dir_.path()); }, {"model-00002-of-00003.safetensors"}));
}

TEST(ModelFiles, NoWeightsListsWhatWasLookedFor) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { ModelFiles::open(dir.path()); },
                          {"model.safetensors", "model.safetensors.index.json"}));
  EXPECT_TRUE(
      throws_with([&] { ModelFiles::open(dir / "absent"); }, {"absent", "not a directory"}));
}

TEST(ModelFiles, EveryFileIsAtomic) {
  TempDir dir;
  Fixture fx({50, 50, 50});
  write_model_files(dir.path(), fx.tensors, 200);
  for (const auto& name : dir.list()) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
  EXPECT_EQ(dir.list().size(), 4u);
}

}  // namespace
}  // namespace glm4
