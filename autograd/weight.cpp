// Weight: owned 64-byte aligned buffers (counted) or views of external memory (not counted);
// dense elements or mlx affine groups.
#include "autograd/weight.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/convert.h"
#include "base/check.h"
#include "base/memory.h"
#include "base/parallel.h"

namespace glm4 {

namespace {

std::atomic<size_t> g_live_bytes{0};

// An owned, 64-byte aligned block whose size is counted in weight_bytes_live while it lives;
// from one huge page up it is an anonymous mapping in 2 MB pages, as loaded weights are.
struct OwnedBuffer {
  void* ptr = nullptr;
  size_t size = 0;
  explicit OwnedBuffer(size_t n) : size(n) {
    if (n >= kHugePageBytes) {
      ptr = map_anonymous(n, "weight buffer");
    } else {
      size_t rounded = (n + 63) / 64 * 64;
      ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
      if (ptr == nullptr) throw std::bad_alloc();
    }
    g_live_bytes += size;
  }
  ~OwnedBuffer() {
    if (size >= kHugePageBytes)
      unmap_anonymous(ptr, size);
    else
      std::free(ptr);
    g_live_bytes -= size;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
};

// Owned quantized storage, counted in weight_bytes_live while it lives.
struct OwnedQuant {
  QuantizedStorage storage;
  size_t size;
  explicit OwnedQuant(QuantizedStorage q) : storage(std::move(q)), size(storage.view().bytes()) {
    g_live_bytes += size;
  }
  ~OwnedQuant() { g_live_bytes -= size; }
  OwnedQuant(const OwnedQuant&) = delete;
  OwnedQuant& operator=(const OwnedQuant&) = delete;
};

void check_shape(const char* op, DType dtype, int64_t rows, int64_t cols) {
  GLM4_CHECK(rows >= 0 && cols >= 0, "[Weight::", op, "] negative shape (", rows, ", ", cols, ")");
  GLM4_CHECK(cols == 0 || rows <= std::numeric_limits<int64_t>::max() / 8 / cols, "[Weight::", op,
             "] shape (", rows, ", ", cols, ") is too large");
  (void)dtype;
}

}  // namespace

size_t weight_bytes_live() { return g_live_bytes.load(); }

Weight Weight::copy_of(DType dtype, const void* data, int64_t rows, int64_t cols) {
  check_shape("copy_of", dtype, rows, cols);
  Weight w;
  w.dtype_ = dtype;
  w.rows_ = rows;
  w.cols_ = cols;
  GLM4_CHECK(data != nullptr || w.bytes() == 0, "[Weight::copy_of] null data for shape (", rows,
             ", ", cols, ")");
  auto buf = std::make_shared<OwnedBuffer>(w.bytes());
  if (w.bytes() > 0) std::memcpy(buf->ptr, data, w.bytes());
  w.data_ = buf->ptr;
  w.owned_ = true;
  w.keep_ = std::move(buf);
  return w;
}

Weight Weight::from_f32(const float* data, int64_t rows, int64_t cols, DType store_as) {
  check_shape("from_f32", store_as, rows, cols);
  if (store_as == DType::F32) return copy_of(DType::F32, data, rows, cols);
  Weight w;
  w.dtype_ = store_as;
  w.rows_ = rows;
  w.cols_ = cols;
  GLM4_CHECK(data != nullptr || w.bytes() == 0, "[Weight::from_f32] null data for shape (", rows,
             ", ", cols, ")");
  auto buf = std::make_shared<OwnedBuffer>(w.bytes());
  auto* out = static_cast<uint16_t*>(buf->ptr);
  const int64_t n = w.numel();
  if (store_as == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(data[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(data[i]);
  }
  w.data_ = buf->ptr;
  w.owned_ = true;
  w.keep_ = std::move(buf);
  return w;
}

Weight Weight::view(DType dtype, const void* data, int64_t rows, int64_t cols,
                    std::shared_ptr<const void> owner) {
  check_shape("view", dtype, rows, cols);
  Weight w;
  w.dtype_ = dtype;
  w.rows_ = rows;
  w.cols_ = cols;
  GLM4_CHECK(data != nullptr || w.bytes() == 0, "[Weight::view] null data for shape (", rows, ", ",
             cols, ")");
  GLM4_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0, "[Weight::view] ",
             dtype_name(dtype), " data at ", data,
             " is not aligned to its element size; use Weight::copy_of");
  w.data_ = data;
  w.owned_ = false;
  w.keep_ = std::move(owner);
  return w;
}

Weight Weight::quantized_view(const QuantizedMatrix& q, std::shared_ptr<const void> owner) {
  check_quantized(q, "Weight::quantized_view");
  check_shape("quantized_view", q.scale_dtype, q.rows, q.cols);
  Weight w;
  w.dtype_ = q.scale_dtype;
  w.rows_ = q.rows;
  w.cols_ = q.cols;
  w.quantized_ = true;
  w.quant_ = q;
  w.keep_ = std::move(owner);
  return w;
}

Weight Weight::quantized(QuantizedStorage q) {
  auto owned = std::make_shared<OwnedQuant>(std::move(q));
  Weight w = quantized_view(owned->storage.view(), owned);
  w.owned_ = true;
  return w;
}

const QuantizedMatrix& Weight::quant() const {
  GLM4_CHECK(quantized_, "[Weight::quant] a ", dtype_name(dtype_), " weight (", rows_, ", ", cols_,
             ") is not quantized");
  return quant_;
}

void Weight::row_to_f32(int64_t r, float* out) const {
  GLM4_CHECK(r >= 0 && r < rows_, "[Weight::row_to_f32] row ", r, " out of range [0, ", rows_, ")");
  if (quantized_) return dequantize_tile_f32(quant_, r, 1, 0, cols_, out, cols_);
  convert_to_f32(dtype_, element_ptr(dtype_, data_, r * cols_), cols_, out);
}

void Weight::to_f32(float* out) const {
  if (!quantized_) return convert_to_f32(dtype_, data_, numel(), out);
  parallel_for(rows_, 64, [&](int64_t r0, int64_t r1) {
    dequantize_tile_f32(quant_, r0, r1 - r0, 0, cols_, out + r0 * cols_, cols_);
  });
}

}  // namespace glm4
