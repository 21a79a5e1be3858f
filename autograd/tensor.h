// Tensor: fp32, row-major, contiguous, rank 0-4, 64-byte aligned storage shared between views,
// with the autograd fields (requires_grad, grad, grad_fn). Storage bytes are counted so tests
// and benchmarks can read live and peak tensor memory.
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "autograd/storage_pool.h"

namespace glm4 {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(2,3)"
int64_t shape_numel(const Shape& s);

struct Node;

// Live and peak bytes of all tensor storage in the process.
struct TensorMemory {
  static int64_t live_bytes();
  static int64_t peak_bytes();
  static void reset_peak();  // peak := live
};

class Storage {
 public:
  explicit Storage(int64_t numel);  // uninitialised
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  float* data() {
    if (packed_.load(std::memory_order_acquire)) unpack();
    return data_;
  }
  int64_t numel() const { return numel_; }

  // Rounds the values to bf16 (nearest even) and keeps them in half the bytes until data() is
  // next called, which brings them back as fp32 (autograd/saved_bf16.h: saved activations
  // between a layer's forward and its backward). Raw pointers taken before are invalid after.
  void pack_bf16();
  bool packed() const { return packed_.load(std::memory_order_acquire); }
  // The same rounding, kept in fp32: for values read again at once.
  void round_to_bf16();

 private:
  void unpack();  // thread-safe: the first caller widens, the others wait for it

  float* data_;
  int64_t numel_;
  PoolBlock block_;  // the fp32 values, or the bf16 ones while packed
  std::atomic<bool> packed_{false};
};

struct TensorImpl {
  Shape shape;
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in floats, for views into a larger storage
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (null for leaves)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : p_(std::move(impl)) {}

  static Tensor empty(const Shape& shape);
  static Tensor zeros(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor from(const Shape& shape, const std::vector<float>& values);
  static Tensor scalar(float value) { return full({}, value); }

  bool defined() const { return p_ != nullptr; }
  const Shape& shape() const { return p_->shape; }
  int rank() const { return int(p_->shape.size()); }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t numel() const { return shape_numel(p_->shape); }
  float* data() { return p_->storage->data() + p_->offset; }
  const float* data() const { return p_->storage->data() + p_->offset; }
  float item() const;  // the value of a one-element tensor
  std::vector<float> to_vector() const;

  bool requires_grad() const { return p_->requires_grad; }
  // Marks a leaf as trainable (its gradient accumulates in grad()) or frozen.
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return p_->grad_fn == nullptr; }
  Tensor grad() const;  // undefined until a backward pass reached this leaf
  void zero_grad();     // drops the gradient buffer
  void set_grad(const Tensor& g);
  const std::shared_ptr<Node>& grad_fn() const { return p_->grad_fn; }

  Tensor detach() const;  // same storage, no graph
  Tensor clone() const;   // new storage, no graph
  // A view with another shape over the same storage (no graph; ops::reshape records one).
  Tensor view_as_shape(const Shape& shape) const;
  // A view of the first shape_numel(shape) elements (no graph): a prefix of a larger buffer.
  Tensor view_prefix(const Shape& shape) const;

  TensorImpl* impl() const { return p_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return p_; }

 private:
  std::shared_ptr<TensorImpl> p_;
};

}  // namespace glm4
