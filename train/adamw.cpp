// AdamW update, one fused elementwise pass per parameter, parallel over elements.
#include "train/adamw.h"

#include <cmath>
#include <cstring>
#include <set>

#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

constexpr int64_t kGrain = 1 << 14;

// The scalars torch 1.13 hands its float kernels: Python doubles, each cast to float once.
struct StepConstants {
  float decay;  // 1 - lr * wd
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float neg_step_size;  // -(lr / (1 - beta1^t))
  float bias_correction2_sqrt;
  float eps;
};

StepConstants step_constants(const AdamWOptions& o, double lr, int64_t t) {
  const double step = double(t);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(o.beta2, step);
  const double step_size = lr / bias_correction1;
  return {float(1.0 - lr * o.weight_decay),
          float(o.beta1),
          float(1.0 - o.beta1),
          float(o.beta2),
          float(1.0 - o.beta2),
          float(-step_size),
          float(std::sqrt(bias_correction2)),
          float(o.eps)};
}

// Elements [lo, hi): the operations of torch's
//   param.mul_(1 - lr*wd)
//   exp_avg.mul_(b1).add_(grad, alpha=1-b1)             add's vector kernel: fmadd(g, alpha, m)
//   exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1-b2) vector kernel: fmadd(value*g, g, v)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)     computed as p + (value*m) / denom
void update_range(const StepConstants& c, float* p, const float* g, float* m, float* v, int64_t lo,
                  int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const float pi = p[i] * c.decay;
    const float mi = std::fma(g[i], c.one_minus_beta1, m[i] * c.beta1);
    const float vi = std::fma(c.one_minus_beta2 * g[i], g[i], v[i] * c.beta2);
    const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + (c.neg_step_size * mi) / denom;
  }
}

}  // namespace

AdamW::AdamW(std::vector<std::pair<std::string, Tensor>> params, AdamWOptions options,
             std::vector<ElementRange> owned)
    : options_(options) {
  const AdamWOptions& o = options_;
  GLM4_CHECK(o.lr >= 0, "[AdamW] learning rate must be >= 0, got ", o.lr);
  GLM4_CHECK(o.beta1 >= 0 && o.beta1 < 1, "[AdamW] beta1 must be in [0, 1), got ", o.beta1);
  GLM4_CHECK(o.beta2 >= 0 && o.beta2 < 1, "[AdamW] beta2 must be in [0, 1), got ", o.beta2);
  GLM4_CHECK(o.eps >= 0, "[AdamW] eps must be >= 0, got ", o.eps);
  GLM4_CHECK(o.weight_decay >= 0, "[AdamW] weight_decay must be >= 0, got ", o.weight_decay);
  GLM4_CHECK(owned.empty() || owned.size() == params.size(), "[AdamW] ", owned.size(),
             " owned ranges for ", params.size(), " parameters");
  std::set<std::string> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    auto& [name, p] = params[i];
    GLM4_CHECK(p.defined(), "[AdamW] parameter '", name, "' is an undefined tensor");
    GLM4_CHECK(p.is_leaf(), "[AdamW] parameter '", name, "' is not a leaf tensor");
    GLM4_CHECK(seen.insert(name).second, "[AdamW] parameter name '", name, "' appears twice");
    const ElementRange r = owned.empty() ? ElementRange{0, p.numel()} : owned[i];
    GLM4_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= p.numel(), "[AdamW] owned elements [",
               r.begin, ", ", r.end, ") of '", name, "' are outside its ", p.numel());
    const Shape moment_shape = r.size() == p.numel() ? p.shape() : Shape{r.size()};
    names_.push_back(name);
    params_.push_back(p);
    owned_.push_back(r);
    exp_avg_.push_back(Tensor::zeros(moment_shape));
    exp_avg_sq_.push_back(Tensor::zeros(moment_shape));
    param_steps_.push_back(0);
  }
}

void AdamW::step(double lr) {
  GLM4_CHECK(lr >= 0 && std::isfinite(lr),
             "[AdamW] step: learning rate must be finite and >= 0, got ", lr);
  ++step_count_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    GLM4_CHECK(g.shape() == params_[i].shape(), "[AdamW] gradient of '", names_[i], "' has shape ",
               shape_str(g.shape()), ", parameter has ", shape_str(params_[i].shape()));
    const StepConstants c = step_constants(options_, lr, ++param_steps_[i]);
    const ElementRange r = owned_[i];
    float* p = params_[i].data() + r.begin;
    const float* gd = g.data() + r.begin;
    float* m = exp_avg_[i].data();
    float* v = exp_avg_sq_[i].data();
    parallel_for(r.size(), kGrain,
                 [&](int64_t lo, int64_t hi) { update_range(c, p, gd, m, v, lo, hi); });
  }
}

void AdamW::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void AdamW::load_state(int64_t step_count, const std::vector<Tensor>& exp_avg,
                       const std::vector<Tensor>& exp_avg_sq,
                       const std::vector<int64_t>& param_steps) {
  const size_t n = params_.size();
  GLM4_CHECK(step_count >= 0, "[AdamW] load_state: step count must be >= 0, got ", step_count);
  GLM4_CHECK(exp_avg.size() == n && exp_avg_sq.size() == n, "[AdamW] load_state: ", n,
             " parameters but ", exp_avg.size(), " exp_avg and ", exp_avg_sq.size(),
             " exp_avg_sq tensors");
  GLM4_CHECK(param_steps.empty() || param_steps.size() == n, "[AdamW] load_state: ", n,
             " parameters but ", param_steps.size(), " step counts");
  for (size_t i = 0; i < n; ++i) {
    const Shape& want = params_[i].shape();
    for (const Tensor* t : {&exp_avg[i], &exp_avg_sq[i]}) {
      const char* what = t == &exp_avg[i] ? "exp_avg" : "exp_avg_sq";
      GLM4_CHECK(t->defined(), "[AdamW] load_state: ", what, " of '", names_[i], "' is undefined");
      GLM4_CHECK(t->shape() == want, "[AdamW] load_state: ", what, " of '", names_[i],
                 "' has shape ", shape_str(t->shape()), ", parameter has ", shape_str(want));
    }
    if (!param_steps.empty())
      GLM4_CHECK(param_steps[i] >= 0 && param_steps[i] <= step_count, "[AdamW] load_state: step ",
                 param_steps[i], " of '", names_[i], "' is outside [0, ", step_count, "]");
  }
  for (size_t i = 0; i < n; ++i) {
    param_steps_[i] = param_steps.empty() ? step_count : param_steps[i];
    const size_t bytes = size_t(owned_[i].size()) * sizeof(float);
    if (bytes == 0) continue;
    // may be our own tensors
    std::memmove(exp_avg_[i].data(), exp_avg[i].data() + owned_[i].begin, bytes);
    std::memmove(exp_avg_sq_[i].data(), exp_avg_sq[i].data() + owned_[i].begin, bytes);
  }
  step_count_ = step_count;
}

}  // namespace glm4
