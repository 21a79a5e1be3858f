// Ctrl-C (SIGINT) and SIGTERM during training: the first asks the loop to stop after the step at
// hand, which it saves as a periodic save does; a second one ends the process at once with status
// 128 + signal.
#pragma once

namespace glm4 {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (one object at a time)
  ~StopSignals();  // puts the earlier handlers back
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int received() const;  // the first signal received, or 0
};

}  // namespace glm4
