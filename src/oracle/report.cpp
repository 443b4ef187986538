// The human forms of a Selection: the NoBackendError message (which starts with the
// sentence users already search for and keeps every reason), the table, the dispatch log;
// and the hardware report of `mxmoe info` (it lists the candidates it is handed).
#include "oracle/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "mxmoe/no_backend_error.hpp"
#include "mxmoe/reports.hpp"
#include "oracle/candidates.hpp"

namespace mxmoe {
namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::string isa_summary(const Hardware& h) {
  std::vector<std::string> on;
  for (std::string_view name : isa_feature_names(h.arch))
    if (isa_feature(h.isa, name).value_or(false)) on.emplace_back(name);
  std::string text = on.empty() ? "no SIMD features" : join(on, " ");
  if (!h.os_denied.empty()) text += "; os_denied: " + join(h.os_denied, " ");
  if (!h.isa_cap.empty()) text += "; capped at " + h.isa_cap;
  return text;
}

bool has_code(const Verdict& v, ReasonCode code) {
  return std::any_of(v.reasons.begin(), v.reasons.end(),
                     [code](const Rejection& r) { return r.code == code; });
}

std::string verdict_word(const Selection& s, const Verdict& v) {
  if (v.name == s.chosen) return "selected";
  if (v.supported) return "supported";
  if (has_code(v, ReasonCode::user_excluded)) return "excluded";
  return "rejected";
}

std::string codes(const Verdict& v) {
  std::vector<std::string> names;
  for (const Rejection& r : v.reasons) names.emplace_back(to_string(r.code));
  return join(names);
}

}  // namespace

std::string describe_deployment(const Deployment& d) {
  const LayerSpec& l = d.layer;
  const Request& r = d.request;
  const Hardware& h = d.hardware;
  return fmt::format(
      "weight_key={}, activation_key={}, batch_invariant={}, ep_size={}, ep_rank={}, "
      "threads={}, tokens={}, forced_backend={}, excluded_backends=[{}], "
      "layer={} (family={}, experts={}, top_k={}, hidden={}, intermediate={}, routing={}, "
      "activation_fn={}, shared_experts={}), hardware={} from {} ({}), cuda_devices={}",
      to_string(l.weight_format), r.activation ? to_string(*r.activation) : "unset",
      r.batch_invariant, r.ep_size, r.ep_rank, r.threads == 0 ? "all" : std::to_string(r.threads),
      r.tokens_hint, r.forced_backend.empty() ? "none" : r.forced_backend,
      join(r.excluded_backends), l.name.empty() ? "unnamed" : l.name, to_string(l.family),
      l.num_experts, l.top_k, l.hidden, l.intermediate, to_string(l.routing),
      to_string(l.activation), l.shared_experts, h.model.empty() ? "unknown CPU" : h.model,
      h.source, isa_summary(h), h.cuda_devices.size());
}

std::string describe_rejection(const Rejection& r) {
  std::string text =
      fmt::format("{}: {} (required {}, got {}", to_string(r.code), r.detail,
                  r.required.empty() ? "-" : r.required, r.actual.empty() ? "-" : r.actual);
  if (!r.remedy.empty()) text += "; remedy: " + r.remedy;
  return text + ")";
}

std::string format_no_backend_message(const Selection& s) {
  std::vector<std::string> names, reasons, suggestions;
  for (const Verdict& v : s.candidates) {
    names.push_back(v.name);
    for (const Rejection& r : v.reasons)
      reasons.push_back(fmt::format("backend: {}, reason: {}", v.name, describe_rejection(r)));
    if (v.supported) reasons.push_back(fmt::format("backend: {}, reason: none", v.name));
  }
  for (const Suggestion& g : s.suggestions) suggestions.push_back(g.text);
  std::string message = fmt::format(
      "No MXFP4 MoE backend supports the deployment configuration. {}, preferences={}. "
      "Candidate backends were: [{}]. Unsupported reasons: {}.",
      describe_deployment(s.deployment), s.preferences_source, join(names),
      reasons.empty() ? "none (no backend is registered)" : join(reasons, "; "));
  if (suggestions.empty())
    message += " No single change of the request would let any candidate run.";
  else
    message += " Suggestions: " + join(suggestions, "; ") + ".";
  return message;
}

std::string format_selection_table(const Selection& s) {
  const Deployment& d = s.deployment;
  const LayerSpec& l = d.layer;
  const Request& r = d.request;
  std::size_t width = 7;
  for (const Verdict& v : s.candidates) width = std::max(width, v.name.size());

  std::string out;
  out += fmt::format(
      "layer      {} ({}): E={} top_k={} H={} I={} routing={}{} activation_fn={}{}\n",
      l.name.empty() ? "unnamed" : l.name, to_string(l.family), l.num_experts, l.top_k, l.hidden,
      l.intermediate, to_string(l.routing),
      l.routing == RoutingMethod::hash ? fmt::format(" (token ids < {})", l.vocab) : "",
      to_string(l.activation),
      l.shared_experts > 0 ? fmt::format(" shared={}x{} {}", l.shared_experts,
                                         l.shared_intermediate, to_string(l.shared_weight_format))
                           : "");
  out +=
      fmt::format("request    activation={} batch_invariant={} ep={}/{} threads={} tokens={}{}{}\n",
                  r.activation ? to_string(*r.activation) : "unset", r.batch_invariant, r.ep_rank,
                  r.ep_size, r.threads == 0 ? "all" : std::to_string(r.threads), r.tokens_hint,
                  r.forced_backend.empty() ? "" : " forced=" + r.forced_backend,
                  r.excluded_backends.empty() ? "" : " excluded=" + join(r.excluded_backends, ","));
  out += fmt::format("hardware   {} ({} logical CPUs, from {}): {}\n",
                     d.hardware.model.empty() ? "unknown CPU" : d.hardware.model,
                     d.hardware.logical_cpus, d.hardware.source, isa_summary(d.hardware));
  out += fmt::format("preference {}\n\n", s.preferences_source);

  out += fmt::format("  {:<{}}  {:<9}  {:>12}  {}\n", "backend", width, "verdict", "est. us",
                     "reasons");
  for (const Verdict& v : s.candidates) {
    const std::string cost = v.supported ? fmt::format("{:.1f}", v.estimated_us) : "-";
    out += fmt::format("{} {:<{}}  {:<9}  {:>12}  {}\n", v.name == s.chosen ? '*' : ' ', v.name,
                       width, verdict_word(s, v), cost, v.reasons.empty() ? "-" : codes(v));
    for (const Rejection& rej : v.reasons)
      out += fmt::format("      {}\n", describe_rejection(rej));
  }
  out += "\n";
  if (!s.chosen.empty()) {
    out += fmt::format("selected: {} ({})\n", s.chosen, s.why);
  } else {
    out += "selected: none: no candidate supports this deployment\n";
    if (s.suggestions.empty()) out += "no single change of the request would let any run\n";
    for (const Suggestion& g : s.suggestions) out += fmt::format("suggestion: {}\n", g.text);
  }
  return out;
}

std::string format_dispatch_log(const Selection& s) {
  std::string out;
  for (const Verdict& v : s.candidates) {
    out += fmt::format("mxmoe dispatch: {}: {}", v.name, verdict_word(s, v));
    if (v.supported) out += fmt::format(" ({:.1f} us)", v.estimated_us);
    if (!v.reasons.empty()) out += " [" + codes(v) + "]";
    out += "\n";
  }
  return out;
}

namespace {

std::string bytes_text(std::uint64_t b) {
  if (b == 0) return "unknown";
  if (b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  return fmt::format("{} KiB", b >> 10);
}

std::string join_or_none(const std::vector<std::string>& items) {
  return items.empty() ? "none" : join(items, " ");
}

}  // namespace

std::string format_hardware_report(const Hardware& h, std::span<const Backend* const> candidates) {
  std::vector<std::string> usable, absent;
  for (std::string_view name : isa_feature_names(h.arch))
    (isa_feature(h.isa, name).value_or(false) ? usable : absent).emplace_back(name);
  std::vector<std::string> backends;
  for (const Backend* b : candidates) backends.emplace_back(b->name());
  std::string out;
  fmt::format_to(std::back_inserter(out), "CPU:        {} ({}), {} logical CPUs\n",
                 h.model.empty() ? "unknown" : h.model,
                 h.vendor.empty() ? "unknown vendor" : h.vendor, h.logical_cpus);
  fmt::format_to(std::back_inserter(out), "Caches:     L1d {}, L2 {}, L3 {} (per cpu0's view)\n",
                 bytes_text(h.l1d_bytes), bytes_text(h.l2_bytes), bytes_text(h.l3_bytes));
  fmt::format_to(std::back_inserter(out), "ISA usable: {}\n", join_or_none(usable));
  fmt::format_to(std::back_inserter(out), "ISA absent: {}\n", join_or_none(absent));
  if (h.sve_vector_bits > 0)
    fmt::format_to(std::back_inserter(out), "SVE:        {}-bit vectors\n", h.sve_vector_bits);
  fmt::format_to(std::back_inserter(out), "OS denied:  {}\n", join_or_none(h.os_denied));
  fmt::format_to(std::back_inserter(out), "ISA cap:    {}\n",
                 h.isa_cap.empty() ? "none (MXMOE_MAX_ISA unset)" : h.isa_cap);
  if (h.cuda_devices.empty()) {
    out += "CUDA:       none (no CUDA runtime in this build)\n";
  } else {
    for (const CudaDevice& d : h.cuda_devices)
      fmt::format_to(std::back_inserter(out), "CUDA:       {} (sm_{}, {})\n", d.name, d.sm,
                     bytes_text(d.memory_bytes));
  }
  fmt::format_to(std::back_inserter(out), "Source:     {}\n", h.source);
  fmt::format_to(std::back_inserter(out), "Backends:   {}\n", join_or_none(backends));
  return out;
}

}  // namespace mxmoe
