// The group of one process (no communication: every collective is a copy) and the default
// thread count of a rank; shared by the MPI and the no-MPI builds.
#include "train/distributed.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/check.h"

namespace glm4 {

namespace {
class SingleProcess final : public Distributed {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  std::vector<std::vector<double>> allgather(const std::vector<double>& values) override {
    return {values};
  }
  std::vector<uint64_t> allgather(uint64_t value) override { return {value}; }
  void sum(std::vector<int64_t>&) override {}
  Request exchange(const float* send, const std::vector<int64_t>& counts, float* recv) override {
    copy(send, counts, recv);
    return 0;
  }
  Request allgather(const float* piece, const std::vector<int64_t>& counts, float* out) override {
    copy(piece, counts, out);
    return 0;
  }
  bool test(Request) override { return true; }
  void wait(Request) override {}
  void gather(const float* piece, const std::vector<int64_t>& counts, float* out) override {
    copy(piece, counts, out);
  }
  void end_job(const std::string& message) override {
    std::fprintf(stderr, "glm4: error: %s\n", message.c_str());
  }

 private:
  static void copy(const float* from, const std::vector<int64_t>& counts, float* to) {
    GLM4_CHECK(counts.size() == 1, "[distributed] a group of one got ", counts.size(),
               " piece counts");
    if (counts[0] > 0 && from != to) std::memmove(to, from, size_t(counts[0]) * sizeof(float));
  }
};
}  // namespace

void Distributed::abort(const std::string& message) {
  end_job(message);
  std::fflush(stderr);
  std::_Exit(1);
}

Distributed& single_process_group() {
  static SingleProcess group;
  return group;
}

int default_rank_threads(int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  int cores = int(std::thread::hardware_concurrency());
  if (cores <= 0) cores = std::max(allowed, 1);
  if (allowed <= 0) allowed = cores;
  // Bound to a few cores (mpirun --bind-to core): those; else a fair share of the machine.
  return std::max(1, std::min(allowed, cores / std::max(1, local_ranks)));
}

}  // namespace glm4
