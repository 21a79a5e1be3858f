// How MPI_Allreduce's float sum compares with adding the ranks' vectors in rank order (what
// GradientReducer does, and what one process accumulating its micro-batches in order gets) and
// with an fp64 sum rounded once. Run: mpirun -np N build/benchmarks/mpi_reduce_order
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int64_t n : {int64_t(1000), int64_t(100000), int64_t(4000000)}) {
    // Every rank makes every rank's vector (rank r's scaled by r + 1), so each can check all sums.
    std::vector<std::vector<float>> all(static_cast<size_t>(size),
                                        std::vector<float>(static_cast<size_t>(n)));
    for (int r = 0; r < size; ++r) {
      std::mt19937_64 rng(1234 + r);
      std::normal_distribution<float> d(0.0f, float(r + 1));
      for (float& x : all[size_t(r)]) x = d(rng);
    }
    std::vector<float> reduced(static_cast<size_t>(n));
    MPI_Allreduce(all[size_t(rank)].data(), reduced.data(), int(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    int64_t vs_ordered = 0, vs_fp64 = 0, ordered_vs_fp64 = 0;
    uint64_t hash = 0;
    for (int64_t i = 0; i < n; ++i) {
      float ordered = all[0][size_t(i)];
      double exact = all[0][size_t(i)];
      for (int r = 1; r < size; ++r) {
        ordered += all[size_t(r)][size_t(i)];
        exact += all[size_t(r)][size_t(i)];
      }
      vs_ordered += reduced[size_t(i)] != ordered;
      vs_fp64 += reduced[size_t(i)] != float(exact);
      ordered_vs_fp64 += ordered != float(exact);
      uint32_t bits;
      std::memcpy(&bits, &reduced[size_t(i)], 4);
      hash = (hash ^ bits) * 1099511628211ull;
    }
    std::vector<uint64_t> hashes(static_cast<size_t>(size));
    MPI_Gather(&hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    bool same = true;
    for (uint64_t h : hashes) same = same && h == hashes[0];
    if (rank == 0)
      std::printf(
          "%d ranks, %8lld floats: MPI_Allreduce differs from the rank-order fp32 sum in %5.1f%% "
          "of "
          "elements, from the fp64 sum in %5.1f%%; rank-order fp32 differs from fp64 in %5.1f%%; "
          "MPI_Allreduce equal on all ranks: %s\n",
          size, (long long)n, 100.0 * double(vs_ordered) / double(n),
          100.0 * double(vs_fp64) / double(n), 100.0 * double(ordered_vs_fp64) / double(n),
          same ? "yes" : "no");
  }
  MPI_Finalize();
}
