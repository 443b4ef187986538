// Hardware <-> JSON. ISA features are an object of named booleans so a captured probe can
// be read (and edited) by a person: exactly the features of the machine's architecture.
// "arch" and "sve_vector_bits" came with the aarch64 backends; a file without them was written
// before, on x86-64, and reads as such.
#include "hw/hardware_json.hpp"

#include <cstdint>
#include <limits>

#include "base/file.hpp"
#include "mxmoe/errors.hpp"
#include "mxmoe/hardware.hpp"

namespace mxmoe {
namespace json_io {

using json::get;

Json hardware_to_json(const Hardware& h) {
  Json isa = Json::object();
  for (std::string_view name : isa_feature_names(h.arch))
    isa[std::string(name)] = isa_feature(h.isa, name).value_or(false);
  Json cuda = Json::array();
  for (const CudaDevice& d : h.cuda_devices)
    cuda.push_back({{"name", d.name}, {"sm", d.sm}, {"memory_bytes", d.memory_bytes}});
  return Json{{"arch", h.arch},
              {"vendor", h.vendor},
              {"model", h.model},
              {"logical_cpus", h.logical_cpus},
              {"l1d_bytes", h.l1d_bytes},
              {"l2_bytes", h.l2_bytes},
              {"l3_bytes", h.l3_bytes},
              {"isa", isa},
              {"sve_vector_bits", h.sve_vector_bits},
              {"os_denied", h.os_denied},
              {"isa_cap", h.isa_cap},
              {"cuda_devices", cuda},
              {"source", h.source}};
}

Hardware hardware_from_json(const Json& j) {
  constexpr std::string_view what = "Hardware";
  json::expect_keys(j, what,
                    {"vendor", "model", "logical_cpus", "l1d_bytes", "l2_bytes", "l3_bytes", "isa",
                     "os_denied", "isa_cap", "cuda_devices", "source"},
                    {"arch", "sve_vector_bits"});
  Hardware h;
  if (j.contains("arch")) {
    h.arch = get<std::string>(j, what, "arch");
    if (h.arch != kArchX86_64 && h.arch != kArchAarch64)
      throw std::invalid_argument("Hardware.arch: \"" + h.arch + "\" is not one of \"" +
                                  std::string(kArchX86_64) + "\", \"" +
                                  std::string(kArchAarch64) + "\"");
  }
  h.vendor = get<std::string>(j, what, "vendor");
  h.model = get<std::string>(j, what, "model");
  h.logical_cpus = static_cast<int>(json::get_integer(j, what, "logical_cpus", 1, kMaxThreads));
  h.l1d_bytes =
      static_cast<std::uint64_t>(json::get_integer(j, what, "l1d_bytes", 0, kMaxCacheBytes));
  h.l2_bytes =
      static_cast<std::uint64_t>(json::get_integer(j, what, "l2_bytes", 0, kMaxCacheBytes));
  h.l3_bytes =
      static_cast<std::uint64_t>(json::get_integer(j, what, "l3_bytes", 0, kMaxCacheBytes));

  const Json& isa = j.at("isa");
  constexpr std::string_view isa_what = "Hardware.isa";
  if (!isa.is_object()) throw std::invalid_argument("Hardware.isa: expected an object");
  for (const auto& item : isa.items()) {
    const std::string_view arch = isa_feature_arch(item.key());
    if (arch.empty())
      throw std::invalid_argument("Hardware.isa: unknown feature \"" + item.key() + "\"");
    if (arch != h.arch)
      throw std::invalid_argument("Hardware.isa: feature \"" + item.key() + "\" is of " +
                                  std::string(arch) + ", not of this machine's arch " + h.arch);
    set_isa_feature(h.isa, item.key(), get<bool>(isa, isa_what, item.key().c_str()));
  }
  for (std::string_view name : isa_feature_names(h.arch))
    if (!isa.contains(name))
      throw std::invalid_argument("Hardware.isa: missing feature \"" + std::string(name) + "\"");
  if (j.contains("sve_vector_bits"))
    h.sve_vector_bits = static_cast<int>(json::get_integer(j, what, "sve_vector_bits", 0, 2048));
  if (h.sve_vector_bits % 128 != 0 || (h.sve_vector_bits != 0) != h.isa.sve)
    throw std::invalid_argument(
        "Hardware.sve_vector_bits: " + std::to_string(h.sve_vector_bits) +
        " must be a multiple of 128 (128..2048) where isa.sve is true, and 0 where it is not");

  h.os_denied = get<std::vector<std::string>>(j, what, "os_denied");
  for (const std::string& name : h.os_denied)
    if (isa_feature_arch(name) != h.arch)
      throw std::invalid_argument("Hardware.os_denied: \"" + name + "\" is not a feature of " +
                                  h.arch);
  // The aarch64 extensions the probe reports only with their base (arm_hwcap.cpp).
  if ((h.isa.asimddp || h.isa.i8mm || h.isa.bf16 || h.isa.sve) && !h.isa.asimd)
    throw std::invalid_argument("Hardware.isa: asimddp, i8mm, bf16 and sve need asimd");
  if (h.isa.sve2 && !h.isa.sve) throw std::invalid_argument("Hardware.isa: sve2 needs sve");
  h.isa_cap = get<std::string>(j, what, "isa_cap");
  (void)cap_isa(h.isa, h.isa_cap);  // throws for a cap that is not one of the known names
  if (!j.at("cuda_devices").is_array())
    throw std::invalid_argument("Hardware.cuda_devices: expected an array");
  for (const Json& d : j.at("cuda_devices")) {
    constexpr std::string_view dw = "Hardware.cuda_devices[]";
    json::expect_keys(d, dw, {"name", "sm", "memory_bytes"});
    h.cuda_devices.push_back(
        {get<std::string>(d, dw, "name"),
         static_cast<int>(json::get_integer(d, dw, "sm", 0, 10000)),
         static_cast<std::uint64_t>(json::get_integer(d, dw, "memory_bytes", 0,
                                                      std::numeric_limits<std::int64_t>::max()))});
  }
  h.source = get<std::string>(j, what, "source");
  return h;
}

}  // namespace json_io

std::string to_json(const Hardware& h) {
  return json_io::hardware_to_json(h).dump(2);
}

Hardware hardware_from_json(std::string_view text) {
  return json_io::hardware_from_json(json::parse_strict(text, "Hardware"));
}

Hardware hardware_from_file(const std::string& path) {
  const std::string text = files::read_regular_file<LoadError>(path);
  Hardware hw;
  try {
    hw = hardware_from_json(text);
  } catch (const std::invalid_argument& e) {
    throw LoadError(path + ": " + e.what());
  }
  hw.source = path;
  return hw;
}

}  // namespace mxmoe
