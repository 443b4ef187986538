// `model.safetensors.index.json`: which shard holds each tensor.
#include "base/json.hpp"
#include "base/printable.hpp"
#include "io/safetensors.hpp"
#include "mxmoe/checkpoint.hpp"

namespace mxmoe {

bool is_plain_file_name(std::string_view name) noexcept {
  if (name.empty() || name == "." || name == "..") return false;
  for (const char c : name)
    if (c == '/' || c == '\\' || c == '\0') return false;
  return true;
}

SafetensorsIndex parse_safetensors_index(std::string_view json_text, const std::string& label) {
  // Root -> weight_map / metadata -> (metadata values may hold one more level).
  const json::Json root = json::parse_strict<LoadError>(json_text, label, 4);
  if (!root.is_object()) throw LoadError(label + ": the index must be a JSON object");
  SafetensorsIndex index;
  if (root.contains("metadata")) {
    const auto& meta = root["metadata"];
    if (!meta.is_object()) throw LoadError(label + ": \"metadata\" must be an object");
    if (meta.contains("total_size")) {
      const auto& total = meta["total_size"];
      if (!total.is_number_unsigned())
        throw LoadError(label + ": metadata.total_size must be a non-negative integer, got " +
                        total.dump());
      index.total_size = total.get<std::uint64_t>();
    }
  }
  if (!root.contains("weight_map")) throw LoadError(label + ": missing \"weight_map\"");
  const auto& map = root["weight_map"];
  if (!map.is_object()) throw LoadError(label + ": \"weight_map\" must be an object");
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string())
      throw LoadError(label + ": weight_map[\"" + printable(tensor) +
                      "\"] must be a file name string, got " + shard.dump());
    const auto& file = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(file))
      throw LoadError(label + ": weight_map[\"" + printable(tensor) + "\"] = \"" + printable(file) +
                      "\" is not a plain file name in the checkpoint directory (no path "
                      "separators, no \".\" or \"..\")");
    index.weight_map.emplace(tensor, file);
  }
  return index;
}

}  // namespace mxmoe
