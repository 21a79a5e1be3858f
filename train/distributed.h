// The process group of a data-parallel run: rank, size and the few collectives training needs.
// Open MPI when the binary was started by mpirun and built with MPI; one process otherwise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace glm4 {

class Distributed {
 public:
  using Request = int64_t;  // a started non-blocking exchange, finished by wait()

  virtual ~Distributed() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_size() const = 0;  // ranks on this machine
  bool root() const { return rank() == 0; }

  // Every rank's `values` (the same length on every rank), indexed by rank.
  virtual std::vector<std::vector<double>> allgather(const std::vector<double>& values) = 0;
  virtual std::vector<uint64_t> allgather(uint64_t value) = 0;
  // Exact integer sums over the ranks, in place.
  virtual void sum(std::vector<int64_t>& values) = 0;

  // Non-blocking float exchanges: every rank starts its exchanges in the same order, and its
  // allgathers in the same order (the two kinds may interleave differently). `counts[r]` is the
  // length of rank r's piece. exchange: `send` holds a piece for each rank, in rank order; `recv`
  // gets this rank's piece from every rank, in rank order (size() * counts[rank()] floats).
  virtual Request exchange(const float* send, const std::vector<int64_t>& counts, float* recv) = 0;
  // allgather: this rank's piece (counts[rank()] floats) from every rank into `out`, in rank order.
  virtual Request allgather(const float* piece, const std::vector<int64_t>& counts, float* out) = 0;
  virtual bool test(Request request) = 0;  // lets MPI progress; true once done
  virtual void wait(Request request) = 0;
  // Blocking: every rank's piece into `out` on rank 0, in rank order (`out` unused elsewhere).
  virtual void gather(const float* piece, const std::vector<int64_t>& counts, float* out) = 0;

  // Ends every rank of the job with `message` naming this rank; never returns.
  [[noreturn]] void abort(const std::string& message);

 protected:
  virtual void end_job(const std::string& message) = 0;  // abort()'s work
};

// The group of this process: MPI_COMM_WORLD when launched by mpirun (MPI is initialised on the
// first call and finalised at exit), else a group of one. Always the same object.
Distributed& world_group();

// A group of one process (what world_group() is without mpirun or without MPI).
Distributed& single_process_group();

// Threads for a rank when --threads is not given: the cores it may run on, shared with the other
// ranks on its machine when they may run on the same cores; at least 1.
int default_rank_threads(int local_ranks);

}  // namespace glm4
