// `mxmoe bench` under mpirun: the expert-parallel layer per batch size, with the time each
// rank spends routing, dispatching, computing, returning and combining, against one process
// running the whole layer on the same machine.
#pragma once

#include <string>
#include <vector>

#include "cli/common.hpp"
#include "mxmoe/communicator.hpp"

namespace mxmoe::cli {

struct EpBenchOptions {
  LayerOptions layer;
  std::vector<int> tokens;
  std::string backend;     // "" or "auto": the agreed choice
  std::string activation;  // "": the family's preference
  bool batch_invariant = false;
  int reps = 0;                       // 0: about 1 s of calls per row (at least 3)
  int threads = 0;                    // per rank; 0: the node's CPUs shared by its ranks
  std::vector<std::string> excluded;  // backends the agreed choice may not be
  bool tokens_on_every_rank = false;
  std::string output;    // rank 0 writes the report here (whole or not at all); "": stdout
  bool baseline = true;  // also time one process with every expert (rank 0 alone)
};

int bench_expert_parallel(const EpBenchOptions& o, Communicator& comm);

}  // namespace mxmoe::cli
