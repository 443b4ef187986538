// The cost of the C API's boundary (status codes, exception guards, handle indirection) at
// 1 token: the same layer called through mxmoe_layer_forward_f32 and MoeLayer::forward,
// side by side. A generated checkpoint (tiny and gpt-oss-20b-sized) is written to a temporary
// directory first by the library's own writer.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "mxmoe/mxmoe.h"
#include "mxmoe/mxmoe.hpp"
#include "produce/checkpoint_writer.hpp"

namespace {

struct Fixture {
  std::string dir;
  mxmoe::Checkpoint checkpoint;
  mxmoe::Runtime runtime;
  mxmoe::MoeLayer cpp;
  mxmoe_layer* c = nullptr;
  std::vector<float> x, y;

  static mxmoe::LayerSpec spec(bool tiny) {
    mxmoe::LayerSpec s = mxmoe::preset("gpt-oss-20b");
    if (tiny) {
      s.num_experts = 8;
      s.hidden = 256;
      s.intermediate = 256;
    }
    return s;
  }
  static std::string write(bool tiny) {
    const std::string d =
        (std::filesystem::temp_directory_path() /
         ("mxmoe_capi_bench_" + std::to_string(::getpid()) + (tiny ? "_t" : "_g")))
            .string();
    mxmoe::GenerateOptions o;
    o.force = true;
    mxmoe::generate_checkpoint(d, spec(tiny), o);
    return d;
  }
  explicit Fixture(bool tiny)
      : dir(write(tiny)),
        checkpoint(mxmoe::Checkpoint::open(dir)),
        runtime(2),
        cpp(mxmoe::make_layer(checkpoint.layer_spec(0), checkpoint.layer_weights(0),
                              mxmoe::probe_hardware(), {}, runtime)) {
    mxmoe_checkpoint* h = nullptr;
    if (mxmoe_checkpoint_open(dir.c_str(), &h) != MXMOE_OK) std::abort();
    mxmoe_request_params p = mxmoe_request_default_params();
    p.threads = 2;
    if (mxmoe_layer_create(h, 0, &p, &c) != MXMOE_OK) std::abort();
    mxmoe_checkpoint_close(h);
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0.0f, 1.0f);
    x.resize(static_cast<std::size_t>(spec(tiny).hidden));
    for (float& v : x) v = n(rng);
    y.resize(x.size());
  }
  ~Fixture() {
    mxmoe_layer_destroy(c);
    std::filesystem::remove_all(dir);
  }
};

Fixture& fixture(bool tiny) {
  static Fixture t(true), g(false);
  return tiny ? t : g;
}

void CppForward(benchmark::State& state) {
  Fixture& f = fixture(state.range(0) != 0);
  for (auto _ : state) {
    f.cpp.forward({.tokens = 1, .x = f.x.data(), .y = f.y.data()});
    benchmark::DoNotOptimize(f.y.data());
  }
}

void CForward(benchmark::State& state) {
  Fixture& f = fixture(state.range(0) != 0);
  for (auto _ : state) {
    if (mxmoe_layer_forward_f32(f.c, f.x.data(), 1, f.y.data()) != MXMOE_OK) std::abort();
    benchmark::DoNotOptimize(f.y.data());
  }
}

// Interleaved so that drift in the machine's speed hits both alike; range(0): 1 = tiny
// layer (E=8, H=I=256: the boundary's share is largest), 0 = gpt-oss-20b's shape.
BENCHMARK(CppForward)->Arg(1)->Repetitions(9)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(CForward)->Arg(1)->Repetitions(9)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(CppForward)->Arg(0)->Repetitions(9)->ReportAggregatesOnly(true)->UseRealTime();
BENCHMARK(CForward)->Arg(0)->Repetitions(9)->ReportAggregatesOnly(true)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
