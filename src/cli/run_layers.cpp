// `mxmoe run --model DIR --layers all|0,3,5`: a step through several MoE layers of a model.
#include <fmt/core.h>

#include <chrono>
#include <string>
#include <vector>

#include "cli/run_common.hpp"
#include "io/npy.hpp"
#include "mxmoe/model.hpp"
#include "perf/workload.hpp"

namespace mxmoe::cli::run_detail {

// --model DIR --layers all|0,3,5: the MoE layers of a model (mxmoe::Model, one Runtime), one
// step through all of them per timed call. Each layer reads the same input (the attention
// between them is not part of mxmoe); --output holds their outputs stacked [L, M, H].
int run_layers(const RunOptions& o, const Request& flags) {
  Runtime runtime(flags.threads);
  runtime.set_interrupt_check(&StopOnSignal::stop_requested);  // a long call ends at Ctrl-C
  ModelOptions options;
  options.request = flags;
  Model model(o.layer.model, o.hardware.resolve(), runtime, options);
  std::vector<int> indices;
  if (o.layers == "all") {
    indices = model.moe_layers();
    if (indices.empty()) throw LoadError(o.layer.model + ": no MoE layer mxmoe runs");
  } else {
    try {
      indices = perf::parse_int_list(o.layers, "--layers", 0, model.num_layers() - 1);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    for (int l : indices)
      if (const std::string why = model.skip_reason(l); !why.empty())
        throw UsageError(fmt::format("--layers: layer {} is not run by mxmoe: {}", l, why));
  }
  const int hidden = model.checkpoint().layer_spec(indices.front()).hidden;
  for (int l : indices)
    if (model.checkpoint().layer_spec(l).hidden != hidden)
      throw LoadError(fmt::format("{}: layer {} has H={}, layer {} H={}", o.layer.model, l,
                                  model.checkpoint().layer_spec(l).hidden, indices.front(),
                                  hidden));
  std::int64_t tokens = 0;
  std::vector<float> x = input_rows(o, hidden, tokens);
  // The tokens' ids, when a layer of the stack is hash-routed (they share the vocabulary).
  int id_layer = indices.front();
  for (int l : indices)
    if (model.checkpoint().layer_spec(l).routing == RoutingMethod::hash) {
      id_layer = l;
      break;
    }
  const std::vector<std::int32_t> token_ids = token_ids_for(
      o, model.checkpoint().layer_spec(id_layer), fmt::format("layer {}", id_layer), tokens);
  const std::int32_t* ids = token_ids.empty() ? nullptr : token_ids.data();
  const double row_bytes = static_cast<double>(hidden) * sizeof(float);
  const auto count = static_cast<std::int64_t>(indices.size());
  require_memory(fmt::format("run: {} tokens through {} layers", tokens, count),
                 {{"input", o.input.empty() ? row_bytes * static_cast<double>(tokens) : 0},
                  {"outputs", row_bytes * static_cast<double>(tokens * count)}},
                 "use fewer tokens or layers");
  // The layers are judged for this token count (the Model's request carries the hint).
  Request request = flags;
  request.tokens_hint = static_cast<int>(tokens);
  std::vector<MoeLayer> layers;
  double workspace = 0;
  for (int l : indices) {
    layers.push_back(model.bind(l, request));
    if (o.hardware.replayed())
      require_runnable_here(layers.back().selection(), HardwareOptions::live());
    workspace += static_cast<double>(layers.back().workspace_bytes(tokens));
  }
  require_memory(
      fmt::format("run: {} tokens through {} layers", tokens, count),
      {{"outputs", row_bytes * static_cast<double>(tokens * count)}, {"workspaces", workspace}});
  if (x.empty()) fill_random(x, o.seed + 1, tokens * hidden);
  std::vector<float> y(static_cast<std::size_t>(count * tokens * hidden));
  const auto step = [&] {
    for (std::size_t i = 0; i < layers.size(); ++i)
      layers[i].forward({.tokens = tokens,
                         .x = x.data(),
                         .y = y.data() + static_cast<std::ptrdiff_t>(i) * tokens * hidden,
                         .token_ids = ids});
  };
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  progress("mxmoe run: {} layers on {} tokens, warm-up step...\n", count, tokens);
  const auto w0 = Clock::now();
  step();
  const double warm = seconds(Clock::now() - w0);
  const NonFinite bad = find_non_finite(y, tokens * count, hidden);
  if (bad.any())
    throw std::runtime_error(fmt::format(
        "run: the stacked outputs hold {} (rows are layer x "
        "token){}",
        bad.describe(tokens * count), o.output.empty() ? "" : "; --output was not written"));
  const auto [reps, median] = time_calls(o.reps, warm, true, step);
  double bytes = 0;
  for (std::size_t i = 0; i < layers.size(); ++i)
    bytes += touched_weight_bytes(layers[i].spec(), model.checkpoint().layer_weights(indices[i]),
                                  request, x, tokens, ids);
  if (!o.output.empty()) {
    const std::int64_t shape[] = {count, tokens, hidden};
    write_npy(o.output, y, shape, &StopOnSignal::stop_requested);  // whole or not at all
  }
  std::vector<std::string> chosen;
  for (const MoeLayer& layer : layers) chosen.push_back(layer.selection().chosen);
  if (o.json) {
    json::Json out = {{"layers", indices},
                      {"chosen", chosen},
                      {"first_step_us", warm * 1e6},
                      {"us_per_step_median", median * 1e6}};
    out.update(timing_json(tokens, runtime.threads(), reps, median, bytes, o.output));
    cli::print("{}\n", out.dump(2));
    return kExitOk;
  }
  std::string list;
  for (std::size_t i = 0; i < indices.size(); ++i)
    list += fmt::format("{}{} ({})", i == 0 ? "" : ", ", indices[i], chosen[i]);
  cli::print("layers: {}\n", list);
  cli::print(
      "time: {:.1f} us per step through {} layers (median of {} after a warm-up step of "
      "{:.1f} us; {} threads)\n",
      median * 1e6, count, reps, warm * 1e6, runtime.threads());
  cli::print(
      "throughput: {:.2f} tokens/s, {:.2f} GB/s of expert weights ({:.1f} MB touched per "
      "step)\n",
      static_cast<double>(tokens) / median, bytes / median / 1e9, bytes / 1e6);
  if (!o.output.empty())
    cli::print("output: {} [{} x {} x {}] float32 (layer, token, hidden)\n", o.output, count,
               tokens, hidden);
  return kExitOk;
}

}  // namespace mxmoe::cli::run_detail
