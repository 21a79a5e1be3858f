// Embedding lookup: gather rows forward, scatter-add into the table backward; a frozen table is
// widened (or dequantized) row by row.
#include <cstring>

#include "autograd/kernels/affine_quant.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
void check_ids(std::span<const int32_t> ids, int64_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i)
    GLM4_CHECK(ids[i] >= 0 && ids[i] < vocab, "[embedding] token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab, ")");
}
}  // namespace

Tensor embedding(std::span<const int32_t> ids, const Tensor& table) {
  GLM4_CHECK(table.rank() == 2, "[embedding] table must be 2-D, got ", shape_str(table.shape()));
  int64_t vocab = table.dim(0), hidden = table.dim(1), n = int64_t(ids.size());
  check_ids(ids, vocab);
  Tensor out = Tensor::empty({n, hidden});
  const float* pt = table.data();
  float* po = out.data();
  parallel_for(n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      std::memcpy(po + i * hidden, pt + int64_t(ids[i]) * hidden, size_t(hidden) * 4);
  });
  std::vector<int32_t> kept(ids.begin(), ids.end());
  return record(out, "embedding", {table}, {},
                [kept = std::move(kept), vocab, hidden](Node&, const Tensor& g) {
                  Tensor dt = Tensor::zeros({vocab, hidden});
                  const float* pg = g.data();
                  float* pd = dt.data();
                  for (size_t i = 0; i < kept.size();
                       ++i) {  // sequential: repeated ids add up deterministically
                    float* row = pd + int64_t(kept[i]) * hidden;
                    const float* gr = pg + int64_t(i) * hidden;
                    for (int64_t j = 0; j < hidden; ++j) row[j] += gr[j];
                  }
                  return std::vector<Tensor>{dt};
                });
}

Tensor embedding(std::span<const int32_t> ids, const Weight& table) {
  int64_t hidden = table.cols(), n = int64_t(ids.size());
  check_ids(ids, table.rows());
  Tensor out = Tensor::empty({n, hidden});
  float* po = out.data();
  if (table.is_quantized()) {
    dequantize_rows_f32(table.quant(), ids.data(), n, po, "embedding");
    return out;
  }
  parallel_for(n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) table.row_to_f32(ids[i], po + i * hidden);
  });
  return out;
}

}  // namespace glm4::ops
