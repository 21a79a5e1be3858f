// Which format each matrix gets when a model is quantized (glm4 quantize, init --bits): one
// default, and --keep rules "MODULE:SPEC" for chosen modules.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "autograd/kernels/quantized_matrix.h"

namespace glm4 {

struct QuantPlan {
  struct Rule {
    std::string pattern;                // a module path, or its last segments ("down_proj")
    std::optional<QuantFormat> format;  // nullopt: keep the module dense
  };
  QuantFormat format;       // every other matrix
  std::vector<Rule> rules;  // later rules win

  // Rules from `specs`, each "PATTERN:BITS", "PATTERN:BITS/GROUP" or "PATTERN:none"; a
  // missing group is the default's. Throws naming `flag` and the spec at fault.
  static QuantPlan parse(QuantFormat format, const std::vector<std::string>& specs,
                         const std::string& flag);

  // The format of module `path` with `in_features` columns: the last matching rule's, else
  // the default; nullopt when dense, or when the group size does not divide in_features
  // (mlx-lm leaves those modules unquantized too), and for glm4_moe's router (PATH.mlp.gate).
  std::optional<QuantFormat> format_for(const std::string& path, int64_t in_features) const;
  // Throws naming `flag` and the rule when a rule names none of `modules` (a typo would
  // otherwise change nothing, silently).
  void check_every_rule_matches(const std::vector<std::string>& modules,
                                const std::string& flag) const;
  // Whether `pattern` names `path`: equal, or equal to its trailing dot-separated segments.
  static bool matches(const std::string& pattern, const std::string& path);
};

}  // namespace glm4
