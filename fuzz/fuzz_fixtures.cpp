#include "fuzz/fuzz_fixtures.h"

#include "io/safetensors.h"

namespace glm4::fuzz {

std::vector<std::pair<std::string, Tensor>> training_params() {
  return {
      {"model.layers.0.self_attn.q_proj.lora_A",
       Tensor::full({2, 4}, 0.5f).set_requires_grad(true)},
      {"model.layers.0.self_attn.q_proj.lora_B", Tensor::zeros({4, 2}).set_requires_grad(true)}};
}

void write_adapter_fixture(const std::filesystem::path& dir, const std::string& format) {
  AdapterFile a;
  a.info.format = format;
  a.info.lora.rank = 2;
  a.info.lora.alpha = 4;
  a.info.lora.targets = {"q_proj", "v_proj"};
  a.info.base_model_name_or_path = "fuzz";
  a.info.scale = 2;
  for (const char* m : {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj"}) {
    AdapterModule mod;
    mod.a_shape = {2, 4};
    mod.b_shape = {4, 2};
    mod.a.assign(8, 0.25f);
    mod.b.assign(8, 0.125f);
    a.modules[m] = mod;
  }
  write_adapter_file(a, dir, format);
}

void write_shard_fixture(const std::filesystem::path& dir) {
  const std::vector<float> v(6, 1.0f);
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {f32_tensor("a", {2, 3}, v.data()), f32_tensor("b", {3}, v.data())});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {f32_tensor("c", {6}, v.data())});
}

}  // namespace glm4::fuzz
