// The decode attention kernel (autograd/kernels/attention_decode.h) against fp64: query rows that
// share their keys and values, values that are the first dims of each key row (latent attention)
// or rows of their own, fp32 and bf16 storage, several key tiles and ranges joined in order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "autograd/kernels/attention_decode.h"
#include "base/dtype.h"

namespace glm4 {
namespace {

struct Shape {
  int64_t rows, d, dv, S;
  bool separate_values;  // values in rows of their own, else the first dv of each key row
};

// max |kernel - fp64| over the outputs, for keys and values held as `bf16` or fp32, the S keys cut
// into ranges of `part` joined.
double worst_error(const Shape& s, bool bf16, int64_t part) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t stride = s.d + 3;  // rows of the cache wider than a key
  std::vector<float> q(size_t(s.rows * s.d)), k(size_t(s.S * stride)), v(size_t(s.S * stride));
  for (float& x : q) x = 0.2f * normal(rng);
  for (auto* t : {&k, &v})
    for (float& x : *t) x = bf16 ? bf16_to_f32(f32_to_bf16(normal(rng))) : normal(rng);
  const std::vector<float>& values = s.separate_values ? v : k;
  std::vector<uint16_t> k16(k.size()), v16(values.size());
  for (size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_bf16(k[i]);
  for (size_t i = 0; i < values.size(); ++i) v16[i] = f32_to_bf16(values[i]);
  kernels::DecodeKeys keys;
  if (bf16) {
    keys.k16 = k16.data();
    keys.v16 = v16.data();
  } else {
    keys.k = k.data();
    keys.v = values.data();
  }
  keys.stride = stride;
  keys.d = s.d;
  keys.dv = s.dv;
  const int64_t parts = (s.S + part - 1) / part;
  std::vector<float> acc(size_t(parts * s.rows * s.dv)), m(size_t(parts * s.rows)),
      l(size_t(parts * s.rows)), out(size_t(s.rows * s.dv));
  std::vector<kernels::DecodePart> pieces;
  for (int64_t i = 0; i < parts; ++i) {
    pieces.push_back(
        {acc.data() + i * s.rows * s.dv, m.data() + i * s.rows, l.data() + i * s.rows});
    kernels::attention_decode_rows(q.data(), s.rows, keys, i * part, std::min(s.S, (i + 1) * part),
                                   pieces.back());
  }
  kernels::join_decode_parts(pieces.data(), parts, s.rows, s.dv, out.data());
  double worst = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    std::vector<double> w(size_t(s.S));
    double top = -1e300, total = 0;
    for (int64_t j = 0; j < s.S; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < s.d; ++c)
        dot += double(q[size_t(r * s.d + c)]) * k[size_t(j * stride + c)];
      top = std::max(top, w[size_t(j)] = dot);
    }
    for (double& x : w) total += x = std::exp(x - top);
    for (int64_t c = 0; c < s.dv; ++c) {
      double want = 0;
      for (int64_t j = 0; j < s.S; ++j)
        want += w[size_t(j)] / total * values[size_t(j * stride + c)];
      worst = std::max(worst, std::abs(double(out[size_t(r * s.dv + c)]) - want));
    }
  }
  return worst;
}

TEST(AttentionDecodeKernel, MatchesFp64ForRowsDimsAndRanges) {
  if (!kernels::attention_decode_available())
    GTEST_SKIP() << "this build has neither AVX-512 nor AVX2";
  const std::vector<Shape> shapes = {
      {20, 576, 512, 300, false},  // GLM-4.7-Flash's 20 heads over latent rows: 5 tiles
      {3, 144, 128, 70, false},    // rows of 2 + 1, a tail of 6 keys
      {6, 128, 128, 130, true},    // grouped-query heads over keys and values
      {32, 24, 16, 65, true},      // the most rows; dims not whole AVX-512 vectors
      {3, 20, 12, 50, true},       // dims not whole AVX2 vectors either
      {2, 13, 13, 70, false},      // fewer dims than one AVX2 vector past the first
      {1, 40, 40, 1, true},        // one key
      {5, 80, 72, 200, false},     // 4 + 1 rows, a masked last vector of values
  };
  // fp32 scores of up to 576 products (about 5 in size here), each summed in 16 lanes on AVX-512,
  // in 8 on AVX2, whose longer lane sums err up to 2.3e-6 on the widest shape
#if defined(__AVX512F__)
  const double bound = 2e-6;
#else
  const double bound = 4e-6;
#endif
  for (const Shape& s : shapes)
    for (const bool bf16 : {false, true})
      for (const int64_t part : {int64_t(1) << 20, int64_t(64), int64_t(37)}) {
        EXPECT_LT(worst_error(s, bf16, part), bound)
            << s.rows << " rows, d " << s.d << ", dv " << s.dv << ", " << s.S << " keys, "
            << (bf16 ? "bf16" : "f32") << ", ranges of " << part;
      }
}

// Latent attention cuts its heads into blocks that are multiples of 4 (mla_latent_decode.cpp) when
// the cache is short: each row's sums must then be those of one call over all rows, bit for bit.
std::vector<float> outputs_in_row_blocks(int64_t rows, int64_t block, int64_t S) {
  const int64_t d = 576, dv = 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t(rows * d)), k(size_t(S * d));
  for (float& x : q) x = 0.05f * normal(rng);
  for (float& x : k) x = normal(rng);
  kernels::DecodeKeys keys;
  keys.k = keys.v = k.data();
  keys.stride = keys.d = d;
  keys.dv = dv;
  std::vector<float> acc(size_t(rows * dv)), m(static_cast<size_t>(rows)),
      l(static_cast<size_t>(rows)), out(acc.size());
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    kernels::attention_decode_rows(q.data() + r0 * d, n, keys, 0, S,
                                   {acc.data() + r0 * dv, m.data() + r0, l.data() + r0});
  }
  const kernels::DecodePart whole{acc.data(), m.data(), l.data()};
  kernels::join_decode_parts(&whole, 1, rows, dv, out.data());
  return out;
}

TEST(AttentionDecodeKernel, RowsInBlocksOfFourGiveTheWholeCallsSums) {
  if (!kernels::attention_decode_available())
    GTEST_SKIP() << "this build has neither AVX-512 nor AVX2";
  for (const int64_t rows : {20, 22, 31})
    for (const int64_t S : {20, 36, 50, 70}) {  // tails of the blocks of 4, 8 and 16 keys
      const std::vector<float> whole = outputs_in_row_blocks(rows, rows, S);
      for (const int64_t block : {4, 8, 12})
        EXPECT_EQ(outputs_in_row_blocks(rows, block, S), whole)
            << rows << " rows in blocks of " << block << ", " << S << " keys";
    }
}

TEST(AttentionDecodeKernel, JoinsNothingToZeros) {
  float m = -INFINITY, l = 0, acc[4] = {1, 2, 3, 4}, out[4] = {9, 9, 9, 9};
  const kernels::DecodePart empty{acc, &m, &l};
  kernels::join_decode_parts(&empty, 1, 1, 4, out);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace glm4
