// mlx's affine format bit for bit against tools/reference/quant_reference.py's fixtures (quantize,
// pack, unpack, dequantize), the quantized kernels against fp64 products on odd shapes for every
// kernel variant this CPU runs, and bad inputs rejected by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/kernels/affine_pack.h"
#include "autograd/kernels/affine_quant.h"
#include "autograd/kernels/gemm.h"
#include "autograd/kernels/quant_linear.h"
#include "autograd/weight.h"
#include "base/check.h"
#include "base/parallel.h"
#include "io/quantized_tensors.h"
#include "io/safetensors.h"
#include "tests/support/random_values.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::random_vec;

using testing::TempDir;
using testing::throws_with;

const int kBits[] = {2, 3, 4, 5, 6, 8};
const int kGroups[] = {32, 64, 128};

std::vector<uint8_t> bytes_of(const TensorInfo& t) {
  const auto* p = reinterpret_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.nbytes);
}

// Runs fn once per kernel variant this CPU supports, then restores the default choice.
template <typename Fn>
void for_each_kernel(Fn&& fn) {
  const std::string initial = quant_kernel_name();
  for (const std::string& name : quant_kernels_supported()) {
    set_quant_kernel(name);
    SCOPED_TRACE("kernel " + name);
    fn(name);
  }
  set_quant_kernel(initial);
}

// A random quantized W [N, K]: weights from N(0, 0.02) with a few outliers, stored as dtype.
QuantizedStorage random_quantized(int64_t N, int64_t K, QuantFormat f, DType dt, uint32_t seed) {
  std::vector<float> w = testing::randn(size_t(N * K), seed, 0.02f);
  for (size_t i = 0; i < w.size(); i += 97) w[i] *= 8.0f;
  Weight stored = Weight::from_f32(w.data(), N, K, dt);
  return quantize_affine(dt, stored.data(), N, K, f, "random");
}

// deq(W) exactly (scale * code + bias in fp64), [N, K].
std::vector<double> exact_dequantized(const QuantizedMatrix& q) {
  std::vector<double> out(size_t(q.rows * q.cols));
  std::vector<uint8_t> codes(size_t(q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    unpack_codes(q.bits, q.row(r), 0, q.cols, codes.data());
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t g = c / q.group_size;
      out[size_t(r * q.cols + c)] = double(q.scale(r, g)) * codes[size_t(c)] + double(q.bias(r, g));
    }
  }
  return out;
}

// C[M, N] = A[M, R] B with B [R, N] (trans_b: B is [N, R]) in fp64, and sum |a b| per element.
void reference(const float* A, const std::vector<double>& B, int64_t M, int64_t N, int64_t R,
               bool trans_b, std::vector<double>* C, std::vector<double>* mag) {
  C->assign(size_t(M * N), 0.0);
  mag->assign(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < R; ++k) {
        const double p =
            double(A[i * R + k]) * (trans_b ? B[size_t(j * R + k)] : B[size_t(k * N + j)]);
        s += p;
        m += std::fabs(p);
      }
      (*C)[size_t(i * N + j)] = s;
      (*mag)[size_t(i * N + j)] = m;
    }
}

// Every element within an fp32 product's rigorous bound, (R + 5) u sum |a b| (one more u than
// an fp32 GEMM for rounding each dequantized weight to fp32), plus the initial value if any.
void expect_close(const std::vector<double>& ref, const std::vector<double>& mag,
                  const std::vector<float>& init, const float* got, int64_t R,
                  const std::string& what) {
  const double u = std::numeric_limits<float>::epsilon() / 2;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = ref[i] + (init.empty() ? 0.0 : double(init[i]));
    const double tol =
        double(R + 5) * u * (mag[i] + (init.empty() ? 0.0 : std::fabs(init[i]))) + 1e-30;
    if (!(std::fabs(double(got[i]) - want) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want << " tol "
                    << tol;
  }
}

// ---------------------------------------------------------------------------------------------
// The format, bit for bit against the fixtures.

struct FixtureCase {
  std::string key;
  int bits, group;
};

std::vector<FixtureCase> fixture_cases() {
  std::vector<FixtureCase> out;
  for (int bits : kBits)
    for (int group : kGroups)
      out.push_back(
          {std::string("b").append(std::to_string(bits)).append("_g").append(std::to_string(group)),
           bits, group});
  return out;
}

// A fixture case as a view: like quantized_module_view, but the fixture stores the packed
// words as I32 (torch 1.13 has no uint32), which the module reader rightly refuses.
QuantizedMatrix fixture_view(const SafetensorsFile& f, const FixtureCase& c) {
  const TensorInfo& packed = f.at(c.key + ".packed");
  const TensorInfo& scales = f.at(c.key + ".scales");
  QuantizedMatrix q;
  q.packed = reinterpret_cast<const uint8_t*>(packed.data);
  q.scales = scales.data;
  q.biases = f.at(c.key + ".biases").data;
  q.scale_dtype = scales.float_dtype();
  q.bits = c.bits;
  q.group_size = c.group;
  q.rows = packed.shape[0];
  q.cols = packed.shape[1] * 32 / c.bits;
  check_quantized(q, c.key);
  return q;
}

class AffineFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    file_ = SafetensorsFile::open(std::string(GLM4_TEST_DATA) + "/quant/affine_" + GetParam() +
                                  ".safetensors");
  }
  std::shared_ptr<SafetensorsFile> file_;
};

TEST_P(AffineFixture, QuantizeMatchesBitForBit) {
  for (const FixtureCase& c : fixture_cases()) {
    SCOPED_TRACE(c.key);
    const TensorInfo& w = file_->at(c.key + ".weight");
    const DType dt = w.float_dtype();
    QuantizedStorage q =
        quantize_affine(dt, w.data, w.shape[0], w.shape[1], {c.bits, c.group}, c.key);
    const auto* packed = reinterpret_cast<const uint8_t*>(q.packed.data());
    EXPECT_EQ(std::vector<uint8_t>(packed, packed + q.packed.size() * 4),
              bytes_of(file_->at(c.key + ".packed")));
    EXPECT_EQ(q.scales, bytes_of(file_->at(c.key + ".scales")));
    EXPECT_EQ(q.biases, bytes_of(file_->at(c.key + ".biases")));
  }
}

TEST_P(AffineFixture, PackAndUnpackMatchTheBitStream) {
  for (const FixtureCase& c : fixture_cases()) {
    SCOPED_TRACE(c.key);
    const TensorInfo& codes = file_->at(c.key + ".codes");
    const std::vector<uint8_t> packed = bytes_of(file_->at(c.key + ".packed"));
    const int64_t rows = codes.shape[0], cols = codes.shape[1], row_bytes = cols * c.bits / 8;
    const std::vector<uint8_t> want = bytes_of(codes);
    std::vector<uint8_t> repacked(size_t(rows * row_bytes)), unpacked(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      pack_codes(c.bits, want.data() + r * cols, cols, repacked.data() + r * row_bytes);
      unpack_codes(c.bits, packed.data() + r * row_bytes, 0, cols, unpacked.data() + r * cols);
    }
    EXPECT_EQ(repacked, packed);
    EXPECT_EQ(unpacked, want);
    // Unpacking from the middle of a row (a multiple of 8 codes in).
    std::vector<uint8_t> middle(40);
    unpack_codes(c.bits, packed.data() + row_bytes, 24, 40, middle.data());
    EXPECT_EQ(middle, std::vector<uint8_t>(want.begin() + cols + 24, want.begin() + cols + 64));
  }
}

TEST_P(AffineFixture, DequantizeMatchesMlxBitForBit) {
  for (const FixtureCase& c : fixture_cases()) {
    SCOPED_TRACE(c.key);
    QuantizedMatrix q = fixture_view(*file_, c);
    const std::vector<uint8_t> want = bytes_of(file_->at(c.key + ".dequantized"));
    std::vector<uint8_t> got(want.size());
    dequantize_affine(q, got.data());
    EXPECT_EQ(got, want);
  }
}

TEST_P(AffineFixture, ProductsMatchTheFp64Reference) {
  const TensorInfo& x = file_->at("x");
  const std::vector<float> X = read_f32(x);
  const int64_t M = x.shape[0], K = x.shape[1];
  for_each_kernel([&](const std::string&) {
    for (const FixtureCase& c : fixture_cases()) {
      SCOPED_TRACE(c.key);
      QuantizedMatrix q = fixture_view(*file_, c);
      const TensorInfo& y = file_->at(c.key + ".y");
      std::vector<double> want(size_t(y.numel()));
      std::memcpy(want.data(), y.data, y.nbytes);
      std::vector<double> ref, mag;
      reference(X.data(), exact_dequantized(q), M, q.rows, K, true, &ref, &mag);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(ref[i], want[i], 1e-12 * (1 + mag[i]));
      std::vector<float> got(size_t(M * q.rows));
      quant_linear_forward(X.data(), M, K, q, got.data(), false);
      expect_close(want, mag, {}, got.data(), K, c.key);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AffineFixture, ::testing::Values("f32", "bf16", "f16"));

TEST(AffineQuant, WrittenModulesReadBackAsTheSameMatrix) {
  TempDir dir;
  for (int bits : kBits) {
    QuantizedStorage q = random_quantized(5, 256, {bits, 32}, DType::F16, uint32_t(bits));
    const std::string module = "model.layers.0.mlp.down_proj";
    write_safetensors(dir / "q.safetensors", quantized_module_tensors(module, q));
    auto file = SafetensorsFile::open(dir / "q.safetensors");
    EXPECT_EQ(file->at(module + ".weight").dtype, "U32");
    EXPECT_EQ(file->at(module + ".weight").shape, (std::vector<int64_t>{5, 256 * bits / 32}));
    EXPECT_EQ(file->at(module + ".scales").dtype, "F16");
    QuantizedMatrix back = quantized_module_view(*file, module, {bits, 32});
    ASSERT_EQ(back.rows, 5);
    ASSERT_EQ(back.cols, 256);
    std::vector<uint16_t> a(5 * 256), b(5 * 256);
    dequantize_affine(q.view(), a.data());
    dequantize_affine(back, b.data());
    EXPECT_EQ(a, b) << bits << " bits";
  }
}

TEST(AffineQuant, RequantizingDequantizedWeightsNeedNotBeIdentical) {
  // Not a property to rely on: mlx's rule re-derives scales from the rounded values.
  QuantizedStorage q = random_quantized(64, 256, {4, 64}, DType::BF16, 5);
  std::vector<uint16_t> deq(size_t(64 * 256));
  dequantize_affine(q.view(), deq.data());
  QuantizedStorage again = quantize_affine(DType::BF16, deq.data(), 64, 256, {4, 64}, "again");
  std::vector<float> a(size_t(64 * 256)), b(a.size());
  dequantize_tile_f32(q.view(), 0, 64, 0, 256, a.data(), 256);
  dequantize_tile_f32(again.view(), 0, 64, 0, 256, b.data(), 256);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(a[i])));
  }
  EXPECT_LT(worst, 0.2 * scale);  // close, usually not equal
}

// ---------------------------------------------------------------------------------------------
// Kernels on odd shapes against fp64.

TEST(QuantKernels, DequantizeTilesAreFmaOfScaleCodeBias) {
  for_each_kernel([&](const std::string&) {
    for (int bits : kBits)
      for (int group : kGroups) {
        QuantizedStorage s = random_quantized(3, 5 * group, {bits, group}, DType::BF16, bits);
        QuantizedMatrix q = s.view();
        std::vector<float> tile(size_t(2 * 3 * group));
        std::vector<uint16_t> tile16(tile.size());
        dequantize_tile_f32(q, 1, 2, group, 3 * group, tile.data(), 3 * group);
        dequantize_tile_bf16(q, 1, 2, group, 3 * group, tile16.data(), 3 * group);
        std::vector<uint8_t> codes(size_t(q.cols));
        for (int64_t r = 1; r < 3; ++r) {
          unpack_codes(bits, q.row(r), 0, q.cols, codes.data());
          for (int64_t c = group; c < 4 * group; ++c) {
            const int64_t g = c / group;
            const float want = std::fma(q.scale(r, g), float(codes[size_t(c)]), q.bias(r, g));
            const size_t at = size_t((r - 1) * 3 * group + c - group);
            ASSERT_EQ(tile[at], want)
                << bits << " bits group " << group << " (" << r << ", " << c << ")";
            ASSERT_EQ(tile16[at], f32_to_bf16(want));
          }
        }
        const int32_t ids[] = {2, 0, 2};
        std::vector<float> rows(size_t(3 * q.cols)), row(size_t(q.cols));
        dequantize_rows_f32(q, ids, 3, rows.data(), "embed_tokens");
        for (int i = 0; i < 3; ++i) {
          dequantize_tile_f32(q, ids[i], 1, 0, q.cols, row.data(), q.cols);
          ASSERT_EQ(std::vector<float>(rows.begin() + i * q.cols, rows.begin() + (i + 1) * q.cols),
                    row);
        }
      }
  });
}

struct Shape {
  int64_t M, N, K;
};

// Forward and input gradient of q with M rows, accumulating or not, against fp64, on every
// kernel variant this CPU runs (the references are computed once).
void check_products(const QuantizedMatrix& q, int64_t M, const std::string& what) {
  const int64_t N = q.rows, K = q.cols;
  const std::vector<double> deq = exact_dequantized(q);
  const std::vector<float> X = random_vec(M * K, uint32_t(M + 7));
  const std::vector<float> dY = random_vec(M * N, uint32_t(M + 11));
  std::vector<double> y_ref, y_mag, dx_ref, dx_mag;
  reference(X.data(), deq, M, N, K, true, &y_ref, &y_mag);
  reference(dY.data(), deq, M, K, N, false, &dx_ref, &dx_mag);  // deq read as B [N, K]
  for (bool acc : {false, true}) {
    const std::vector<float> y0 = acc ? random_vec(M * N, 3) : std::vector<float>();
    const std::vector<float> dx0 = acc ? random_vec(M * K, 4) : std::vector<float>();
    for_each_kernel([&](const std::string& kernel) {
      const std::string name =
          what + " M=" + std::to_string(M) + " acc=" + std::to_string(acc) + " " + kernel;
      std::vector<float> Y = acc ? y0 : std::vector<float>(size_t(M * N), std::nanf(""));
      quant_linear_forward(X.data(), M, K, q, Y.data(), acc);
      expect_close(y_ref, y_mag, y0, Y.data(), K, "forward " + name);
      std::vector<float> dX = acc ? dx0 : std::vector<float>(size_t(M * K), std::nanf(""));
      quant_linear_input_grad(dY.data(), M, N, q, dX.data(), acc);
      expect_close(dx_ref, dx_mag, dx0, dX.data(), N, "input_grad " + name);
    });
  }
}

TEST(QuantKernels, EveryWidthAndGroupMatchesFp64OnOddShapes) {
  for (int bits : kBits)
    for (int group : kGroups) {
      // K a multiple of the group but not of 256; N odd.
      QuantizedStorage s = random_quantized(37, 5 * group, {bits, group}, DType::BF16, 17);
      const std::string what = std::to_string(bits) + " bits group " + std::to_string(group);
      for (int64_t M : {1, 2, 3, 4, 5, 17, 150}) check_products(s.view(), M, what);
    }
}

TEST(QuantKernels, PrefillSizedProductsMatchFp64) {
  for (int bits : {3, 4, 8}) {
    const DType dt = bits == 4 ? DType::F16 : DType::F32;
    QuantizedStorage s = random_quantized(300, 640, {bits, 64}, dt, 23);
    check_products(s.view(), 300, std::to_string(bits) + " bits " + dtype_name(dt));
  }
}

TEST(QuantKernels, ErrorNoWorseThanTheFp32Gemm) {
  // Root-mean-square error against fp64 of the quantized kernels and of the fp32 GEMM on the
  // same fp32-dequantized weights; the quantized kernels do the same fp32 arithmetic.
  QuantizedStorage s = random_quantized(256, 1024, {4, 64}, DType::BF16, 31);
  QuantizedMatrix q = s.view();
  std::vector<float> deq32(size_t(256 * 1024));
  dequantize_tile_f32(q, 0, 256, 0, 1024, deq32.data(), 1024);
  const Weight dense = Weight::from_f32(deq32.data(), 256, 1024);
  const std::vector<double> exact = exact_dequantized(q);
  for_each_kernel([&](const std::string& name) {
    for (int64_t M : {1, 4, 64}) {
      // rms error of the quantized kernel's result against fp64, no worse than the fp32 GEMM's
      auto expect_no_worse = [&](const char* what, const std::vector<float>& quant,
                                 const std::vector<float>& dense_result,
                                 const std::vector<double>& ref) {
        double eq = 0, ed = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          eq += (quant[i] - ref[i]) * (quant[i] - ref[i]);
          ed += (dense_result[i] - ref[i]) * (dense_result[i] - ref[i]);
        }
        EXPECT_LE(std::sqrt(eq), 1.5 * std::sqrt(ed) + 1e-12)
            << name << " M=" << M << " " << what << ": rms error " << std::sqrt(eq / ref.size())
            << " vs fp32 GEMM " << std::sqrt(ed / ref.size());
      };
      const std::vector<float> X = random_vec(M * 1024, 41);
      std::vector<double> ref, mag;
      reference(X.data(), exact, M, 256, 1024, true, &ref, &mag);
      std::vector<float> yq(size_t(M * 256)), yd(yq.size());
      quant_linear_forward(X.data(), M, 1024, q, yq.data(), false);
      linear_forward(X.data(), M, 1024, dense, yd.data(), false, kF32Compute);
      expect_no_worse("forward", yq, yd, ref);
      // From 5 rows on the input gradient runs the training-sized tile kernels.
      const std::vector<float> dY = random_vec(M * 256, 43);
      reference(dY.data(), exact, M, 1024, 256, false, &ref, &mag);
      std::vector<float> dxq(size_t(M * 1024)), dxd(dxq.size());
      quant_linear_input_grad(dY.data(), M, 256, q, dxq.data(), false);
      linear_input_grad(dY.data(), M, 256, dense, dxd.data(), false, kF32Compute);
      expect_no_worse("input gradient", dxq, dxd, ref);
    }
  });
}

TEST(QuantKernels, ResultsDoNotDependOnTheThreadCount) {
  QuantizedStorage s = random_quantized(1000, 1024, {4, 64}, DType::BF16, 43);
  QuantizedStorage s8 = random_quantized(1000, 1024, {8, 64}, DType::BF16, 47);
  for_each_kernel([&](const std::string&) {
    for (const QuantizedStorage* st : {&s, &s8})
      for (int64_t M : {1, 3, 17, 300}) {
        const QuantizedMatrix q = st->view();
        const std::vector<float> X = random_vec(M * 1024, 5), dY = random_vec(M * 1000, 6);
        std::vector<float> y[2], dx[2];
        for (int t : {1, 2}) {
          set_max_threads(t);
          y[t - 1].assign(size_t(M * 1000), 0.0f);
          dx[t - 1].assign(size_t(M * 1024), 0.0f);
          quant_linear_forward(X.data(), M, 1024, q, y[t - 1].data(), false);
          quant_linear_input_grad(dY.data(), M, 1000, q, dx[t - 1].data(), false);
        }
        set_max_threads(0);
        EXPECT_EQ(y[0], y[1]) << st->bits << " bits M=" << M;
        EXPECT_EQ(dx[0], dx[1]) << st->bits << " bits M=" << M;
      }
  });
}

TEST(QuantKernels, EmptyShapes) {
  QuantizedStorage s = random_quantized(0, 64, {4, 64}, DType::F32, 1);
  float x[64] = {}, y[1] = {7};
  quant_linear_forward(x, 1, 64, s.view(), y, false);
  EXPECT_EQ(y[0], 7.0f);
  QuantizedStorage e = random_quantized(3, 0, {4, 64}, DType::F32, 1);
  float out[3] = {1, 2, 3};
  quant_linear_forward(x, 1, 0, e.view(), out, true);
  EXPECT_EQ(out[2], 3.0f);
  quant_linear_forward(x, 1, 0, e.view(), out, false);
  EXPECT_EQ(out[2], 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Bad inputs, rejected by name.

struct ModuleFile {
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;
};

// Writes MODULE.weight U32 [rows, words], .scales / .biases BF16 [rows, groups] (biases only if
// `biases`) and opens the file.
std::shared_ptr<SafetensorsFile> module_file(const TempDir& dir, int64_t rows, int64_t words,
                                             int64_t groups, bool biases,
                                             const char* weight_dtype = "U32") {
  static ModuleFile keep;
  keep.words.assign(size_t(rows * words), 0x12345678u);
  keep.scales.assign(size_t(rows * groups), f32_to_bf16(0.5f));
  keep.biases.assign(size_t(rows * groups), f32_to_bf16(-1.0f));
  std::vector<TensorToWrite> t = {
      {"layer.q_proj.weight",
       weight_dtype,
       {rows, words},
       keep.words.data(),
       keep.words.size() * 4},
      {"layer.q_proj.scales", "BF16", {rows, groups}, keep.scales.data(), keep.scales.size() * 2}};
  if (biases)
    t.push_back({"layer.q_proj.biases",
                 "BF16",
                 {rows, groups},
                 keep.biases.data(),
                 keep.biases.size() * 2});
  write_safetensors(dir / "m.safetensors", t);
  return SafetensorsFile::open(dir / "m.safetensors");
}

TEST(QuantErrors, BadModulesAreRejectedByName) {
  TempDir dir;
  // 4 bits, group 64, in 256: 32 words, 4 groups a row.
  auto good = module_file(dir, 3, 32, 4, true);
  QuantizedMatrix q = quantized_module_view(*good, "layer.q_proj", {4, 64});
  EXPECT_EQ(q.rows, 3);
  EXPECT_EQ(q.cols, 256);
  EXPECT_EQ(q.scale_dtype, DType::BF16);

  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*good, "layer.q_proj", {7, 64});
      },
      {"layer.q_proj", "bits 7 not supported"}));
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*good, "layer.q_proj", {1, 64});
      },
      {"layer.q_proj", "bits 1"}));
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*good, "layer.q_proj", {4, 48});
      },
      {"layer.q_proj", "group_size 48 not supported"}));
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*good, "layer.k_proj", {4, 64});
      },
      {"layer.k_proj.weight missing"}));
  // Wrong packed shape: 30 words are 240 codes, which needs scales [3, 15] at group 16... and
  // 240 is no multiple of 64.
  auto narrow = module_file(dir, 3, 30, 4, true);
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*narrow, "layer.q_proj", {4, 64});
      },
      {"layer.q_proj", "group_size 64 does not divide in_features 240"}));
  // 40 words = 320 codes = 5 groups, but the scales say 4.
  auto wide = module_file(dir, 3, 40, 4, true);
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*wide, "layer.q_proj", {4, 64});
      },
      {"layer.q_proj.weight [3, 40]", "needs scales [3, 5], got [3, 4]"}));
  // 3 bits: 32 words = 1024 bits, not a whole number of codes.
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*good, "layer.q_proj", {3, 64});
      },
      {"layer.q_proj.weight [3, 32]", "whole number of 3-bit codes"}));
  auto no_biases = module_file(dir, 3, 32, 4, false);
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*no_biases, "layer.q_proj", {4, 64});
      },
      {"layer.q_proj.biases missing"}));
  auto float_weight = module_file(dir, 3, 32, 4, true, "F32");
  EXPECT_TRUE(throws_with(
      [&] {
        quantized_module_view(*float_weight, "layer.q_proj", {4, 64});
      },
      {"layer.q_proj.weight", "U32", "got F32"}));
}

TEST(QuantErrors, QuantizeAndKernelsRejectBadArguments) {
  std::vector<float> w(3 * 96, 0.5f);
  EXPECT_TRUE(throws_with(
      [&] {
        quantize_affine(DType::F32, w.data(), 3, 96, {4, 64}, "mlp.down_proj");
      },
      {"mlp.down_proj", "group_size 64 does not divide in_features 96"}));
  EXPECT_TRUE(throws_with(
      [&] {
        quantize_affine(DType::F32, w.data(), 3, 96, {9, 32}, "mlp.down_proj");
      },
      {"mlp.down_proj", "bits 9 not supported"}));
  QuantizedStorage s = quantize_affine(DType::F32, w.data(), 3, 96, {4, 32}, "w");
  QuantizedMatrix q = s.view();
  std::vector<float> x(2 * 64), y(2 * 3);
  EXPECT_TRUE(throws_with([&] { quant_linear_forward(x.data(), 2, 64, q, y.data(), false); },
                          {"quant_linear_forward", "X [2, 64]", "W [3, 96]"}));
  EXPECT_TRUE(throws_with([&] { quant_linear_input_grad(x.data(), 2, 4, q, y.data(), false); },
                          {"quant_linear_input_grad", "dY [2, 4]"}));
  QuantizedMatrix no_biases = q;
  no_biases.biases = nullptr;
  EXPECT_TRUE(
      throws_with([&] { quant_linear_forward(x.data(), 1, 96, no_biases, y.data(), false); },
                  {"biases are null"}));
  const int32_t ids[] = {1, 3};
  EXPECT_TRUE(throws_with([&] { dequantize_rows_f32(q, ids, 2, x.data(), "embed_tokens"); },
                          {"embed_tokens", "id 3", "vocabulary of 3"}));
  EXPECT_TRUE(throws_with([&] { set_quant_kernel("neon"); }, {"unknown kernel 'neon'"}));
}

}  // namespace
}  // namespace glm4
