// Runs every MoE layer of a checkpoint on one shared Runtime through the C++ API.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "mxmoe/mxmoe.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_DIR\n", argv[0]);
    return 2;
  }
  try {
    mxmoe::Runtime runtime(0);  // one pool for every layer of the process
    mxmoe::Request request;
    request.batch_invariant = true;
    mxmoe::Model model(argv[1], mxmoe::probe_hardware(), runtime, {request, false});
    for (int index : model.moe_layers()) {
      mxmoe::MoeLayer& layer = model.layer(index);
      const int h = layer.spec().hidden;
      std::vector<float> x(static_cast<std::size_t>(3 * h)), y(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
      layer.forward({.tokens = 3, .x = x.data(), .y = y.data()});
      double sum = 0;
      for (float v : y) sum += static_cast<double>(v) * v;
      std::printf("layer %d on %s: |y|^2 = %.6g\n", index, layer.selection().chosen.c_str(), sum);
    }
    return 0;
  } catch (const mxmoe::NoBackendError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
