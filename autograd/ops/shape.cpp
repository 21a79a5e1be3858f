// reshape (a view), transpose, slice, concat and split (contiguous copies).
#include <array>
#include <cstring>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "base/parallel.h"

namespace glm4::ops {

namespace {
int norm_dim(const char* op, const Tensor& x, int d) {
  int r = x.rank();
  int j = d < 0 ? d + r : d;
  GLM4_CHECK(j >= 0 && j < r, "[", op, "] dim ", d, " out of range for shape ",
             shape_str(x.shape()));
  return j;
}

// Views x as [outer, dim, inner] around dimension d.
void split_at(const Shape& s, int d, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < d; ++i) *outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) *inner *= s[i];
}

// Copies x[.., begin:end, ..] along dimension d into out (or adds `src` into that slice of `dst`).
void copy_slice(const Tensor& x, int d, int64_t begin, int64_t end, Tensor& out) {
  int64_t outer, inner;
  split_at(x.shape(), d, &outer, &inner);
  int64_t n = x.shape()[d], len = end - begin;
  const float* px = x.data();
  float* po = out.data();
  parallel_for(outer, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o)
      std::memcpy(po + o * len * inner, px + (o * n + begin) * inner, size_t(len * inner) * 4);
  });
}

void paste_slice(const Tensor& src, int d, int64_t begin, Tensor& dst) {
  int64_t outer, inner;
  split_at(dst.shape(), d, &outer, &inner);
  int64_t n = dst.shape()[d], len = src.shape()[d];
  const float* ps = src.data();
  float* pd = dst.data();
  parallel_for(outer, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o)
      std::memcpy(pd + (o * n + begin) * inner, ps + o * len * inner, size_t(len * inner) * 4);
  });
}
}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape target = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      GLM4_CHECK(infer < 0, "[reshape] more than one -1 in ", shape_str(shape));
      infer = int(i);
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0) {
    GLM4_CHECK(known > 0 && x.numel() % known == 0, "[reshape] cannot view ", shape_str(x.shape()),
               " as ", shape_str(shape));
    target[infer] = x.numel() / known;
  }
  Tensor out = x.view_as_shape(target);
  Shape from = x.shape();
  return record(out, "reshape", {x}, {}, [from](Node&, const Tensor& g) {
    return std::vector<Tensor>{g.view_as_shape(from)};
  });
}

Tensor transpose(const Tensor& x, int d0, int d1) {
  int a = norm_dim("transpose", x, d0), b = norm_dim("transpose", x, d1);
  if (a == b) return x;
  if (a > b) std::swap(a, b);
  // Pad to 4-D [s0, s1, s2, s3] and swap dims a and b.
  Shape s = x.shape();
  int pad = 4 - x.rank();
  std::array<int64_t, 4> dims{1, 1, 1, 1};
  for (int i = 0; i < x.rank(); ++i) dims[pad + i] = s[i];
  std::array<int64_t, 4> in_stride{};
  int64_t st = 1;
  for (int i = 3; i >= 0; --i) {
    in_stride[i] = st;
    st *= dims[i];
  }
  std::array<int64_t, 4> out_dims = dims;
  std::swap(out_dims[pad + a], out_dims[pad + b]);
  std::array<int64_t, 4> src_stride = in_stride;  // stride in x of each output dim
  std::swap(src_stride[pad + a], src_stride[pad + b]);
  Shape out_shape = s;
  std::swap(out_shape[a], out_shape[b]);
  Tensor out = Tensor::empty(out_shape);
  const float* px = x.data();
  float* po = out.data();
  parallel_for(out_dims[0] * out_dims[1], 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ij = lo; ij < hi; ++ij) {
      int64_t i0 = ij / out_dims[1], i1 = ij % out_dims[1];
      float* dst = po + ij * out_dims[2] * out_dims[3];
      for (int64_t i2 = 0; i2 < out_dims[2]; ++i2) {
        const float* src = px + i0 * src_stride[0] + i1 * src_stride[1] + i2 * src_stride[2];
        for (int64_t i3 = 0; i3 < out_dims[3]; ++i3) *dst++ = src[i3 * src_stride[3]];
      }
    }
  });
  return record(out, "transpose", {x}, {},
                [a, b](Node&, const Tensor& g) { return std::vector<Tensor>{transpose(g, a, b)}; });
}

Tensor slice(const Tensor& x, int dim, int64_t begin, int64_t end) {
  int d = norm_dim("slice", x, dim);
  int64_t n = x.shape()[d];
  GLM4_CHECK(0 <= begin && begin <= end && end <= n, "[slice] range [", begin, ", ", end,
             ") of dim ", dim, " of shape ", shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[d] = end - begin;
  Tensor out = Tensor::empty(out_shape);
  copy_slice(x, d, begin, end, out);
  Shape full = x.shape();
  return record(out, "slice", {x}, {}, [full, d, begin](Node&, const Tensor& g) {
    Tensor dx = Tensor::zeros(full);
    paste_slice(g, d, begin, dx);
    return std::vector<Tensor>{dx};
  });
}

Tensor concat(const std::vector<Tensor>& xs, int dim) {
  GLM4_CHECK(!xs.empty(), "[concat] no tensors");
  int d = norm_dim("concat", xs[0], dim);
  Shape out_shape = xs[0].shape();
  out_shape[d] = 0;
  for (const Tensor& x : xs) {
    Shape s = x.shape();
    bool ok = x.rank() == xs[0].rank();
    for (int i = 0; ok && i < x.rank(); ++i) ok = i == d || s[i] == xs[0].shape()[i];
    GLM4_CHECK(ok, "[concat] shapes ", shape_str(xs[0].shape()), " and ", shape_str(s),
               " differ outside dim ", dim);
    out_shape[d] += s[d];
  }
  Tensor out = Tensor::empty(out_shape);
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Tensor& x : xs) {
    paste_slice(x, d, at, out);
    offsets.push_back(at);
    at += x.shape()[d];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) sizes.push_back(x.shape()[d]);
  return record(out, "concat", xs, {}, [d, offsets, sizes](Node& n, const Tensor& g) {
    std::vector<Tensor> grads(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!n.needs_grad(i)) continue;
      Shape s = g.shape();
      s[d] = sizes[i];
      grads[i] = Tensor::empty(s);
      copy_slice(g, d, offsets[i], offsets[i] + sizes[i], grads[i]);
    }
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& x, int dim, const std::vector<int64_t>& sizes) {
  int d = norm_dim("split", x, dim);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  GLM4_CHECK(total == x.shape()[d], "[split] sizes add up to ", total, " but dim ", dim,
             " of shape ", shape_str(x.shape()), " is ", x.shape()[d]);
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, d, at, at + s));
    at += s;
  }
  return parts;
}

}  // namespace glm4::ops
