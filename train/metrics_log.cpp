// The metrics log: appending, resuming without duplicate steps, one flushed line per write.
#include "train/metrics_log.h"

#include <fstream>
#include <string>

#include "base/check.h"
#include "io/file/atomic_file.h"
#include "io/file/json_line.h"

namespace glm4 {

namespace {
// Rewrites `path` (atomically) without the lines of steps after `step`, and without a line torn
// by a kill (not JSON).
void drop_lines_after(const std::filesystem::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    auto s = j.find("step");
    if (s != j.end() && s->is_number() && s->get<double>() > double(step)) continue;
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}
}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, bool append, int64_t keep_through_step)
    : path_(path) {
  if (append && keep_through_step >= 0) drop_lines_after(path, keep_through_step);
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  GLM4_CHECK(file_, "cannot write the metrics log ", path.string());
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& line) {
  std::string s = json_line(line) + "\n";
  GLM4_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0,
             "cannot write the metrics log ", path_.string());
}

}  // namespace glm4
