// AdamW (train/adamw.h). Against torch 1.13 with clip_grad_norm (tests/data/adamw_fixture.json,
// written by tools/reference/adamw_fixture.py): five steps with varying lr, clipping on some steps,
// and a parameter that misses its gradient on one step. Then its bookkeeping: parallel update,
// parameters without gradients, errors, load_state, and the sharded optimizer (ZeRO stage 1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "tests/support/expect_error.h"
#include "tests/support/random_values.h"
#include "train/adamw.h"
#include "train/grad_clip.h"

namespace glm4 {
namespace {

using glm4::testing::expect_error;
using nlohmann::json;

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return Tensor::from(shape, testing::randn(size_t(shape_numel(shape)), seed, scale));
}

json load_fixture() {
  std::ifstream f(std::string(GLM4_TEST_DATA) + "/adamw_fixture.json");
  EXPECT_TRUE(f.good()) << "missing adamw_fixture.json";
  return json::parse(f);
}

std::vector<float> floats(const json& j) {
  std::vector<float> v;
  for (const json& x : j) v.push_back(float(x.get<double>()));
  return v;
}

struct Fixture {
  json j = load_fixture();
  std::vector<std::string> names;
  std::vector<Tensor> params;
  AdamWOptions options;

  Fixture() {
    for (const json& p : j["params"]) {
      names.push_back(p["name"]);
      params.push_back(
          Tensor::from(p["shape"].get<Shape>(), floats(p["init"])).set_requires_grad(true));
    }
    options.beta1 = j["betas"][0];
    options.beta2 = j["betas"][1];
    options.eps = j["eps"];
    options.weight_decay = j["weight_decay"];
  }
  AdamW make_optimizer() const {
    std::vector<std::pair<std::string, Tensor>> named;
    for (size_t i = 0; i < names.size(); ++i) named.emplace_back(names[i], params[i]);
    return AdamW(named, options);
  }
  // Sets each parameter's gradient from step[key][name] (none where the fixture has null).
  void set_grads(const json& step, const char* key) {
    for (size_t i = 0; i < names.size(); ++i) {
      params[i].zero_grad();
      const json& g = step[key][names[i]];
      if (!g.is_null()) params[i].set_grad(Tensor::from(params[i].shape(), floats(g)));
    }
  }
};

// |a - b| <= 1e-6 |b| elementwise; returns how many elements differ in any bit.
int expect_close(const Tensor& got, const json& want, const std::string& what) {
  std::vector<float> w = floats(want);
  std::vector<float> g = got.to_vector();
  EXPECT_EQ(g.size(), w.size()) << what;
  int differing = 0;
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    EXPECT_LE(std::fabs(double(g[i]) - w[i]), 1e-6 * std::fabs(double(w[i])) + 1e-30)
        << what << "[" << i << "]: " << g[i] << " vs torch " << w[i];
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) ++differing;
  }
  return differing;
}

TEST(AdamWFixture, FiveStepsMatchTorchBitForBitGivenTorchsClippedGradients) {
  Fixture fx;
  AdamW opt = fx.make_optimizer();
  int differing = 0;
  for (size_t s = 0; s < fx.j["steps"].size(); ++s) {
    const json& step = fx.j["steps"][s];
    fx.set_grads(step, "clipped");
    opt.step(step["lr"].get<double>());
    for (size_t i = 0; i < fx.names.size(); ++i)
      differing += expect_close(fx.params[i], step["params_after"][fx.names[i]],
                                "step " + std::to_string(s) + " " + fx.names[i]);
  }
  // Same float constants and operation order as torch's kernels: not even one ulp apart.
  EXPECT_EQ(differing, 0);
  EXPECT_EQ(opt.step_count(), 5);
  for (size_t i = 0; i < fx.names.size(); ++i) {
    const json& st = fx.j["final_state"][fx.names[i]];
    EXPECT_EQ(opt.param_steps()[i], st["step"].get<int64_t>()) << fx.names[i];
    EXPECT_EQ(expect_close(opt.exp_avg()[i], st["exp_avg"], fx.names[i] + ".exp_avg"), 0);
    EXPECT_EQ(expect_close(opt.exp_avg_sq()[i], st["exp_avg_sq"], fx.names[i] + ".exp_avg_sq"), 0);
  }
  EXPECT_EQ(opt.param_steps()[2], 4);  // "c" had no gradient on step 3
}

TEST(AdamWFixture, ClipGradNormMatchesTorch) {
  Fixture fx;
  int clipped_steps = 0, unclipped_steps = 0;
  for (const json& step : fx.j["steps"]) {
    fx.set_grads(step, "grads");
    const double norm = clip_grad_norm(fx.params, fx.j["max_norm"].get<double>());
    EXPECT_NEAR(norm, step["grad_norm_f64"].get<double>(), 1e-12 * norm);
    EXPECT_NEAR(norm, step["grad_norm"].get<double>(), 1e-6 * norm);
    (norm > fx.j["max_norm"].get<double>() ? clipped_steps : unclipped_steps)++;
    for (size_t i = 0; i < fx.names.size(); ++i) {
      const json& want = step["clipped"][fx.names[i]];
      if (want.is_null()) {
        EXPECT_FALSE(fx.params[i].grad().defined());
        continue;
      }
      expect_close(fx.params[i].grad(), want, "clipped grad " + fx.names[i]);
    }
  }
  EXPECT_GT(clipped_steps, 0);  // the fixture exercises both branches
  EXPECT_GT(unclipped_steps, 0);
}

TEST(AdamWFixture, ClipThenStepChainedMatchesTorch) {
  Fixture fx;
  AdamW opt = fx.make_optimizer();
  for (const json& step : fx.j["steps"]) {
    fx.set_grads(step, "grads");
    clip_grad_norm(fx.params, fx.j["max_norm"].get<double>());
    opt.step(step["lr"].get<double>());
  }
  const json& last = fx.j["steps"].back();
  for (size_t i = 0; i < fx.names.size(); ++i)
    expect_close(fx.params[i], last["params_after"][fx.names[i]], "chained " + fx.names[i]);
}

TEST(AdamWFixture, ResumingFromSavedStateContinuesIdentically) {
  Fixture full, resumed;
  AdamW a = full.make_optimizer();
  for (const json& step : full.j["steps"]) {
    full.set_grads(step, "clipped");
    a.step(step["lr"].get<double>());
  }
  // Run 3 steps, then hand params and state to a fresh optimizer for the last 2.
  std::vector<Tensor> m, v;
  std::vector<int64_t> steps;
  int64_t count = 0;
  {
    AdamW b = resumed.make_optimizer();
    for (int s = 0; s < 3; ++s) {
      resumed.set_grads(resumed.j["steps"][s], "clipped");
      b.step(resumed.j["steps"][s]["lr"].get<double>());
    }
    for (size_t i = 0; i < b.exp_avg().size(); ++i) {
      m.push_back(b.exp_avg()[i].clone());
      v.push_back(b.exp_avg_sq()[i].clone());
    }
    steps = b.param_steps();
    count = b.step_count();
  }
  AdamW c = resumed.make_optimizer();
  c.load_state(count, m, v, steps);
  for (int s = 3; s < 5; ++s) {
    resumed.set_grads(resumed.j["steps"][s], "clipped");
    c.step(resumed.j["steps"][s]["lr"].get<double>());
  }
  EXPECT_EQ(c.step_count(), 5);
  for (size_t i = 0; i < full.params.size(); ++i)
    EXPECT_EQ(full.params[i].to_vector(), resumed.params[i].to_vector()) << full.names[i];
}

// --- AdamW bookkeeping ---

TEST(AdamW, ParallelUpdateOfALargeTensorEqualsSerialUpdatesOfItsPieces) {
  const int64_t n = 100000, pieces = 10;
  Tensor big = random_tensor({n}, 1).set_requires_grad(true);
  std::vector<std::pair<std::string, Tensor>> small;
  for (int64_t i = 0; i < pieces; ++i) {
    std::vector<float> v(big.data() + i * n / pieces, big.data() + (i + 1) * n / pieces);
    small.emplace_back(str_cat("p", i), Tensor::from({n / pieces}, v).set_requires_grad(true));
  }
  AdamW a({{"big", big}}, {});
  AdamW b(small, {});
  for (int step = 0; step < 3; ++step) {
    Tensor g = random_tensor({n}, 100 + step, 0.1f);
    big.set_grad(g);
    for (int64_t i = 0; i < pieces; ++i) {
      std::vector<float> v(g.data() + i * n / pieces, g.data() + (i + 1) * n / pieces);
      small[size_t(i)].second.set_grad(Tensor::from({n / pieces}, v));
    }
    a.step(1e-3 * (step + 1));
    b.step(1e-3 * (step + 1));
  }
  std::vector<float> joined;
  for (auto& [name, t] : small)
    for (float x : t.to_vector()) joined.push_back(x);
  EXPECT_EQ(big.to_vector(), joined);
  EXPECT_NE(big.to_vector(), random_tensor({n}, 1).to_vector());  // it did move
}

TEST(AdamW, ParametersWithoutGradientsAreNotTouched) {
  Tensor a = Tensor::from({2}, {1, 2}).set_requires_grad(true);
  Tensor b = Tensor::from({2}, {3, 4}).set_requires_grad(true);
  AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.1, .weight_decay = 0.5});
  a.set_grad(Tensor::from({2}, {1, -1}));
  opt.step();
  EXPECT_EQ(b.to_vector(), (std::vector<float>{3, 4}));  // not even weight decay
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(opt.step_count(), 1);
  // First step: m/(1-b1) = g, sqrt(v/(1-b2)) = |g|, so p = p(1 - lr wd) - lr sign(g) (+eps).
  EXPECT_NEAR(a.to_vector()[0], 1 * (1 - 0.05) - 0.1, 1e-6);
  EXPECT_NEAR(a.to_vector()[1], 2 * (1 - 0.05) + 0.1, 1e-6);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, ErrorsNameTheParameter) {
  Tensor a = Tensor::zeros({2, 3}).set_requires_grad(true);
  expect_error([&] { AdamW({{"w", a}, {"w", a}}, {}); }, "parameter name 'w' appears twice");
  expect_error([&] { AdamW({{"w", Tensor()}}, {}); }, "'w' is an undefined tensor");
  expect_error([&] { AdamW({{"w", a}}, {.beta1 = 1.0}); }, "beta1 must be in [0, 1)");
  expect_error([&] { AdamW({{"w", a}}, {.beta2 = -0.1}); }, "beta2 must be in [0, 1)");
  expect_error([&] { AdamW({{"w", a}}, {.eps = -1}); }, "eps must be >= 0");
  expect_error([&] { AdamW({{"w", a}}, {.weight_decay = -1}); }, "weight_decay must be >= 0");
  AdamW opt({{"w", a}}, {});
  expect_error([&] { opt.step(-1.0); }, "learning rate must be finite and >= 0");
  a.set_grad(Tensor::zeros({3, 2}));
  expect_error([&] { opt.step(1e-3); }, "gradient of 'w' has shape (3,2), parameter has (2,3)");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({6})}, {Tensor::zeros({2, 3})});
      },
      "exp_avg of 'w' has shape (6), parameter has (2,3)");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({2, 3})}, {Tensor::zeros({3, 2})});
      },
      "exp_avg_sq of 'w' has shape (3,2)");
  expect_error([&] { opt.load_state(1, {}, {}); }, "1 parameters but 0 exp_avg");
  expect_error(
      [&] {
        opt.load_state(1, {Tensor::zeros({2, 3})}, {Tensor::zeros({2, 3})}, {5});
      },
      "step 5 of 'w' is outside [0, 1]");
}

TEST(AdamW, LoadStateCopiesValuesAndSteps) {
  Tensor a = Tensor::zeros({2}).set_requires_grad(true);
  AdamW opt({{"a", a}}, {});
  opt.load_state(7, {Tensor::from({2}, {1, 2})}, {Tensor::from({2}, {3, 4})});
  EXPECT_EQ(opt.step_count(), 7);
  EXPECT_EQ(opt.param_steps(), (std::vector<int64_t>{7}));
  EXPECT_EQ(opt.exp_avg()[0].to_vector(), (std::vector<float>{1, 2}));
  EXPECT_EQ(opt.exp_avg_sq()[0].to_vector(), (std::vector<float>{3, 4}));
}

// ZeRO stage 1: optimizers owning complementary pieces of each parameter, put together, make the
// update of one optimizer owning all, bit for bit; load_state keeps each one's piece.
TEST(ShardedAdamW, PiecesMakeTheWholeUpdate) {
  const Shape shape{7, 9};
  const int64_t n = 63;
  Tensor whole = random_tensor(shape, 1).set_requires_grad(true);
  Tensor other = random_tensor({5}, 2).set_requires_grad(true);
  std::vector<Tensor> copy_a{whole.clone().set_requires_grad(true),
                             other.clone().set_requires_grad(true)};
  std::vector<Tensor> copy_b{whole.clone().set_requires_grad(true),
                             other.clone().set_requires_grad(true)};
  AdamWOptions o{.lr = 1e-2, .weight_decay = 0.1};
  AdamW full({{"w", whole}, {"o", other}}, o);
  AdamW a({{"w", copy_a[0]}, {"o", copy_a[1]}}, o, {{0, 20}, {0, 5}});
  AdamW b({{"w", copy_b[0]}, {"o", copy_b[1]}}, o, {{20, n}, {5, 5}});
  EXPECT_EQ(a.exp_avg()[0].shape(), (Shape{20}));
  EXPECT_EQ(a.exp_avg()[1].shape(), (Shape{5}));  // all of it: the parameter's shape
  EXPECT_EQ(b.exp_avg()[1].shape(), (Shape{0}));
  std::vector<Tensor> originals{whole, other};
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < 2; ++i) {
      Tensor g = random_tensor(i == 0 ? shape : Shape{5}, 10 + step * 2 + i, 0.1f);
      originals[size_t(i)].set_grad(g);
      copy_a[size_t(i)].set_grad(g.clone());
      copy_b[size_t(i)].set_grad(g.clone());
    }
    full.step(1e-2);
    a.step(1e-2);
    b.step(1e-2);
  }
  std::vector<float> joined = copy_a[0].to_vector(), tail = copy_b[0].to_vector();
  std::copy(tail.begin() + 20, tail.end(), joined.begin() + 20);
  EXPECT_EQ(joined, whole.to_vector());
  EXPECT_EQ(copy_a[1].to_vector(), other.to_vector());
  EXPECT_EQ(b.param_steps(), full.param_steps());  // an empty piece still counts its steps
  std::vector<float> m = full.exp_avg()[0].to_vector();
  EXPECT_EQ(b.exp_avg()[0].to_vector(), std::vector<float>(m.begin() + 20, m.end()));

  AdamW fresh({{"w", copy_b[0]}, {"o", copy_b[1]}}, o, {{20, n}, {5, 5}});
  fresh.load_state(full.step_count(), full.exp_avg(), full.exp_avg_sq());
  std::vector<float> v = full.exp_avg_sq()[0].to_vector();
  EXPECT_EQ(fresh.exp_avg_sq()[0].to_vector(), std::vector<float>(v.begin() + 20, v.end()));
  EXPECT_THROW(AdamW({{"w", whole}}, o, {{5, 64}}), Error);
}

}  // namespace
}  // namespace glm4
