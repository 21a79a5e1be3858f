// A run whose gradients and AdamW moments cannot fit is refused before its first step, naming the
// flag that sized it (a 30B MoE model's all-linear LoRA on a 24 GB machine was killed instead).
#include <gtest/gtest.h>

#include "base/check.h"
#include "train/train_setup.h"

namespace glm4 {
namespace {

std::string refusal(const TrainConfig& c, int64_t trainable, int64_t available) {
  try {
    check_training_memory(c, trainable, available);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainingMemory, TooManyTrainableParametersAreRefusedNamingTheFlag) {
  TrainConfig c;  // all-linear
  const std::string m = refusal(c, 536'000'000, 4'400'000'000);
  EXPECT_NE(m.find("--lora-targets all-linear: 536.0M trainable parameters need 6.4 GB"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("4.4 GB of memory is available"), std::string::npos) << m;
  EXPECT_NE(m.find("shared_experts"), std::string::npos) << m;
  c.lora_targets = {"q_proj", "v_proj"};
  EXPECT_NE(refusal(c, 536'000'000, 1).find("--lora-targets q_proj,v_proj:"), std::string::npos);
  c.full = true;
  EXPECT_EQ(refusal(c, 9'000'000'000, 24'000'000'000).rfind("--full: 9000.0M", 0), 0u)
      << refusal(c, 9'000'000'000, 24'000'000'000);
}

TEST(TrainingMemory, RunsThatFitOrUnknownMemoryPass) {
  TrainConfig c;
  EXPECT_EQ(refusal(c, 29'000'000, 4'400'000'000), "");   // 0.35 GB
  EXPECT_EQ(refusal(c, 536'000'000, 6'432'000'000), "");  // exactly what it needs
  EXPECT_EQ(refusal(c, 536'000'000, -1), "");             // /proc/meminfo unreadable
}

}  // namespace
}  // namespace glm4
