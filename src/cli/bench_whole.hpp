// `mxmoe bench --model DIR --whole`: a whole model (mxmoe::LanguageModel) timed as llama-bench
// times one: prefill of a PP-token prompt, decode of TG tokens at each batch size, repeated,
// against this machine's DRAM read bandwidth measured in the same run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/deployment.hpp"
#include "mxmoe/llm.hpp"

namespace mxmoe::cli {

struct WholeBenchOptions {
  std::string model;
  Request request;               // activation, batch invariance, threads, backends
  int pp = 512;                  // prompt tokens of the prefill test; 0: no prefill test
  int tg = 64;                   // decoded tokens per sequence; 0: no decode test
  std::vector<int> batches{1, 8};  // sequences decoded at once
  int reps = 3;                  // rounds over every test
  std::uint64_t seed = 1;        // the random prompts' generator
  int prefill_chunk = 0;         // prompt rows per step; 0: the library's default
  CompactFormat compact = CompactFormat::off;  // LlmOptions::compact
  std::uint64_t dram_buffer_bytes = 0;  // 0: measure_limits' default
  bool json = false;  // the report as one JSON document, else markdown
};

// The report, or nothing when SIGINT/SIGTERM stopped the runs.
std::optional<std::string> bench_whole_model(const WholeBenchOptions& o);

}  // namespace mxmoe::cli
