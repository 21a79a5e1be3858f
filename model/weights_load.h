// How load_model brought a model's weight files into memory: the load report every command
// prints (and writes into its JSON) beside its prompt and generation timings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "io/file_memory.h"

namespace glm4 {

struct WeightsLoad {
  FileResidency residency = FileResidency::kMapped;  // as used
  size_t file_bytes = 0;                             // of the weight files
  size_t direct_bytes = 0;       // of those, read with direct I/O (past the page cache)
  int64_t huge_page_bytes = -1;  // the process's AnonHugePages after loading; -1 if unknown
  double seconds = 0;            // opening, reading and checking the files
  // Owned matrices built at load beside the files' bytes: kv_b_proj rebuilt from mlx-lm's
  // glm4_moe_lite split (embed_q / unembed_out), about 9 MB a layer at GLM-4.7-Flash's shape.
  size_t rebuilt_bytes = 0;

  // "weights: 5.03 GB read into 2 MB pages (direct I/O, 4.99 GB granted) in 2.10 s" (without
  // "direct I/O, " when the page cache carried them, "4.00 GB by direct I/O, " when part) or
  // "weights: 5.03 GB mapped (mmap) in 0.02 s", then ", kv_b_proj rebuilt dense from
  // embed_q / unembed_out: 0.42 GB" when rebuilt_bytes is not 0.
  std::string describe() const;
  // {"weights_memory": "huge_pages" | "mmap", "weights_bytes", "direct_bytes", "huge_page_bytes",
  // "load_s"},
  // plus "rebuilt_bytes" when not 0, for the JSON logs (the first metrics line of train, generate
  // --json; serve's start carries describe()).
  nlohmann::json fields() const;
};

}  // namespace glm4
