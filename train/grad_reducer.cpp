// Buckets, their pieces, and the two-phase sum of each bucket: every rank sends piece r to rank
// r, which adds the pieces in rank order (the fixed order MPI_Allreduce does not promise), then
// the summed pieces are allgathered (or, sharded, kept for the optimizer).
#include "train/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/parallel.h"
#include "train/grad_clip.h"

namespace glm4 {

namespace {
class Stopwatch {
 public:
  explicit Stopwatch(double* total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

// [begin, end) intersected with [lo, hi), shifted by -lo; empty as {0, 0}.
ElementRange overlap(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  const int64_t b = std::max(begin, lo), e = std::min(end, hi);
  return b < e ? ElementRange{b - lo, e - lo} : ElementRange{0, 0};
}
}  // namespace

GradientReducer::GradientReducer(Distributed& group, std::vector<Tensor> params,
                                 bool shard_optimizer, int64_t bucket_bytes)
    : group_(group),
      params_(std::move(params)),
      sharded_(shard_optimizer),
      bucket_floats_(bucket_bytes / 4) {
  GLM4_CHECK(bucket_bytes > 0, "[GradientReducer] bucket size must be positive, got ",
             bucket_bytes);
  const int ranks = group_.size();
  bucket_of_.resize(params_.size());
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t n = params_[k].numel();
    if (buckets_.empty() ||
        (buckets_.back().numel > 0 && (buckets_.back().numel + n) * 4 > bucket_bytes))
      buckets_.emplace_back();
    Bucket& b = buckets_.back();
    b.slots.push_back({k, b.numel, n});
    b.numel += n;
    bucket_of_[k] = buckets_.size() - 1;
    index_of_[params_[k].impl()] = k;
  }
  for (Bucket& b : buckets_)
    for (int r = 0; r <= ranks; ++r) {
      const int64_t start = b.numel * r / ranks;
      if (r > 0) b.counts.push_back(start - b.starts.back());
      if (r < ranks) b.starts.push_back(start);
    }
  ready_.assign(params_.size(), 0);
  had_grad_.assign(params_.size(), 0);
  for (int r = 0; r < ranks; ++r) {
    std::vector<ElementRange> mine(params_.size());
    for (const Bucket& b : buckets_)
      for (const Slot& s : b.slots)
        mine[s.param] =
            sharded_ ? overlap(b.starts[size_t(r)], b.starts[size_t(r)] + b.counts[size_t(r)],
                               s.offset, s.offset + s.numel)
                     : ElementRange{0, s.numel};
    owned_.push_back(std::move(mine));
  }
}

int64_t GradientReducer::bytes_sent_per_step() const {
  const int ranks = group_.size();
  if (ranks == 1) return 0;
  int64_t floats = 0;
  for (const Bucket& b : buckets_) {
    const int64_t mine = b.counts[size_t(group_.rank())];
    floats += (b.numel - mine) + mine * (ranks - 1);  // the other pieces out; my sum to everyone
  }
  return floats * int64_t(sizeof(float));
}

void GradientReducer::begin() {
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(had_grad_.begin(), had_grad_.end(), 0);
  for (Bucket& b : buckets_) {
    b.waiting = int64_t(b.slots.size());
    b.stage = Stage::kWaiting;
  }
  next_to_post_ = 0;
  wait_seconds_ = 0;
  begun_ = true;
  hook_ = std::make_unique<LeafReadyHook>([this](const TensorImpl* leaf) { on_ready(leaf); });
}

void GradientReducer::on_ready(const TensorImpl* leaf) {
  auto it = index_of_.find(leaf);
  if (it == index_of_.end()) return;  // not a trainable parameter (an input of a recompute block)
  GLM4_CHECK(
      !ready_[it->second], "[GradientReducer] the gradient of trainable tensor ", it->second,
      " was completed twice in one backward pass (used inside and outside a recomputed block?)");
  mark_ready(it->second);
  post_ready_buckets();
  progress(false);
}

void GradientReducer::mark_ready(size_t param) {
  ready_[param] = 1;
  had_grad_[param] = params_[param].grad().defined();
  --buckets_[bucket_of_[param]].waiting;
}

// Buckets start in index order on every rank, whatever order their gradients complete in. Those
// under way hold at most two buckets' worth of floats (or one bucket larger than that), so their
// send and receive buffers stay small next to the gradients.
void GradientReducer::post_ready_buckets() {
  while (next_to_post_ < buckets_.size() && buckets_[next_to_post_].waiting == 0) {
    int64_t in_flight = 0;
    size_t oldest = next_to_post_;
    for (size_t k = next_to_post_; k-- > 0;)
      if (buckets_[k].stage != Stage::kDone) {
        in_flight += buckets_[k].numel;
        oldest = k;
      }
    if (in_flight > 0 && in_flight + buckets_[next_to_post_].numel > 2 * bucket_floats_) {
      advance(buckets_[oldest], true);
      continue;
    }
    Bucket& b = buckets_[next_to_post_++];
    b.send.assign(size_t(b.numel), 0.0f);
    for (const Slot& s : b.slots) {
      Tensor g = params_[s.param].grad();
      if (g.defined())
        std::memcpy(b.send.data() + s.offset, g.data(), size_t(s.numel) * sizeof(float));
    }
    b.recv.resize(size_t(b.counts[size_t(group_.rank())] * group_.size()));
    b.request = group_.exchange(b.send.data(), b.counts, b.recv.data());
    b.stage = Stage::kExchanging;
  }
}

// Moves a started bucket on as far as its requests allow (to the end when `block`).
void GradientReducer::advance(Bucket& b, bool block) {
  if (b.stage == Stage::kExchanging &&
      (block ? (group_.wait(b.request), true) : group_.test(b.request)))
    reduce_pieces(b);
  if (b.stage == Stage::kGathering &&
      (block ? (group_.wait(b.request), true) : group_.test(b.request))) {
    unpack(b, b.send.data(), 0, b.numel);
    b.stage = Stage::kDone;
  }
  if (b.stage == Stage::kDone) {
    b.send = std::vector<float>();  // releases the memory (= {} would keep the capacity)
    b.recv = std::vector<float>();
  }
}

void GradientReducer::progress(bool block) {
  for (size_t k = 0; k < next_to_post_; ++k) advance(buckets_[k], block);
}

// recv holds every rank's copy of my piece, rank after rank: add them in rank order, in fp32 like
// one process accumulating its micro-batches. Then share the sum, or keep it (sharded).
void GradientReducer::reduce_pieces(Bucket& b) {
  const int me = group_.rank();
  const int64_t n = b.counts[size_t(me)];
  float* sum = b.recv.data();
  parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
    for (int r = 1; r < group_.size(); ++r) {
      const float* piece = b.recv.data() + r * n;
      for (int64_t j = lo; j < hi; ++j) sum[j] += piece[j];
    }
  });
  if (sharded_) {
    unpack(b, sum, b.starts[size_t(me)], b.starts[size_t(me)] + n);
    b.stage = Stage::kDone;
    return;
  }
  b.request = group_.allgather(sum, b.counts, b.send.data());
  b.stage = Stage::kGathering;
}

Tensor GradientReducer::grad_of(size_t param) {
  Tensor g = params_[param].grad();
  if (!g.defined()) {
    g = Tensor::zeros(params_[param].shape());
    params_[param].set_grad(g);
  }
  return g;
}

// Bucket elements [begin, end), held in `from`, into the gradients.
void GradientReducer::unpack(const Bucket& b, const float* from, int64_t begin, int64_t end) {
  for (const Slot& s : b.slots) {
    const ElementRange r = overlap(begin, end, s.offset, s.offset + s.numel);
    if (r.size() == 0) continue;
    std::memcpy(grad_of(s.param).data() + r.begin, from + (s.offset + r.begin - begin),
                size_t(r.size()) * sizeof(float));
  }
}

void GradientReducer::finish() {
  if (!begun_) begin();
  hook_.reset();
  Stopwatch watch(&wait_seconds_);
  for (size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) mark_ready(k);
  post_ready_buckets();
  std::vector<int64_t> had(had_grad_.begin(), had_grad_.end());
  group_.sum(had);
  progress(true);
  for (size_t k = 0; k < params_.size(); ++k)
    if (had[k] == 0) params_[k].zero_grad();
  begun_ = false;
}

double GradientReducer::clip(double max_norm) {
  if (!sharded_) {
    std::vector<Tensor> p = params_;  // every rank holds the same summed gradients
    return max_norm > 0 ? clip_grad_norm(p, max_norm) : grad_norm(p);
  }
  Stopwatch watch(&wait_seconds_);
  const std::vector<ElementRange>& mine = owned_[size_t(group_.rank())];
  double local = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor g = params_[k].grad();
    if (g.defined()) local += sum_of_squares(g.data() + mine[k].begin, mine[k].size());
  }
  double total = 0;
  for (const std::vector<double>& v : group_.allgather(std::vector<double>{local})) total += v[0];
  const double norm = std::sqrt(total);
  if (max_norm <= 0 || !std::isfinite(norm)) return norm;
  const float s = clip_factor(norm, max_norm);
  if (s == 1.0f) return norm;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor g = params_[k].grad();
    if (!g.defined()) continue;
    float* d = g.data() + mine[k].begin;
    parallel_for(mine[k].size(), 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] *= s;
    });
  }
  return norm;
}

void GradientReducer::gather_params() {
  if (!sharded_) return;
  Stopwatch watch(&wait_seconds_);
  const int me = group_.rank();
  for (const Bucket& b : buckets_) {
    const int64_t lo = b.starts[size_t(me)], hi = lo + b.counts[size_t(me)];
    std::vector<float> piece(size_t(hi - lo)), all(size_t(b.numel));
    for (const Slot& s : b.slots) {
      const ElementRange r = overlap(lo, hi, s.offset, s.offset + s.numel);
      if (r.size() > 0)
        std::memcpy(piece.data() + (s.offset + r.begin - lo), params_[s.param].data() + r.begin,
                    size_t(r.size()) * sizeof(float));
    }
    group_.wait(group_.allgather(piece.data(), b.counts, all.data()));
    for (const Slot& s : b.slots)
      std::memcpy(params_[s.param].data(), all.data() + s.offset, size_t(s.numel) * sizeof(float));
  }
}

void GradientReducer::gather_moments(const AdamW& optimizer, size_t i, std::vector<float>* m,
                                     std::vector<float>* v) {
  const int64_t n = params_[i].numel();
  if (group_.root()) {
    m->resize(size_t(n));
    v->resize(size_t(n));
  }
  if (!sharded_) {  // every rank holds all of it
    if (group_.root()) {
      std::memcpy(m->data(), optimizer.exp_avg()[i].data(), size_t(n) * sizeof(float));
      std::memcpy(v->data(), optimizer.exp_avg_sq()[i].data(), size_t(n) * sizeof(float));
    }
    return;
  }
  std::vector<int64_t> counts;
  for (int r = 0; r < group_.size(); ++r) counts.push_back(owned_[size_t(r)][i].size());
  group_.gather(optimizer.exp_avg()[i].data(), counts, group_.root() ? m->data() : nullptr);
  group_.gather(optimizer.exp_avg_sq()[i].data(), counts, group_.root() ? v->data() : nullptr);
}

}  // namespace glm4
