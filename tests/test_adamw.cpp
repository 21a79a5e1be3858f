// AdamW and clip_grad_norm against torch 1.13 (tests/data/adamw_fixture.json, written by
// tools/reference/adamw_fixture.py): five steps with varying lr, clipping on some steps, and a
// parameter that misses its gradient on one step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "train/adamw.h"
#include "train/grad_clip.h"

namespace glm4 {
namespace {

using nlohmann::json;

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

}  // namespace
}  // namespace glm4
