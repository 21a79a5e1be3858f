#include "train/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/check.h"

namespace glm4 {

void inject_fault(int rank, int64_t step, std::vector<Tensor>& params) {
  const char* spec = std::getenv("GLM4_FAULT");
  if (!spec || !*spec) return;
  int want_rank = -1;
  long long want_step = -1;
  char action[16] = {};
  GLM4_CHECK(std::sscanf(spec, "%d:%lld:%15s", &want_rank, &want_step, action) == 3,
             "GLM4_FAULT=", spec, ": expected RANK:STEP:raise|kill|perturb");
  if (want_rank != rank || want_step != step) return;
  const std::string what = action;
  if (what == "raise") fail("GLM4_FAULT: rank ", rank, " raises at step ", step);
  if (what == "kill") ::kill(::getpid(), SIGKILL);
  GLM4_CHECK(what == "perturb", "GLM4_FAULT=", spec, ": unknown action ", what,
             " (raise, kill or perturb)");
  if (!params.empty() && params[0].numel() > 0) params[0].data()[0] += 1.0f;
}

}  // namespace glm4
