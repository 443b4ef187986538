// agree_on_checkpoint: the ranks of a group compare what their checkpoints say before they
// load a layer from them: config.json as JSON, and every safetensors header
// (Checkpoint::tensor_table). Digests travel first; the texts only when they differ, to name
// the difference.
#include <fmt/core.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/json.hpp"
#include "mxmoe/expert_parallel.hpp"

namespace mxmoe {
namespace {

// config.json with its keys sorted (nlohmann::json orders them) and without Hugging Face's
// bookkeeping keys (`_name_or_path` is a local path, `_commit_hash` where it came from).
nlohmann::json canonical_config(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(json::parse_strict(text, "config.json").dump());
  if (j.is_object())
    for (auto it = j.begin(); it != j.end();)
      it = it.key().starts_with('_') ? j.erase(it) : std::next(it);
  return j;
}

std::uint64_t fnv(std::string_view text) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

std::string shortened(const std::string& text, std::size_t most = 80) {
  return text.size() <= most ? text : fmt::format("{}...", text.substr(0, most - 3));
}

// The first key path (in sorted order) whose values differ: "quantization_config.rule".
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b,
                             const std::string& path, std::string& va, std::string& vb) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string at = path.empty() ? key : path + "." + key;
      if (!b.contains(key)) {
        va = shortened(value.dump());
        vb = "absent";
        return at;
      }
      if (value != b.at(key)) return first_difference(value, b.at(key), at, va, vb);
    }
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) {
        va = "absent";
        vb = shortened(value.dump());
        return path.empty() ? key : path + "." + key;
      }
  }
  va = shortened(a.dump());
  vb = shortened(b.dump());
  return path.empty() ? "the whole file" : path;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

// The first line (tensor) of two tables that differs, both sides: "tensor NAME is 'U8 [..]
// FILE BEGIN END' on rank 0 and 'I8 ...' on rank R", or both lines when one rank has a tensor
// the other lacks (or a metadata entry).
std::string table_difference(const std::string& a, const std::string& b, std::size_t rank) {
  const std::vector<std::string> la = lines_of(a), lb = lines_of(b);
  std::size_t i = 0;
  while (i < la.size() && i < lb.size() && la[i] == lb[i]) ++i;
  const std::string sa = i < la.size() ? la[i] : "", sb = i < lb.size() ? lb[i] : "";
  const std::size_t na = sa.find(' '), nb = sb.find(' ');
  if (na != std::string::npos && na == nb && sa.compare(0, na, sb, 0, nb) == 0)
    return fmt::format(
        "tensor '{}' is '{}' on rank 0 and '{}' on rank {} (dtype [shape] file "
        "begin end)",
        shortened(sa.substr(0, na), 200), shortened(sa.substr(na + 1), 200),
        shortened(sb.substr(nb + 1), 200), rank);
  const auto side = [](const std::string& line) {
    return line.empty() ? std::string("nothing more") : fmt::format("'{}'", shortened(line, 200));
  };
  return fmt::format(
      "line {} of the tensor table (name dtype [shape] file begin end) is {} on "
      "rank 0 and {} on rank {}",
      i + 1, side(sa), side(sb), rank);
}

}  // namespace

void agree_on_checkpoint(Communicator& comm, const Checkpoint* checkpoint) {
  std::string config, table;
  if (checkpoint != nullptr) {
    config = canonical_config(checkpoint->config_json()).dump();
    table = checkpoint->tensor_table();
  }
  const std::uint64_t mine[3] = {checkpoint != nullptr ? 1u : 0u, fnv(config), fnv(table)};
  std::vector<std::uint64_t> all(3 * static_cast<std::size_t>(comm.size()));
  allgather(comm, mine, sizeof mine, all.data());
  // Every rank sees the same digests, so every rank takes the same collectives below.
  for (std::size_t r = 1; r < static_cast<std::size_t>(comm.size()); ++r) {
    const std::uint64_t* d = all.data() + 3 * r;
    if (d[0] != all[0])
      throw std::invalid_argument(fmt::format(
          "the ranks load different weights: rank 0 {} and rank {} {}; every rank must load the "
          "same layer",
          all[0] != 0 ? "reads a checkpoint" : "generates its weights (no --model)", r,
          d[0] != 0 ? "reads a checkpoint" : "generates its weights (no --model)"));
    if (d[1] != all[1]) {
      const std::vector<std::string> texts = allgather_strings(comm, config);
      std::string va, vb;
      const std::string key = first_difference(nlohmann::json::parse(texts[0]),
                                               nlohmann::json::parse(texts[r]), "", va, vb);
      throw std::invalid_argument(fmt::format(
          "the ranks' checkpoints differ: config.json's '{}' is {} on rank 0 and {} on rank {}; "
          "every rank must load the same checkpoint",
          key, va, vb, r));
    }
    if (d[2] != all[2]) {
      const std::vector<std::string> texts = allgather_strings(comm, table);
      throw std::invalid_argument(fmt::format(
          "the ranks' checkpoints differ: their safetensors headers differ: {}; every rank must "
          "load the same checkpoint",
          table_difference(texts[0], texts[r], r)));
    }
  }
}

}  // namespace mxmoe
