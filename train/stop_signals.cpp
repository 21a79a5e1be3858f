// The handlers only set a flag (and say so on stderr with write(2), which a handler may call).
#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace glm4 {

namespace {
volatile sig_atomic_t g_received = 0;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  if (g_received != 0) _exit(128 + sig);
  g_received = sig;
  const char* text =
      "\nglm4: stopping after this step and saving it (press Ctrl-C again to quit at once)\n";
  if (write(STDERR_FILENO, text, strlen(text)) < 0) {
  }
}
}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_old_int);
  sigaction(SIGTERM, &action, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::received() const { return g_received; }

}  // namespace glm4
