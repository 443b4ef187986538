#include "oracle/capability_matrix.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <set>

namespace mxmoe {
namespace {

constexpr std::array<RoutingMethod, 5> kRoutings = {
    RoutingMethod::topk_softmax, RoutingMethod::softmax_topk, RoutingMethod::sigmoid_group_topk,
    RoutingMethod::sqrtsoftplus_topk, RoutingMethod::hash};
constexpr std::array<ActivationFn, 3> kActivationFns = {
    ActivationFn::swiglu_oai, ActivationFn::silu_glu, ActivationFn::silu_glu_clamp};

// A layer every backend's alignment rules accept, so the grid shows the other predicates.
LayerSpec grid_layer() {
  LayerSpec l;
  l.name = "capability grid";
  l.num_experts = 32;
  l.top_k = 4;
  l.hidden = 4096;
  l.intermediate = 4096;
  return l;
}

Hardware all_features(Hardware h) {
  for (std::string_view name : isa_feature_names()) set_isa_feature(h.isa, name, true);
  h.os_denied.clear();
  h.isa_cap.clear();
  return h;
}

struct Cell {
  ActivationFormat format;
  bool invariant;
  ActivationFn fn;
  RoutingMethod routing;
  std::vector<Rejection> reasons;
};

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

Deployment cell_deployment(const Deployment& base, const Cell& c) {
  Deployment d = base;
  d.request.activation = c.format;
  d.request.batch_invariant = c.invariant;
  d.layer.activation = c.fn;
  d.layer.routing = c.routing;
  if (c.routing == RoutingMethod::sigmoid_group_topk) {
    d.layer.routing_params.n_group = 4;
    d.layer.routing_params.topk_group = 2;
  }
  if (c.routing == RoutingMethod::hash) d.layer.vocab = 1000;
  return d;
}

CapabilityRow row_for(const Backend& b, const Hardware& base) {
  Deployment d0{grid_layer(), all_features(base), Request{}};
  d0.request.threads = 1;
  CapabilityRow row;
  row.backend = std::string(b.name());
  row.description = std::string(b.description());
  row.numerics_class = std::string(b.numerics_class());

  std::vector<Cell> cells;
  for (ActivationFormat f : all_activation_formats())
    for (bool inv : {false, true})
      for (ActivationFn fn : kActivationFns)
        for (RoutingMethod r : kRoutings) {
          Cell c{f, inv, fn, r, {}};
          c.reasons = b.check(cell_deployment(d0, c));
          cells.push_back(std::move(c));
        }

  std::set<ActivationFormat> formats, invariant_formats;
  std::set<ActivationFn> fns;
  std::set<RoutingMethod> routings;
  for (const Cell& c : cells) {
    if (!c.reasons.empty()) continue;
    (c.invariant ? invariant_formats : formats).insert(c.format);
    fns.insert(c.fn);
    routings.insert(c.routing);
  }
  for (ActivationFormat f : all_activation_formats())
    row.formats.push_back(invariant_formats.count(f) ? "yes, invariant"
                          : formats.count(f)         ? "yes"
                                                     : "no");
  std::vector<std::string> names;
  for (ActivationFn fn : fns) names.emplace_back(to_string(fn));
  row.activation_fns = names.empty() ? "none" : join(names);
  names.clear();
  for (RoutingMethod r : routings) names.emplace_back(to_string(r));
  row.routing_methods = names.empty() ? "none" : join(names);

  // Codes refusing every cell say something about the backend, not the cell.
  std::vector<std::string> notes;
  std::set<ReasonCode> everywhere;
  for (const Rejection& r : cells.front().reasons) everywhere.insert(r.code);
  for (const Cell& c : cells) {
    std::set<ReasonCode> here;
    for (const Rejection& r : c.reasons) here.insert(r.code);
    std::set<ReasonCode> both;
    std::set_intersection(everywhere.begin(), everywhere.end(), here.begin(), here.end(),
                          std::inserter(both, both.begin()));
    everywhere = both;
  }
  for (ReasonCode code : everywhere)
    for (const Rejection& r : cells.front().reasons)
      if (r.code == code) {
        notes.push_back(fmt::format("always refused: {}: {}", to_string(code), r.detail));
        break;
      }
  // Combinations refused although each of their values is accepted somewhere.
  int exceptions = 0;
  std::string first_exception;
  for (const Cell& c : cells) {
    const bool expected = (c.invariant ? invariant_formats : formats).count(c.format) &&
                          fns.count(c.fn) && routings.count(c.routing);
    if (!expected || c.reasons.empty()) continue;
    if (exceptions++ == 0)
      first_exception =
          fmt::format("{}{} + {} + {}", to_string(c.format), c.invariant ? " (invariant)" : "",
                      to_string(c.fn), to_string(c.routing));
  }
  if (exceptions > 0)
    notes.push_back(
        fmt::format("{} other combination(s) refused, e.g. {}", exceptions, first_exception));
  if (b.is_reference())
    notes.push_back("the reference: chosen when forced (--backend) or allowed (--allow-reference)");
  for (std::string_view former : b.former_names())
    notes.push_back(fmt::format("named {} before (still accepted)", former));
  row.notes = notes.empty() ? "-" : join(notes, "; ");

  // ISA requirements: the same deployment on a CPU with no feature at all.
  const auto supported_cell =
      std::find_if(cells.begin(), cells.end(), [](const Cell& c) { return c.reasons.empty(); });
  const Cell probe_cell = supported_cell != cells.end() ? *supported_cell : cells.front();
  Deployment bare = cell_deployment(d0, probe_cell);
  bare.hardware.isa = IsaFeatures{};
  names.clear();
  for (const Rejection& r : b.check(bare))
    if (r.code == ReasonCode::unsupported_isa) names.push_back(r.required);
  row.isa = names.empty() ? "none" : join(names, " ");

  // Alignment: the smallest legal dimensions (multiples of 32).
  Deployment small = cell_deployment(d0, probe_cell);
  small.layer.hidden = small.layer.intermediate = 32;
  names.clear();
  for (const Rejection& r : b.check(small))
    if (r.code == ReasonCode::shape_alignment) names.push_back(r.required);
  row.alignment = names.empty() ? "multiple of 32" : join(names);
  return row;
}

std::vector<std::string> header() {
  std::vector<std::string> h = {"backend", "numerics class", "ISA required"};
  for (ActivationFormat f : all_activation_formats()) h.emplace_back(to_string(f));
  for (const char* s : {"activation functions", "routing", "H, I alignment", "notes"})
    h.emplace_back(s);
  return h;
}

std::vector<std::string> cells_of(const CapabilityRow& r) {
  std::vector<std::string> c = {r.backend, r.numerics_class, r.isa};
  c.insert(c.end(), r.formats.begin(), r.formats.end());
  for (const std::string* s : {&r.activation_fns, &r.routing_methods, &r.alignment, &r.notes})
    c.push_back(*s);
  return c;
}

}  // namespace

std::vector<CapabilityRow> capability_matrix(std::span<const Backend* const> backends,
                                             const Hardware& base) {
  std::vector<CapabilityRow> rows;
  for (const Backend* b : backends) rows.push_back(row_for(*b, base));
  return rows;
}

std::string format_capability_markdown(const std::vector<CapabilityRow>& rows) {
  std::string out =
      "# Backends: the capability matrix\n\n"
      "Generated by `mxmoe backends --markdown` from each registered backend's own check(), run\n"
      "over activation formats x batch invariance x activation functions x routing methods with\n"
      "every ISA feature granted; the ISA column is the same check with every feature off, the\n"
      "alignment column a layer with H = I = 32. Do not edit: a test fails when this file\n"
      "differs from the command's output.\n\n"
      "`yes, invariant`: supported, and batch invariance is proven for that format; `yes`:\n"
      "supported without batch invariance; `no`: refused (see docs/REASON_CODES.md). Backends\n"
      "of one numerics class give identical bits for the same input (docs/INVARIANCE.md).\n\n";
  out += "| " + join(header(), " | ") + " |\n|";
  for (std::size_t i = 0; i < header().size(); ++i) out += "---|";
  out += "\n";
  for (const CapabilityRow& r : rows) out += "| " + join(cells_of(r), " | ") + " |\n";
  out += "\n";
  for (const CapabilityRow& r : rows) out += fmt::format("- `{}`: {}\n", r.backend, r.description);
  return out;
}

std::string format_capability_text(const std::vector<CapabilityRow>& rows) {
  // One block per backend: the matrix is too wide for a terminal as a single table.
  std::string out;
  const std::vector<std::string> h = header();
  std::size_t width = 0;
  for (const std::string& s : h) width = std::max(width, s.size());
  for (const CapabilityRow& r : rows) {
    const std::vector<std::string> c = cells_of(r);
    out += fmt::format("{}: {}\n", r.backend, r.description);
    for (std::size_t i = 1; i < h.size(); ++i)
      out += fmt::format("  {:<{}}  {}\n", h[i], width, c[i]);
    out += "\n";
  }
  return out;
}

}  // namespace mxmoe
