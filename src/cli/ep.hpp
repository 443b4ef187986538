// Expert parallelism at the edge: whether mpirun started this process, the MPI session, the
// world communicator and the small collectives the commands use. Every command works without
// MPI (a build without mxmoe_mpi, or a plain launch): ep_world() is then null.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/expert_parallel.hpp"

namespace mxmoe::cli {

// True when an MPI launcher started this process (the variables Open MPI, MPICH and Slurm
// set for each rank).
bool launched_by_mpi();

// MPI for the lifetime of main() when launched by mpirun (nothing otherwise). Throws
// std::invalid_argument when mpirun started several copies of an mxmoe built without MPI.
// MPI_Init and MPI_Finalize wait inside MPI for every rank and take no deadline: each is
// bounded by a Watchdog (cli/watchdog.hpp) of DEADLINE_S seconds that, past it, prints one
// line (naming the ranks that never reached MPI_Init where this node can tell) and ends the
// process with kExitError; mpirun then ends the job.
class MpiScope {
 public:
  MpiScope(int* argc, char*** argv, double deadline_s);
  ~MpiScope();
  MpiScope(const MpiScope&) = delete;
  MpiScope& operator=(const MpiScope&) = delete;
  bool active() const noexcept { return active_; }
  int world_rank() const noexcept { return rank_; }
  int world_size() const noexcept { return size_; }
  // Ends the whole job (MPI_Abort) with `code`: a rank that fails alone would leave the others
  // waiting for it until their deadline.
  [[noreturn]] void abort(int code) const noexcept;

 private:
  struct Session;
  std::unique_ptr<Session> session_;
  double deadline_s_ = 30;
  bool active_ = false;
  int rank_ = 0, size_ = 1;
};

// --ep-deadline SECONDS (env MXMOE_EP_DEADLINE): how long a rank waits for the others.
struct EpOptions {
  double deadline_s = 30;
  void add(CLI::App& app);
  CommOptions resolve(CLI::App& app) const;
};

// The deadline the parsed command APP runs under: its subcommand's --ep-deadline when given,
// else MXMOE_EP_DEADLINE's (throws ConfigError when that is malformed). Known before MPI
// starts, so that MPI_Init is bounded by it too.
double ep_deadline_of(const CLI::App& app);

// The world communicator when launched by mpirun, else null. Collective: every rank must have
// been started with the same subcommand and flags as rank 0 (see require_same_flags).
std::unique_ptr<Communicator> ep_world(const CommOptions& options, const CLI::App& sub);

// Every rank runs SUB with the flags rank 0 was given (collective). A flag given unlike rank
// 0's (`--reps 3` on one rank, `--reps 5` on another) would make the ranks call different
// collectives and fail later with a message about bytes; it is refused here, on every rank,
// with a UsageError naming the flag and both values. The environment may differ (a rank capped
// by MXMOE_MAX_ISA is how a mixed group is tried); the flags may not.
void require_same_flags(Communicator& comm, const CLI::App& sub);

// Rank 0's value on every rank.
std::int64_t from_rank0(Communicator& comm, std::int64_t value);
double from_rank0(Communicator& comm, double value);
// Ranks of comm on this node (collective): they share its cores.
int ranks_on_this_node(Communicator& comm);
// Threads per rank when the user gives none: the logical CPUs this rank sees shared by the
// node's ranks (collective).
int threads_per_rank(Communicator& comm, int logical_cpus);
// The layer's spec: a preset's, or layer N of the checkpoint (opened into `checkpoint`).
LayerSpec open_layer(const LayerOptions& layer, std::optional<Checkpoint>& checkpoint);
// Every rank's value, on every rank.
std::vector<double> gather(Communicator& comm, double value);
std::vector<ExpertParallelTimes> gather(Communicator& comm, const ExpertParallelTimes& times);

}  // namespace mxmoe::cli
