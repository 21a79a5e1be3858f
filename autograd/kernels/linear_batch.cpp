// linear_forward_batch: the decode kernels' row-range forms behind one parallel loop.
#include "autograd/kernels/linear_batch.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "autograd/kernels/bf16_internal.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/quant_decode_int8.h"
#include "autograd/kernels/quant_kernels.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4 {

namespace {
constexpr int64_t kBlockBytes = 64 << 10;  // weight bytes a block reads, about
constexpr int64_t kBlockRowAlign = 16;     // rows a block holds a multiple of

// One product in its kernel's row-range form, with what the kernel prepared from X (a plain
// struct, not a closure: a decode token sets up hundreds, each a heap allocation as a closure).
struct RowProduct {
  enum class Kernel { kInt8, kQuant, kBf16, kSmallM } kernel = Kernel::kSmallM;
  const LinearProduct* p = nullptr;
  const quant_detail::Int8DecodeInput* int8 = nullptr;  // kInt8
  const quant_detail::QuantKernels* quant = nullptr;    // kQuant
  const void* prepared = nullptr;  // kQuant: X as prepare_x left it; kBf16: X rounded to bf16
  int64_t N = 0, block_rows = 0, blocks = 0;

  // Rows [n0, n1) of Y on the calling thread.
  void rows(int64_t n0, int64_t n1) const {
    const Weight& W = *p->W;
    switch (kernel) {
      case Kernel::kInt8:
        return quant_detail::int8_decode_rows(W.quant(), *int8, 0, p->M, n0, n1, p->Y, N, false);
      case Kernel::kQuant:
        return quant->forward_rows(W.quant(), static_cast<const float*>(prepared), p->M, n0, n1,
                                   p->Y, N, false);
      case Kernel::kBf16:
        return kernels::bf16::avx512_small_forward(static_cast<const uint16_t*>(prepared), p->M,
                                                   W.cols(), static_cast<const uint16_t*>(W.data()),
                                                   N, n0, n1, p->Y, false);
      case Kernel::kSmallM:
        return gemm_detail::small_m_forward_rows(p->X, p->M, W.cols(), W.dtype(), W.data(), N, n0,
                                                 n1, p->Y, false);
    }
  }
};

int64_t weight_row_bytes(const Weight& W) {
  const int64_t bytes = W.is_quantized()
                            ? int64_t(W.quant().bytes()) / std::max<int64_t>(1, W.rows())
                            : W.cols() * int64_t(dtype_size(W.dtype()));
  return std::max<int64_t>(1, bytes);
}

// The int8 forms of one call's inputs: products that read the same rows of X in the same format
// (an expert's gate_proj and up_proj, every expert of a decode token) share one, and the buffers
// are the calling thread's from its earlier calls (a decode token prepares about a thousand).
class Int8Inputs {
 public:
  Int8Inputs() : nested_(depth_++ > 0) {}
  ~Int8Inputs() { --depth_; }
  Int8Inputs(const Int8Inputs&) = delete;
  Int8Inputs& operator=(const Int8Inputs&) = delete;

  // X prepared for q, or nullptr when X holds a non-finite value.
  const quant_detail::Int8DecodeInput* get(const QuantizedMatrix& q, const float* X, int64_t M) {
    for (const Entry& e : entries_)
      if (e.X == X && e.M == M && e.K == q.cols && e.bits == q.bits && e.group == q.group_size)
        return e.in;
    quant_detail::Int8DecodeInput* in = nullptr;
    if (nested_) {
      owned_.push_back(std::make_unique<quant_detail::Int8DecodeInput>());
      in = owned_.back().get();
    } else {
      if (used_ == pool_.size()) pool_.push_back(std::make_unique<quant_detail::Int8DecodeInput>());
      in = pool_[used_++].get();
    }
    if (!quant_detail::prepare_int8_decode_input(q, X, M, *in)) in = nullptr;
    entries_.push_back({X, M, q.cols, q.bits, q.group_size, in});
    return in;
  }

 private:
  struct Entry {
    const float* X;
    int64_t M, K;
    int bits, group;
    const quant_detail::Int8DecodeInput* in;
  };
  static thread_local int depth_;
  static thread_local std::vector<std::unique_ptr<quant_detail::Int8DecodeInput>> pool_;
  bool nested_;
  size_t used_ = 0;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<quant_detail::Int8DecodeInput>> owned_;  // when nested
};
thread_local int Int8Inputs::depth_ = 0;
thread_local std::vector<std::unique_ptr<quant_detail::Int8DecodeInput>> Int8Inputs::pool_;

// The row-range form of p's kernel into `out`, or false when linear_forward runs it otherwise.
// Prepared inputs are kept in `inputs` (or `int8`) until the loop ends.
bool row_form(const LinearProduct& p, const ComputeChoice& compute,
              std::vector<std::shared_ptr<void>>& inputs, Int8Inputs& int8, RowProduct& out) {
  const Weight& W = *p.W;
  const int64_t M = p.M, K = W.cols();
  out.p = &p;
  out.N = W.rows();
  if (W.is_quantized()) {
    if (M > quant_detail::kDecodeMaxM) return false;
    const QuantizedMatrix& q = W.quant();
    if (gemm_detail::use_int8_quant_kernels(W, compute)) {
      out.int8 = int8.get(q, p.X, M);
      out.kernel = RowProduct::Kernel::kInt8;
      if (out.int8) return true;
      // a non-finite X: the fp32 decode kernels carry it, as quant_linear_forward_int8 does
    }
    out.quant = &quant_detail::active();
    auto xp = std::make_shared<std::vector<float>>(size_t(M * K));
    out.quant->prepare_x(q.bits, p.X, M, K, xp->data());
    inputs.push_back(xp);
    out.prepared = xp->data();
    out.kernel = RowProduct::Kernel::kQuant;
    return true;
  }
  if (gemm_detail::use_bf16_kernels(W, M, compute)) {
    if (M > kernels::bf16::kDecodeRows) return false;
    using kernels::bf16::kblocks;
    using kernels::bf16::kKBlock;
    auto xb = std::make_shared<std::vector<uint16_t>>(size_t(M * kblocks(K) * kKBlock));
    kernels::bf16::round_rows_bf16(p.X, M, K, xb->data());
    inputs.push_back(xb);
    out.prepared = xb->data();
    out.kernel = RowProduct::Kernel::kBf16;
    return true;
  }
  out.kernel = RowProduct::Kernel::kSmallM;
  return !(W.dtype() == DType::F16 && gemm_detail::use_bf16_panel_kernels(M, compute)) &&
         M <= gemm_detail::kSmallMForward;
}
}  // namespace

int64_t linear_forward_batch(std::span<const LinearProduct> products,
                             const ComputeChoice& compute) {
  std::vector<RowProduct> batch;
  std::vector<std::shared_ptr<void>> inputs;
  Int8Inputs int8;
  std::vector<int64_t> first_block{0};
  batch.reserve(products.size());
  first_block.reserve(products.size() + 1);
  for (const LinearProduct& p : products) {
    GLM4_CHECK(p.W != nullptr && p.M >= 0, "[linear_forward_batch] product without a weight");
    const int64_t N = p.W->rows();
    if (p.M == 0 || N == 0) continue;
    const ComputeChoice& c = p.compute ? *p.compute : compute;
    RowProduct r;
    if (p.W->cols() == 0 || !row_form(p, c, inputs, int8, r)) {
      linear_forward(p.X, p.M, p.W->cols(), *p.W, p.Y, false, c);
      continue;
    }
    const int64_t want = std::max<int64_t>(1, kBlockBytes / weight_row_bytes(*p.W));
    r.block_rows = (want + kBlockRowAlign - 1) / kBlockRowAlign * kBlockRowAlign;
    r.blocks = (N + r.block_rows - 1) / r.block_rows;
    first_block.push_back(first_block.back() + r.blocks);
    batch.push_back(r);
  }
  parallel_for(first_block.back(), 1, [&](int64_t b0, int64_t b1) {
    size_t i = size_t(std::upper_bound(first_block.begin(), first_block.end(), b0) -
                      first_block.begin() - 1);
    for (int64_t b = b0; b < b1; ++b) {
      while (b >= first_block[i + 1]) ++i;
      const RowProduct& r = batch[i];
      const int64_t n0 = (b - first_block[i]) * r.block_rows;
      r.rows(n0, std::min(r.N, n0 + r.block_rows));
    }
  });
  return int64_t(batch.size());
}

}  // namespace glm4
