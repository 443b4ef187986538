// `mxmoe run`'s pieces shared by its three forms (run.cpp: one layer; run_layers.cpp: a step
// through several layers of a model, --layers; run_ep.cpp: one layer over the ranks of an
// mpirun): the options, the input and token ids, the memory checks, the timing and the JSON
// fields they have in common.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/json.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/ep.hpp"
#include "mxmoe/communicator.hpp"
#include "mxmoe/layer.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli::run_detail {

struct RunOptions {
  LayerOptions layer;
  HardwareOptions hardware;
  RequestOptions request;
  EpOptions ep;
  std::uint64_t seed = 1;
  int reps = 0;  // 0: as many as fit in about 3 s (at least 1)
  std::string input, output, token_ids;
  bool json = false;
  std::string layers;  // --layers all|0,3,5 (with --model): a step through several layers
};

// Every file run reads: --output may be none of them.
CommandInputs inputs_of(const RunOptions& o);

// Progress (stderr), flushed so it shows while the command works.
template <class... Args>
void progress(fmt::format_string<Args...> f, Args&&... args) {
  cli::print(stderr, f, std::forward<Args>(args)...);
  std::fflush(stderr);
}

// One line of the candidates list: the choice marked, the estimate or the first reason.
std::string candidate_line(const Selection& s, const Verdict& v);

// Bytes of the expert weights one call reads on rank r.ep_rank: every distinct expert of
// that rank the routing touches, plus the shared expert (each rank runs it on its tokens).
double touched_weight_bytes(const LayerSpec& s, const LayerWeights& w, const Request& r,
                            const std::vector<float>& x, std::int64_t tokens,
                            const std::int32_t* token_ids);

// The input: --input's [M, H] array, else M = --tokens random rows (seeded; empty here).
std::vector<float> input_rows(const RunOptions& o, int hidden, std::int64_t& tokens);

// A hash layer's token ids (DeepSeek-V4's first layers; SPEC is one, WHAT names it):
// --token-ids, else random ones for random inputs; a real input without them is a usage
// error. Empty when no layer needs them and none were given.
std::vector<std::int32_t> token_ids_for(const RunOptions& o, const LayerSpec& spec,
                                        const std::string& what, std::int64_t tokens);

void fill_random(std::vector<float>& x, std::uint64_t seed, std::int64_t count);

// Input and output of `tokens` rows of the layer, its weights (generated, or the checkpoint's
// pages read), packed copy and workspace fit in memory now. Returns the estimate.
double require_io_memory(const RunOptions& o, const LayerSpec& spec, std::int64_t tokens,
                         const MoeLayer* layer);

// A legal input can overflow (scales near the top of E8M0): never report NaN as a result.
void require_finite(const RunOptions& o, const std::vector<float>& y, std::int64_t tokens,
                    std::int64_t hidden);

// After a warm-up call of WARM seconds: --reps timed calls of CALL, else as many as fit in
// about 3 s (1..50); the number of calls and the median's seconds. SAY: the progress line.
struct Timing {
  int reps = 0;
  double median = 0;
};
Timing time_calls(int wanted_reps, double warm, bool say, const std::function<void()>& call);

// The fields every form of `run --json` shares about the layer and the choice.
json::Json choice_json(const LayerSpec& spec, const Selection& sel, bool batch_invariant);

// The fields both one-process forms of `run --json` share: tokens, threads, timing, bytes,
// output.
json::Json timing_json(std::int64_t tokens, int threads, int reps, double median, double bytes,
                       const std::string& output);

// The two other forms (the flags are checked by run() first).
int run_layers(const RunOptions& o, const Request& flags);
int run_expert_parallel(const RunOptions& o, CLI::App& sub, Communicator& comm);

}  // namespace mxmoe::cli::run_detail
