#include "produce/full_checkpoint.hpp"

#include <fmt/core.h>

#include <cstring>
#include <vector>

#include "model/model_config.hpp"
#include "model/random_weights.hpp"
#include "mxmoe/format.hpp"
#include "produce/checkpoint_writer.hpp"
#include "produce/full_model.hpp"

namespace mxmoe::produce {
namespace {

constexpr std::uint64_t kDefaultShardBytes = 4'000'000'000;

FullModel plan_full(const LayerSpec& spec, const GenerateOptions& o) {
  if (o.hash_layers != 0)
    throw std::invalid_argument("generate --full: hash layers are DeepSeek-V4's, not written here");
  FullModel m = full_model(spec, {o.layers, o.vocab, o.attention_heads, o.kv_heads, o.head_dim});
  // The config must read back as the spec, or the checkpoint would not be what was asked.
  const ModelConfig reread = parse_model_config(m.config_json, "generated config.json", spec.name);
  for (int n = 0; n < m.sizes.layers; ++n)
    if (reread.spec_of(n) != spec)
      throw std::invalid_argument(fmt::format(
          "generate --full: a {} config.json cannot express layer {} exactly (it reads back as {})",
          to_string(spec.family), n, to_json(reread.spec_of(n))));
  return m;
}

// The 8 bytes of group G (bytes 8G .. 8G + 7) of tensor T, whose stream is SEED.
template <TensorFill kFill>
std::uint64_t group(std::uint64_t seed, std::uint64_t g, float amplitude, int scale_base) {
  if constexpr (kFill == TensorFill::ones) {
    return 0x3F803F803F803F80ull;  // four BF16 1.0
  } else {
    const std::uint64_t r = Rng::at(seed, g);
    if constexpr (kFill == TensorFill::random_bytes) return r;
    std::uint64_t word = 0;
    if constexpr (kFill == TensorFill::mxfp4_scales) {
      for (int k = 0; k < 8; ++k)
        word |= static_cast<std::uint64_t>(scale_base + static_cast<int>((r >> (8 * k) & 0xFF) % 3))
                << (8 * k);
    } else {  // four BF16 values uniform in [-amplitude, amplitude)
      for (int k = 0; k < 4; ++k) {
        const auto u = static_cast<float>(r >> (16 * k) & 0xFFFF);
        const float v = ((u + 0.5f) * (1.0f / 32768.0f) - 1.0f) * amplitude;
        word |= static_cast<std::uint64_t>(f32_to_bf16(v)) << (16 * k);
      }
    }
    return word;
  }
}

template <TensorFill kFill>
void fill_groups(std::uint64_t seed, std::uint64_t first_group, std::span<std::uint8_t> out,
                 float amplitude, int scale_base) {
  const std::size_t whole = out.size() / 8;
  for (std::size_t g = 0; g < whole; ++g) {
    const std::uint64_t w = group<kFill>(seed, first_group + g, amplitude, scale_base);
    std::memcpy(out.data() + 8 * g, &w, 8);
  }
  if (out.size() % 8 != 0) {
    const std::uint64_t w = group<kFill>(seed, first_group + whole, amplitude, scale_base);
    std::memcpy(out.data() + 8 * whole, &w, out.size() % 8);
  }
}

// Bytes [offset, offset + out.size()) of tensor T (offset a multiple of 8).
void fill_piece(const FullModelTensor& t, std::uint64_t seed, std::uint64_t offset,
                std::span<std::uint8_t> out) {
  const std::uint64_t g = offset / 8;
  const int base = t.fill == TensorFill::mxfp4_scales ? mxfp4_random_scale_base(t.cols) : 0;
  switch (t.fill) {
    case TensorFill::uniform:
      return fill_groups<TensorFill::uniform>(seed, g, out, t.amplitude, base);
    case TensorFill::ones:
      return fill_groups<TensorFill::ones>(seed, g, out, t.amplitude, base);
    case TensorFill::random_bytes:
      return fill_groups<TensorFill::random_bytes>(seed, g, out, t.amplitude, base);
    case TensorFill::mxfp4_scales:
      return fill_groups<TensorFill::mxfp4_scales>(seed, g, out, t.amplitude, base);
  }
}

}  // namespace

std::function<void()> generate_poll(std::function<bool()> cancelled, const std::string& out,
                                    bool out_existed) {
  return [cancelled = std::move(cancelled), out, out_existed] {
    if (cancelled && cancelled())
      throw GenerateCancelled("generate: interrupted; " + out +
                              (out_existed ? " is left as it was" : " was not created"));
  };
}

std::uint64_t full_checkpoint_bytes(const LayerSpec& spec, const GenerateOptions& options) {
  return plan_full(spec, options).bytes();
}

void write_full_checkpoint(const std::string& out, const LayerSpec& spec,
                           const GenerateOptions& options) {
  const FullModel m = plan_full(spec, options);
  std::vector<std::uint64_t> sizes;
  for (const FullModelTensor& t : m.tensors) sizes.push_back(t.bytes());
  const std::vector<std::size_t> first = pack_shards(
      sizes, options.max_shard_bytes == 0 ? kDefaultShardBytes : options.max_shard_bytes);

  CheckpointDirectoryWriter writer(out, options.force);
  writer.set_poll(generate_poll(options.cancelled, out, writer.replaces_existing()));
  ProgressMeter meter("generate", m.bytes(), options.progress);
  std::vector<std::uint8_t> buffer;
  for (std::size_t shard = 0; shard < first.size(); ++shard) {
    const std::size_t end = shard + 1 < first.size() ? first[shard + 1] : m.tensors.size();
    std::vector<PlannedTensor> planned;
    std::uint64_t shard_bytes = 0;
    for (std::size_t k = first[shard]; k < end; ++k) {
      const FullModelTensor& t = m.tensors[k];
      const std::uint64_t seed = Rng::at(options.seed, k);  // tensor k's own stream
      shard_bytes += t.bytes();
      planned.push_back(
          {{t.name, t.dtype, t.shape}, [&t, seed, &buffer, &meter](const ByteSink& emit) {
             const std::uint64_t bytes = t.bytes();
             for (std::uint64_t at = 0; at < bytes; at += kWritePieceBytes) {
               buffer.resize(
                   static_cast<std::size_t>(std::min<std::uint64_t>(kWritePieceBytes, bytes - at)));
               fill_piece(t, seed, at, buffer);
               emit(buffer);
               meter.add(buffer.size());
             }
           }});
    }
    const std::string file = shard_file_name(shard + 1, first.size());
    writer.add_shard(file, planned);
    if (options.progress)
      options.progress(fmt::format("generate: {} ({}/{}): {} tensors, {:.1f} MB; {}", file,
                                   shard + 1, first.size(), end - first[shard],
                                   static_cast<double>(shard_bytes) / 1e6, meter.fraction()));
  }
  writer.add_file("tokenizer.json", m.tokenizer_json);
  writer.add_file("tokenizer_config.json", m.tokenizer_config_json);
  writer.add_file("generation_config.json", m.generation_config_json);
  writer.finish(m.config_json, /*with_index=*/true);
}

}  // namespace mxmoe::produce
