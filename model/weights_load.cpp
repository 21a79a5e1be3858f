// The load report's line.
#include "model/weights_load.h"

#include <cstdio>

namespace glm4 {

std::string WeightsLoad::describe() const {
  char line[240];
  const double gb = double(file_bytes) / 1e9;
  if (residency == FileResidency::kHugePages) {
    char direct[48] = "", granted[48] = "granted: unknown";
    if (direct_bytes == file_bytes)
      std::snprintf(direct, sizeof direct, "direct I/O, ");
    else if (direct_bytes > 0)
      std::snprintf(direct, sizeof direct, "%.2f GB by direct I/O, ", double(direct_bytes) / 1e9);
    if (huge_page_bytes >= 0)
      std::snprintf(granted, sizeof granted, "%.2f GB granted", double(huge_page_bytes) / 1e9);
    std::snprintf(line, sizeof line, "weights: %.2f GB read into 2 MB pages (%s%s) in %.2f s", gb,
                  direct, granted, seconds);
  } else {
    std::snprintf(line, sizeof line, "weights: %.2f GB mapped (mmap) in %.2f s", gb, seconds);
  }
  std::string out = line;
  if (rebuilt_bytes > 0) {
    std::snprintf(line, sizeof line,
                  ", kv_b_proj rebuilt dense from embed_q / unembed_out: %.3f GB",
                  double(rebuilt_bytes) / 1e9);
    out += line;
  }
  return out;
}

nlohmann::json WeightsLoad::fields() const {
  nlohmann::json j = {{"weights_memory", residency_name(residency)},
                      {"weights_bytes", file_bytes},
                      {"direct_bytes", direct_bytes},
                      {"huge_page_bytes", huge_page_bytes},
                      {"load_s", seconds}};
  if (rebuilt_bytes > 0) j["rebuilt_bytes"] = rebuilt_bytes;
  return j;
}

}  // namespace glm4
