// `mxmoe info`: the hardware probe (--hardware, the default) or a checkpoint (--model DIR).
// `info --hardware --json` writes exactly what `--hardware FILE` replays; with --model too,
// one JSON document with the probe under "hardware".
#include <fmt/core.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/model_info.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe::cli {
namespace {

struct InfoOptions {
  bool hardware = false;
  bool json = false;
  std::string model;
};

std::string bytes_text(std::uint64_t b) {
  if (b == 0) return "unknown";
  if (b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} KiB", b >> 10);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : " ") + s;
  return out.empty() ? "none" : out;
}

void print_hardware(const Hardware& h) {
  std::vector<std::string> usable, absent;
  for (std::string_view name : isa_feature_names())
    (isa_feature(h.isa, name).value_or(false) ? usable : absent).emplace_back(name);
  std::vector<std::string> backends;
  for (const Backend* b : registered_backends()) backends.emplace_back(b->name());
  fmt::print("CPU:        {} ({}), {} logical CPUs\n", h.model.empty() ? "unknown" : h.model,
             h.vendor.empty() ? "unknown vendor" : h.vendor, h.logical_cpus);
  fmt::print("Caches:     L1d {}, L2 {}, L3 {} (per cpu0's view)\n", bytes_text(h.l1d_bytes),
             bytes_text(h.l2_bytes), bytes_text(h.l3_bytes));
  fmt::print("ISA usable: {}\n", join(usable));
  fmt::print("ISA absent: {}\n", join(absent));
  fmt::print("OS denied:  {}\n", join(h.os_denied));
  fmt::print("ISA cap:    {}\n", h.isa_cap.empty() ? "none (MXMOE_MAX_ISA unset)" : h.isa_cap);
  if (h.cuda_devices.empty()) {
    fmt::print("CUDA:       none (no CUDA runtime in this build)\n");
  } else {
    for (const CudaDevice& d : h.cuda_devices)
      fmt::print("CUDA:       {} (sm_{}, {})\n", d.name, d.sm, bytes_text(d.memory_bytes));
  }
  fmt::print("Source:     {}\n", h.source);
  fmt::print("Backends:   {}\n", join(backends));
}

int run_info(const InfoOptions& o) {
  if (!o.model.empty() && !o.hardware) return info_model(o.model, o.json);
  const Hardware h = HardwareOptions::live();
  if (!o.model.empty()) {
    // Both: one JSON document (the probe under "hardware"), or the two texts in turn.
    if (o.json) {
      const std::string hardware = to_json(h);
      return info_model(o.model, true, &hardware);
    }
    const int rc = info_model(o.model, false);
    print_hardware(h);
    return rc;
  }
  if (o.json)
    fmt::print("{}\n", to_json(h));
  else
    print_hardware(h);
  return kExitOk;
}

}  // namespace

void add_info(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand(
      "info", "The hardware probe (--hardware, default) or a checkpoint (--model DIR)");
  auto options = std::make_shared<InfoOptions>();
  sub->add_flag("--hardware", options->hardware,
                "Print this machine's probe (the JSON form is replayable with --hardware FILE)");
  sub->add_flag("--json", options->json, "Print JSON");
  sub->add_option("--model", options->model, "Checkpoint directory to describe")
      ->check(CLI::ExistingDirectory);
  sub->callback([&action, options] { action = [options] { return run_info(*options); }; });
}

}  // namespace mxmoe::cli
