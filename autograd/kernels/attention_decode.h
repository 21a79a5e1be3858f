// The attention of one decode step for query rows that read the same cached keys and values (the
// query heads of latent attention, which share one latent "head"): the scores as register blocks
// of 16 (row, key) dot products summed across their lanes together, the weighted sums of the
// values as register blocks of rows x dims, an online softmax between key tiles. Keys and values
// are read in place, fp32 or bf16 (widened as they are loaded). Built for AVX-512
// (attention_decode.cpp) and for AVX2 without it (attention_decode_avx2.cpp); elsewhere the
// callers keep their own loops.
#pragma once
#include <cstdint>

namespace glm4::kernels {

// The most query rows one call takes.
constexpr int64_t kDecodeMaxRows = 32;

// Whether this build has the kernel (AVX-512 with BW and VL, or AVX2 with FMA).
bool attention_decode_available();

// The keys and values the rows attend to: key j's d values at k + j * stride, value j's dv at
// v + j * stride (v may be k: values that are the first dv of each key). One of f32 / bf16 set.
struct DecodeKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  const uint16_t* k16 = nullptr;  // bf16 keys and values instead
  const uint16_t* v16 = nullptr;
  int64_t stride = 0, d = 0, dv = 0;
};

// q [rows, d] (already scaled) against keys and values j in [lo, hi): acc [rows, dv] gets the
// weighted sums of the values before division, m [rows] the largest score and l [rows] the sum
// of exp(score - m). Needs lo < hi and 1 <= rows <= kDecodeMaxRows.
struct DecodePart {
  float* acc;
  float* m;
  float* l;
};
void attention_decode_rows(const float* q, int64_t rows, const DecodeKeys& keys, int64_t lo,
                           int64_t hi, const DecodePart& out);

// The parts of consecutive key ranges joined in order: out [rows, dv] = the softmax-weighted sum
// of the values over all of them (the parts are only read), and where given lse [rows] (entries
// lse_stride apart) each row's log-sum-exp. Rows that saw nothing give zeros and +inf.
void join_decode_parts(const DecodePart* parts, int64_t count, int64_t rows, int64_t dv, float* out,
                       float* lse = nullptr, int64_t lse_stride = 1);

}  // namespace glm4::kernels
