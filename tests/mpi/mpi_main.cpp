// main() of test_mpi, which ctest runs under `mpirun -n N`: MPI for the whole program; only
// rank 0 prints GoogleTest's report (every rank still fails the job when one of its checks
// fails: mpirun returns non-zero when any rank does).
#include <gtest/gtest.h>
#include <mpi.h>

#include "dist/mpi/mpi.hpp"

int main(int argc, char** argv) {
  mxmoe::mpi::Session session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  // One verdict for the job, so that a rank's failure is reported by rank 0 too.
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any != 0 && failed == 0) std::fprintf(stderr, "another rank failed a test\n");
  return any;
}
