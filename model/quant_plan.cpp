// Parsing --keep rules and resolving each module's quantization format.
#include "model/quant_plan.h"

#include <algorithm>
#include <charconv>

#include "base/check.h"

namespace glm4 {

namespace {
int parse_int(std::string_view s, const std::string& flag, const std::string& spec) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  GLM4_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), flag, " ", spec, ": \"",
             s, "\" is not a number (expected PATTERN:BITS, PATTERN:BITS/GROUP or PATTERN:none)");
  return v;
}
}  // namespace

QuantPlan QuantPlan::parse(QuantFormat format, const std::vector<std::string>& specs,
                           const std::string& flag) {
  QuantPlan plan;
  check_quant_format(format, "--bits / --group-size");
  plan.format = format;
  for (const std::string& spec : specs) {
    const size_t colon = spec.rfind(':');
    GLM4_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < spec.size(), flag, " ", spec,
               ": expected PATTERN:BITS, PATTERN:BITS/GROUP or PATTERN:none (e.g. lm_head:8)");
    Rule rule{spec.substr(0, colon), std::nullopt};
    const std::string value = spec.substr(colon + 1);
    if (value != "none") {
      const size_t slash = value.find('/');
      QuantFormat f = format;
      f.bits = parse_int(std::string_view(value).substr(0, slash), flag, spec);
      if (slash != std::string::npos)
        f.group_size = parse_int(std::string_view(value).substr(slash + 1), flag, spec);
      GLM4_CHECK(quant_bits_supported(f.bits), flag, " ", spec, ": bits ", f.bits,
                 " not supported (2, 3, 4, 5, 6 or 8)");
      GLM4_CHECK(quant_group_supported(f.group_size), flag, " ", spec, ": group size ",
                 f.group_size, " not supported (32, 64 or 128)");
      rule.format = f;
    }
    plan.rules.push_back(std::move(rule));
  }
  return plan;
}

void QuantPlan::check_every_rule_matches(const std::vector<std::string>& modules,
                                         const std::string& flag) const {
  for (const Rule& r : rules) {
    const bool used = std::any_of(modules.begin(), modules.end(),
                                  [&](const std::string& m) { return matches(r.pattern, m); });
    GLM4_CHECK(used, flag, " ", r.pattern,
               ": matches no module of the model (a module is a path "
               "such as model.layers.0.mlp.down_proj or its last segments, e.g. down_proj)");
  }
}

bool QuantPlan::matches(const std::string& pattern, const std::string& path) {
  if (pattern == path) return true;
  return path.size() > pattern.size() && path.ends_with(pattern) &&
         path[path.size() - pattern.size() - 1] == '.';
}

std::optional<QuantFormat> QuantPlan::format_for(const std::string& path,
                                                 int64_t in_features) const {
  // glm4_moe's router stays in full precision whatever the rules, as in mlx-lm: it is small, and
  // its logits decide which experts run.
  if (path.ends_with(".mlp.gate")) return std::nullopt;
  std::optional<QuantFormat> f = format;
  for (const Rule& r : rules)
    if (matches(r.pattern, path)) f = r.format;
  if (f && in_features % f->group_size != 0) return std::nullopt;
  return f;
}

}  // namespace glm4
