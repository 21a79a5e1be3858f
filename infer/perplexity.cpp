#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "autograd/node.h"
#include "autograd/ops.h"

namespace glm4 {

namespace {
constexpr int32_t kIgnore = -100;
constexpr int64_t kLogitRows = 256;  // rows of [rows, vocab] logits alive at once
}  // namespace

PerplexityResult perplexity(const Glm4Model& model, const std::vector<std::vector<int32_t>>& ids_per_example,
                            const std::vector<std::vector<int32_t>>& labels_or_empty, int64_t batch_size) {
  GLM4_CHECK(batch_size > 0, "[perplexity] batch_size must be > 0, got ", batch_size);
  const size_t n = ids_per_example.size();
  GLM4_CHECK(labels_or_empty.empty() || labels_or_empty.size() == n, "[perplexity] ", labels_or_empty.size(),
             " label lists for ", n, " examples");
  for (size_t e = 0; e < n; ++e) {
    GLM4_CHECK(!ids_per_example[e].empty(), "[perplexity] example ", e, " is empty");
    if (!labels_or_empty.empty() && !labels_or_empty[e].empty())
      GLM4_CHECK(labels_or_empty[e].size() == ids_per_example[e].size(), "[perplexity] example ", e, " has ",
                 ids_per_example[e].size(), " ids but ", labels_or_empty[e].size(), " labels");
  }
  NoGradGuard no_grad;
  const int64_t H = model.config.hidden_size;
  const int32_t pad_id = model.config.pad_token_id.value_or(0);
  double total = 0;
  int64_t count = 0;
  for (size_t first = 0; first < n; first += size_t(batch_size)) {
    const size_t last = std::min(n, first + size_t(batch_size));
    const int64_t B = int64_t(last - first);
    int64_t T = 0;
    for (size_t e = first; e < last; ++e) T = std::max(T, int64_t(ids_per_example[e].size()));
    ForwardContext ctx;
    ctx.batch = B;
    ctx.seq = T;
    std::vector<int32_t> ids(size_t(B * T), pad_id), targets(size_t(B * T), kIgnore);
    ctx.positions.resize(size_t(B * T));
    ctx.mask.kv_end.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) {
      const auto& x = ids_per_example[first + size_t(b)];
      const bool own = !labels_or_empty.empty() && !labels_or_empty[first + size_t(b)].empty();
      const auto& y = own ? labels_or_empty[first + size_t(b)] : x;
      const int64_t len = int64_t(x.size());
      ctx.mask.kv_end[size_t(b)] = int32_t(len);
      for (int64_t t = 0; t < T; ++t) ctx.positions[size_t(b * T + t)] = int32_t(t);
      std::copy(x.begin(), x.end(), ids.begin() + b * T);
      for (int64_t t = 0; t + 1 < len; ++t) targets[size_t(b * T + t)] = y[size_t(t + 1)];  // shift
    }
    Tensor hidden = ops::reshape(model.forward_hidden(ids, ctx), {B * T, H});  // [B*T, H]
    for (int64_t r0 = 0; r0 < B * T; r0 += kLogitRows) {
      const int64_t r1 = std::min(B * T, r0 + kLogitRows);
      std::span<const int32_t> rows(targets.data() + r0, size_t(r1 - r0));
      int64_t scored = std::count_if(rows.begin(), rows.end(), [](int32_t l) { return l != kIgnore; });
      if (scored == 0) continue;
      Tensor logits = model.logits(ops::slice(hidden, 0, r0, r1), ctx);     // [rows, vocab]
      total += double(ops::cross_entropy(logits, rows, /*divide_by=*/1).item());  // sum over rows
      count += scored;
    }
  }
  PerplexityResult r;
  r.tokens = count;
  r.loss = count > 0 ? total / double(count) : 0;
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace glm4
