// Resuming a run: the checkpoint's settings, each setting given again applied or refused by its
// rule, and the notes that say what changed.
#include "train/resume_plan.h"

#include <filesystem>
#include <map>

#include "base/check.h"
#include "train/train_settings.h"
#include "train/training_state.h"

namespace glm4 {

namespace fs = std::filesystem;
using nlohmann::json;

OnResume on_resume(const std::string& key) {
  static const std::map<std::string, OnResume> rules = {
      // Where the run reads and writes: the paths given are taken (the model's and data's
      // fingerprints are checked against the checkpoint's when the run starts).
      {"model", OnResume::kApply},
      {"data", OnResume::kApply},
      {"out", OnResume::kApply},
      {"resume", OnResume::kMachine},
      // How long, how fast and how often: sound to change from a step on.
      {"iters", OnResume::kApply},
      {"learning_rate", OnResume::kApply},
      {"lr_schedule", OnResume::kApply},
      {"warmup", OnResume::kApply},
      {"min_lr", OnResume::kApply},
      {"weight_decay", OnResume::kApply},
      {"grad_clip", OnResume::kApply},
      {"grad_checkpoint", OnResume::kApply},
      {"steps_per_report", OnResume::kApply},
      {"steps_per_eval", OnResume::kApply},
      {"val_batches", OnResume::kApply},
      {"save_every", OnResume::kApply},
      {"patience", OnResume::kApply},
      {"threads", OnResume::kApply},
      {"bucket_mb", OnResume::kApply},
      {"sync_check_every", OnResume::kApply},
      {"compute", OnResume::kApply},
      // What is trained, on which examples in which order: another value is another run.
      {"batch_size", OnResume::kRefuse},
      {"max_seq_length", OnResume::kRefuse},
      {"grad_accum", OnResume::kRefuse},
      {"lora_rank", OnResume::kRefuse},
      {"lora_alpha", OnResume::kRefuse},
      {"lora_dropout", OnResume::kRefuse},
      {"lora_targets", OnResume::kRefuse},
      {"num_layers", OnResume::kRefuse},
      {"rslora", OnResume::kRefuse},
      {"full", OnResume::kRefuse},
      {"fine_tune_type", OnResume::kRefuse},
      {"mask_prompt", OnResume::kRefuse},
      {"pack", OnResume::kRefuse},
      {"seed", OnResume::kRefuse},
      {"init_adapter", OnResume::kRefuse},
      {"adapter_format", OnResume::kRefuse},
      // How this machine holds the weights.
      {"mmap", OnResume::kMachine},
      {"no_mmap", OnResume::kMachine},
  };
  auto it = rules.find(key);
  GLM4_CHECK(it != rules.end(), "[resume] no rule for the setting \"", key, "\"");
  return it->second;
}

namespace {
// A setting's value as a user types it: 0.001, cosine, q_proj,v_proj, true.
std::string shown(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const json& x : v) out += (out.empty() ? "" : ",") + shown(x);
    return out;
  }
  return v.dump();
}

bool same_value(const std::string& key, const json& a, const json& b) {
  if (key == "init_adapter" && a.is_string() && b.is_string()) {
    const std::string x = a.get<std::string>(), y = b.get<std::string>();
    if (x.empty() || y.empty()) return x == y;
    std::error_code ec1, ec2;
    return fs::weakly_canonical(x, ec1) == fs::weakly_canonical(y, ec2);
  }
  return a == b;
}

std::string refusal(const std::string& checkpoint, const std::vector<std::string>& refused) {
  std::string list;
  for (const std::string& r : refused) list += (list.empty() ? "" : ", ") + r;
  return str_cat("--resume ", checkpoint, ": ", list,
                 ": a resumed run keeps what it was trained with; leave ",
                 refused.size() == 1 ? "this flag" : "these flags",
                 " out to continue the run, or start a new run with another --out");
}
}  // namespace

void check_same_run(const std::string& checkpoint, const TrainConfig& saved, const TrainConfig& c) {
  const json a = to_json(saved), b = to_json(c);
  std::vector<std::string> refused;
  visit_train_settings([&](const char* key, auto, const char*) {
    if (on_resume(key) != OnResume::kRefuse || same_value(key, a[key], b[key])) return;
    refused.push_back(
        str_cat(train_flag_name(key), " ", shown(b[key]), " (the run has ", shown(a[key]), ")"));
  });
  GLM4_CHECK(refused.empty(), refusal(checkpoint, refused));
}

ResumePlan plan_resume(const std::string& checkpoint, const json& given) {
  GLM4_CHECK(fs::is_regular_file(checkpoint), "--resume ", checkpoint,
             ": no such file (expected OUT/checkpoint.h5 of an earlier run)");
  const CheckpointSummary saved = read_checkpoint_summary(checkpoint);
  ResumePlan plan;
  plan.step = saved.state.step;
  TrainConfig& c = plan.config;
  c = saved.config;
  c.mmap = c.no_mmap = false;
  const fs::path dir = fs::path(checkpoint).parent_path();
  c.out = dir.empty() ? "." : dir.string();
  c.resume = checkpoint;
  TrainConfig requested = c;
  apply_json(requested, given, "command line");
  const json before = to_json(c), after = to_json(requested);
  json applied = json::object();
  std::vector<std::string> refused;
  for (const auto& [key, value] : given.items()) {
    if (key.rfind("_comment", 0) == 0 || key == "resume") continue;
    const OnResume rule = on_resume(key);
    if (rule == OnResume::kMachine || key == "model" || key == "data" || key == "out") {
      applied[key] = after[key];
    } else if (same_value(key, before[key], after[key])) {
      continue;
    } else if (rule == OnResume::kRefuse) {
      refused.push_back(str_cat(train_flag_name(key), " ", shown(after[key]), " (the run has ",
                                shown(before[key]), ")"));
    } else {
      applied[key] = after[key];
      plan.notes.push_back(str_cat(train_flag_name(key), " ", shown(before[key]), " -> ",
                                   shown(after[key]), " from step ", plan.step));
    }
  }
  GLM4_CHECK(refused.empty(), refusal(checkpoint, refused));
  apply_json(c, applied, "command line");
  GLM4_CHECK(plan.step < c.iters, "--resume ", checkpoint, ": the run is at step ", plan.step,
             " of --iters ", c.iters, "; give a larger --iters to train further");
  return plan;
}

}  // namespace glm4
