// The training run's metrics log: one JSON line per step or evaluation in OUT/metrics.jsonl.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace glm4 {

class MetricsLog {
 public:
  // Appends when `append` (a resumed run), else starts the file afresh. A resumed run passes the
  // step it resumes from: lines of later steps (logged by a run that died after its last save)
  // are dropped first, so every step appears once.
  MetricsLog(const std::filesystem::path& path, bool append, int64_t keep_through_step = -1);
  ~MetricsLog();
  void write(const nlohmann::json& line);  // one line, flushed

 private:
  std::FILE* file_ = nullptr;
  std::filesystem::path path_;
};

}  // namespace glm4
