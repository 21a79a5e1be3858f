// Model and data fingerprints: FNV-1a (64 bits) over the bytes that decide what a run learns.
#include "train/run_fingerprint.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/check.h"

namespace glm4 {

namespace fs = std::filesystem;

namespace {
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  void add(const std::string& s) { add(s.data(), s.size() + 1); }  // the NUL separates fields
  void add_u64(uint64_t v) { add(&v, sizeof v); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
    return buf;
  }
};

// `n` bytes of `in` from `offset` (fewer at the end of the file).
void add_range(Fnv1a& f, std::ifstream& in, uint64_t offset, uint64_t n) {
  std::vector<char> buf(size_t(std::min<uint64_t>(n, 1 << 20)));
  in.clear();
  in.seekg(std::streamoff(offset));
  while (n > 0 && in) {
    in.read(buf.data(), std::streamsize(std::min<uint64_t>(n, buf.size())));
    const auto got = uint64_t(in.gcount());
    if (got == 0) break;
    f.add(buf.data(), size_t(got));
    n -= got;
  }
}

void add_whole_file(Fnv1a& f, const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  GLM4_CHECK(in, path.string(), ": cannot read the ", what);
  add_range(f, in, 0, UINT64_MAX);
}

// A weight file's size, its first MB (the safetensors header and the first tensors) and 4 KB
// at 16 evenly spaced places.
void add_sampled_file(Fnv1a& f, const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  GLM4_CHECK(in, path.string(), ": cannot read the weights");
  const uint64_t size = fs::file_size(path);
  f.add_u64(size);
  add_range(f, in, 0, 1 << 20);
  for (uint64_t k = 1; k <= 16; ++k) add_range(f, in, size / 17 * k, 4096);
}
}  // namespace

std::string model_fingerprint(const std::string& model_dir) {
  Fnv1a f;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    if (p.extension() == ".safetensors") {
      f.add(name);
      add_sampled_file(f, p);
    } else if (name == "config.json" || name == "model.safetensors.index.json" ||
               name.rfind("tokenizer", 0) == 0) {
      f.add(name);
      add_whole_file(f, p, "model file");
    }
  }
  return f.hex();
}

std::string data_fingerprint(const DataFiles& files) {
  Fnv1a f;
  for (const std::string& path : {files.train, files.valid}) {
    f.add(path.empty() ? "-" : "+");
    if (!path.empty()) add_whole_file(f, path, "data file");
  }
  return f.hex();
}

}  // namespace glm4
