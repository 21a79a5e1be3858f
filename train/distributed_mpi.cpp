// world_group() of a build with Open MPI: MPI_COMM_WORLD when started by mpirun (Open MPI's, or a
// PMI launcher), else one process. Only the calling thread talks to MPI (MPI_THREAD_FUNNELED).
#define OMPI_SKIP_MPICXX 1  // the C API only: no deprecated C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "base/check.h"
#include "train/distributed.h"

namespace glm4 {

namespace {
bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

int as_int(int64_t n, const char* what) {
  GLM4_CHECK(n >= 0 && n <= INT_MAX, "[distributed] ", what, " of ", n,
             " floats is beyond MPI's int counts; use a smaller bucket");
  return int(n);
}

class MpiWorld final : public Distributed {
 public:
  MpiWorld() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    MPI_Comm_dup(MPI_COMM_WORLD, &exchanges_);
    MPI_Comm_dup(MPI_COMM_WORLD, &allgathers_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }

  std::vector<std::vector<double>> allgather(const std::vector<double>& values) override {
    const int n = as_int(int64_t(values.size()), "an allgather");
    std::vector<double> all(values.size() * size_t(size_));
    MPI_Allgather(values.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, MPI_COMM_WORLD);
    std::vector<std::vector<double>> out;
    for (int r = 0; r < size_; ++r)
      out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
    return out;
  }
  std::vector<uint64_t> allgather(uint64_t value) override {
    std::vector<uint64_t> all(static_cast<size_t>(size_));
    MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    return all;
  }
  void sum(std::vector<int64_t>& values) override {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), as_int(int64_t(values.size()), "a sum"), MPI_INT64_T,
                  MPI_SUM, MPI_COMM_WORLD);
  }

  Request exchange(const float* send, const std::vector<int64_t>& counts, float* recv) override {
    Pending& p = start(counts);
    const int mine = p.counts[size_t(rank_)];
    for (int r = 0; r < size_; ++r) {
      p.recv_counts.push_back(mine);
      p.recv_displs.push_back(r * mine);
    }
    as_int(int64_t(mine) * size_, "an exchange");
    MPI_Ialltoallv(send, p.counts.data(), p.displs.data(), MPI_FLOAT, recv, p.recv_counts.data(),
                   p.recv_displs.data(), MPI_FLOAT, exchanges_, &p.request);
    return next_id_ - 1;
  }
  Request allgather(const float* piece, const std::vector<int64_t>& counts, float* out) override {
    Pending& p = start(counts);
    MPI_Iallgatherv(piece, p.counts[size_t(rank_)], MPI_FLOAT, out, p.counts.data(),
                    p.displs.data(), MPI_FLOAT, allgathers_, &p.request);
    return next_id_ - 1;
  }
  bool test(Request request) override {
    auto it = pending_.find(request);
    if (it == pending_.end()) return true;
    int done = 0;
    MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE);
    if (done) pending_.erase(it);
    return done;
  }
  void wait(Request request) override {
    auto it = pending_.find(request);
    if (it == pending_.end()) return;
    MPI_Wait(&it->second.request, MPI_STATUS_IGNORE);
    pending_.erase(it);
  }
  void gather(const float* piece, const std::vector<int64_t>& counts, float* out) override {
    Pending p = layout(counts);
    MPI_Gatherv(piece, p.counts[size_t(rank_)], MPI_FLOAT, out, p.counts.data(), p.displs.data(),
                MPI_FLOAT, 0, MPI_COMM_WORLD);
  }

  void end_job(const std::string& message) override {
    std::fprintf(stderr, "glm4: error on rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  // A started request and the count arrays MPI reads until it completes.
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> counts, displs, recv_counts, recv_displs;
  };
  Pending layout(const std::vector<int64_t>& counts) const {
    GLM4_CHECK(int(counts.size()) == size_, "[distributed] ", counts.size(), " piece counts for ",
               size_, " ranks");
    Pending p;
    int64_t at = 0;
    for (int64_t c : counts) {
      p.counts.push_back(as_int(c, "a piece"));
      p.displs.push_back(as_int(at, "an offset"));
      at += c;
    }
    as_int(at, "a buffer");
    return p;
  }
  Pending& start(const std::vector<int64_t>& counts) {
    return pending_[next_id_++] = layout(counts);
  }

  int rank_ = 0, size_ = 1, local_size_ = 1;
  // Each kind of non-blocking exchange has its own communicator: ranks start them in the same
  // order within a kind, but the two kinds may interleave differently from rank to rank.
  MPI_Comm exchanges_ = MPI_COMM_NULL, allgathers_ = MPI_COMM_NULL;
  std::map<Request, Pending> pending_;  // started and not yet seen done; an unknown id is done
  Request next_id_ = 0;
};
}  // namespace

Distributed& world_group() {
  if (!launched_by_mpirun()) return single_process_group();
  static MpiWorld world;
  return world;
}

}  // namespace glm4
