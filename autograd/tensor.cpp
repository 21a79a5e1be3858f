#include "autograd/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "autograd/kernels/convert.h"
#include "autograd/storage_pool.h"
#include "base/check.h"
#include "base/dtype.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
constexpr int64_t kConvertGrain = int64_t(1) << 16;  // elements a task packs or widens

void count_alloc(int64_t bytes) {
  int64_t now = g_live.fetch_add(bytes) + bytes;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

int64_t TensorMemory::live_bytes() { return g_live.load(); }
int64_t TensorMemory::peak_bytes() { return g_peak.load(); }
void TensorMemory::reset_peak() { g_peak.store(g_live.load()); }

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out.append(i ? "," : "").append(std::to_string(s[i]));
  return out + ")";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Storage::Storage(int64_t numel) : numel_(numel) {
  block_ = pool_allocate(size_t(std::max<int64_t>(numel, 1)) * sizeof(float));
  data_ = static_cast<float*>(block_.data);
  count_alloc(int64_t(numel) * 4);
}

Storage::~Storage() {
  pool_release(block_);
  g_live.fetch_sub(int64_t(numel_) * (packed() ? 2 : 4));
}

void Storage::pack_bf16() {
  if (packed()) return;
  PoolBlock half = pool_allocate(size_t(std::max<int64_t>(numel_, 1)) * sizeof(uint16_t));
  count_alloc(int64_t(numel_) * 2);
  auto* dst = static_cast<uint16_t*>(half.data);
  const float* src = data_;
  parallel_for(numel_, kConvertGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = f32_to_bf16(src[i]);
  });
  pool_release(block_);
  g_live.fetch_sub(int64_t(numel_) * 4);
  block_ = half;
  data_ = nullptr;
  packed_.store(true, std::memory_order_release);
}

void Storage::round_to_bf16() {
  float* values = data();
  parallel_for(numel_, kConvertGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) values[i] = bf16_to_f32(f32_to_bf16(values[i]));
  });
}

void Storage::unpack() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!packed_.load(std::memory_order_acquire)) return;  // another thread widened it meanwhile
  PoolBlock full = pool_allocate(size_t(std::max<int64_t>(numel_, 1)) * sizeof(float));
  count_alloc(int64_t(numel_) * 4);
  auto* dst = static_cast<float*>(full.data);
  const auto* src = static_cast<const uint16_t*>(block_.data);
  // On this thread alone: a parallel loop here, under the lock, could let this thread steal a
  // task that asks for the same storage.
  convert_to_f32(DType::BF16, src, numel_, dst);
  pool_release(block_);
  g_live.fetch_sub(int64_t(numel_) * 2);
  block_ = full;
  data_ = dst;
  packed_.store(false, std::memory_order_release);
}

static void check_shape(const Shape& shape) {
  GLM4_CHECK(shape.size() <= 4, "[tensor] rank ", shape.size(), " > 4 in shape ", shape_str(shape));
  for (int64_t d : shape)
    GLM4_CHECK(d >= 0, "[tensor] negative dimension in shape ", shape_str(shape));
}

Tensor Tensor::empty(const Shape& shape) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->storage = std::make_shared<Storage>(shape_numel(shape));
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape) { return full(shape, 0.0f); }

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  std::fill_n(t.data(), t.numel(), value);
  return t;
}

Tensor Tensor::from(const Shape& shape, const std::vector<float>& values) {
  GLM4_CHECK(int64_t(values.size()) == shape_numel(shape), "[tensor] ", values.size(),
             " values for shape ", shape_str(shape));
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = rank();
  int j = i < 0 ? i + r : i;
  GLM4_CHECK(j >= 0 && j < r, "[tensor] dim ", i, " out of range for shape ", shape_str(shape()));
  return p_->shape[j];
}

float Tensor::item() const {
  GLM4_CHECK(numel() == 1, "[item] tensor of shape ", shape_str(shape()), " is not one element");
  return data()[0];
}

std::vector<float> Tensor::to_vector() const {
  return std::vector<float>(data(), data() + numel());
}

Tensor& Tensor::set_requires_grad(bool on) {
  GLM4_CHECK(is_leaf(), "[set_requires_grad] only leaves can be marked trainable or frozen");
  p_->requires_grad = on;
  if (!on) p_->grad.reset();
  return *this;
}

Tensor Tensor::grad() const { return p_->grad ? Tensor(p_->grad) : Tensor(); }
void Tensor::zero_grad() { p_->grad.reset(); }
void Tensor::set_grad(const Tensor& g) { p_->grad = g.impl_ptr(); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = p_->shape;
  impl->storage = p_->storage;
  impl->offset = p_->offset;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape());
  std::memcpy(t.data(), data(), size_t(numel()) * 4);
  return t;
}

Tensor Tensor::view_as_shape(const Shape& shape) const {
  check_shape(shape);
  GLM4_CHECK(shape_numel(shape) == numel(), "[reshape] cannot view ", shape_str(p_->shape), " as ",
             shape_str(shape));
  Tensor t = detach();
  t.p_->shape = shape;
  return t;
}

Tensor Tensor::view_prefix(const Shape& shape) const {
  check_shape(shape);
  GLM4_CHECK(shape_numel(shape) <= numel(), "[view_prefix] ", shape_str(shape), " is larger than ",
             shape_str(p_->shape));
  Tensor t = detach();
  t.p_->shape = shape;
  return t;
}

}  // namespace glm4
