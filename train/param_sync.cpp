#include "train/param_sync.h"

#include <cstring>

#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
constexpr int64_t kChunk = 1 << 16;

uint64_t mix(uint64_t h, uint64_t x) {  // one round of a multiply-xorshift hash
  h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

uint64_t hash_floats(const float* p, int64_t n) {
  uint64_t h = uint64_t(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    h = mix(h, bits);
  }
  return h;
}
}  // namespace

uint64_t parameter_checksum(const std::vector<Tensor>& params) {
  uint64_t h = 0;
  for (const Tensor& t : params) {
    const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
    std::vector<uint64_t> part(static_cast<size_t>(chunks));
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c)
        part[size_t(c)] = hash_floats(t.data() + c * kChunk, std::min(kChunk, n - c * kChunk));
    });
    h = mix(h, uint64_t(n));
    for (uint64_t x : part) h = mix(h, x);
  }
  return h;
}

void check_same_parameters(Distributed& group, const std::vector<Tensor>& params,
                           const std::string& when) {
  if (group.size() == 1) return;
  std::vector<uint64_t> sums = group.allgather(parameter_checksum(params));
  std::string differ;
  for (size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  GLM4_CHECK(differ.empty(), "the parameters of rank(s) ", differ, " differ from rank 0's ", when,
             " (ranks must start from the same model files and run the same build)");
}

}  // namespace glm4
