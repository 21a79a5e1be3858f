// Row and last-dimension indexing: gather_rows, scatter_add_rows (the Mixture-of-Experts block's
// dispatch and combine), gather_last (the routing weights of the chosen experts). Each backward
// is the opposite move: gathers scatter-add, scatters gather.
#include <algorithm>
#include <cstring>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/tensor_math.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
// Output row r receives the part rows (part, i) listed in sources[begin[r], begin[r + 1]), in
// part order and then row order: the order of the additions is fixed whatever the threads.
struct RowSources {
  std::vector<int64_t> begin;                        // [n + 1]
  std::vector<std::pair<int32_t, int64_t>> sources;  // (part, row within the part)
};

RowSources invert(const std::vector<std::vector<int64_t>>& rows, int64_t n) {
  RowSources s;
  s.begin.assign(size_t(n + 1), 0);
  for (const auto& part : rows)
    for (int64_t r : part) ++s.begin[size_t(r + 1)];
  for (int64_t r = 0; r < n; ++r) s.begin[size_t(r + 1)] += s.begin[size_t(r)];
  s.sources.resize(size_t(s.begin[size_t(n)]));
  std::vector<int64_t> next(s.begin.begin(), s.begin.end() - 1);
  for (size_t p = 0; p < rows.size(); ++p)
    for (size_t i = 0; i < rows[p].size(); ++i)
      s.sources[size_t(next[size_t(rows[p][i])]++)] = {int32_t(p), int64_t(i)};
  return s;
}
}  // namespace

Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows) {
  GLM4_CHECK(x.rank() == 2, "[gather_rows] input must be [N, H], got ", shape_str(x.shape()));
  const int64_t n = x.dim(0), width = x.dim(1);
  check_rows_within("gather_rows", rows, x);
  Tensor out = Tensor::empty({int64_t(rows.size()), width});
  copy_rows(x.data(), rows, width, out.data());
  std::vector<int64_t> kept(rows.begin(), rows.end());
  // Increasing rows (an expert's tokens) hand back only their own gradient rows, which the
  // engine adds where they belong (Node::grad_rows); others scatter into a full-size gradient.
  if (strictly_increasing(rows)) {
    out = record(out, "gather_rows", {x}, {},
                 [](Node&, const Tensor& g) { return std::vector<Tensor>{g.detach()}; });
    if (const auto& node = out.grad_fn()) node->set_grad_rows(0, std::move(kept), n);
    return out;
  }
  return record(out, "gather_rows", {x}, {},
                [kept = std::move(kept), n, width](Node&, const Tensor& g) {
                  return std::vector<Tensor>{scatter_add_rows({g.detach()}, {kept}, n)};
                });
}

Tensor scatter_add_rows(const std::vector<Tensor>& parts,
                        const std::vector<std::vector<int64_t>>& rows, int64_t n) {
  GLM4_CHECK(!parts.empty() && parts.size() == rows.size(), "[scatter_add_rows] ", parts.size(),
             " parts and ", rows.size(), " row lists");
  const int64_t width = parts[0].rank() == 2 ? parts[0].dim(1) : -1;
  for (size_t p = 0; p < parts.size(); ++p) {
    GLM4_CHECK(parts[p].rank() == 2 && parts[p].dim(1) == width &&
                   parts[p].dim(0) == int64_t(rows[p].size()),
               "[scatter_add_rows] part ", p, " of shape ", shape_str(parts[p].shape()), " with ",
               rows[p].size(), " rows (width ", width, ")");
    for (int64_t r : rows[p])
      GLM4_CHECK(r >= 0 && r < n, "[scatter_add_rows] row ", r, " of part ", p, " is outside [0, ",
                 n, ")");
  }
  const RowSources src = invert(rows, n);
  Tensor out = Tensor::empty({n, width});
  std::vector<const float*> data;
  for (const Tensor& t : parts) data.push_back(t.data());
  float* po = out.data();
  parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(width, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   float* y = po + r * width;
                   std::memset(y, 0, size_t(width) * sizeof(float));
                   for (int64_t s = src.begin[size_t(r)]; s < src.begin[size_t(r + 1)]; ++s) {
                     const auto [p, i] = src.sources[size_t(s)];
                     const float* x = data[size_t(p)] + i * width;
                     for (int64_t j = 0; j < width; ++j) y[j] += x[j];
                   }
                 }
               });
  return record(out, "scatter_add_rows", parts, {}, [rows, width](Node& node, const Tensor& g) {
    std::vector<Tensor> grads(rows.size());
    for (size_t p = 0; p < rows.size(); ++p) {
      if (!node.needs_grad(p)) continue;
      grads[p] = Tensor::empty({int64_t(rows[p].size()), width});
      copy_rows(g.data(), rows[p], width, grads[p].data());
    }
    return grads;
  });
}

Tensor gather_last(const Tensor& x, std::span<const int32_t> index, int64_t k) {
  GLM4_CHECK(x.rank() >= 1 && k > 0, "[gather_last] input ", shape_str(x.shape()), ", k ", k);
  const int64_t e = x.dim(-1), m = x.numel() / std::max<int64_t>(e, 1);
  GLM4_CHECK(int64_t(index.size()) == m * k, "[gather_last] ", index.size(), " indices for ", m,
             " rows of ", k, " (input ", shape_str(x.shape()), ")");
  for (size_t i = 0; i < index.size(); ++i)
    GLM4_CHECK(index[i] >= 0 && index[i] < e, "[gather_last] index ", index[i], " at ", i,
               " is outside [0, ", e, ")");
  Shape out_shape = x.shape();
  out_shape.back() = k;
  Tensor out = Tensor::empty(out_shape);
  const float* px = x.data();
  float* po = out.data();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) po[r * k + j] = px[r * e + index[size_t(r * k + j)]];
  std::vector<int32_t> kept(index.begin(), index.end());
  Shape in_shape = x.shape();
  return record(out, "gather_last", {x}, {},
                [kept = std::move(kept), in_shape, m, e, k](Node&, const Tensor& g) {
                  Tensor dx = Tensor::zeros(in_shape);
                  float* pd = dx.data();
                  const float* pg = g.data();
                  for (int64_t r = 0; r < m; ++r)
                    for (int64_t j = 0; j < k; ++j)
                      pd[r * e + kept[size_t(r * k + j)]] += pg[r * k + j];
                  return std::vector<Tensor>{dx};
                });
}

}  // namespace glm4::ops
