#include "backends/common/group16_pack.hpp"

#include <stdexcept>
#include <string>

#include "base/huge_pages.hpp"

namespace mxmoe::group16 {
namespace {

void check_view(const Mxfp4View& v, const char* who, const char* name, std::int64_t experts,
                std::int64_t rows, std::int64_t cols) {
  if (v.empty() || v.experts != experts || v.rows != rows || v.cols != cols || cols % 32 != 0 ||
      rows % 32 != 0) {
    throw std::invalid_argument(std::string(who) + ": " + name + " does not match the layer spec");
  }
}

// Packs the 16 given rows of expert e into blocks x kBlockBytes.
void pack_group(const Mxfp4View& w, std::int64_t e, const std::int64_t* rows,
                NibbleArranger arrange, std::uint8_t* dst) {
  std::uint8_t codes[kRows][32];
  for (std::int64_t b = 0; b < w.row_scales(); ++b) {
    std::uint8_t* gb = dst + static_cast<std::size_t>(b) * kBlockBytes;
    for (int i = 0; i < kRows; ++i) {
      const std::uint8_t* src = w.row_blocks(e, rows[i]) + b * 16;
      for (int k = 0; k < 32; ++k)
        codes[i][k] = static_cast<std::uint8_t>((src[k / 2] >> (4 * (k % 2))) & 0x0F);
      gb[kNibbleBytes + static_cast<std::size_t>(i)] = w.row_scale(e, rows[i])[b];
    }
    arrange(codes, gb);
  }
}

// Reserves n bytes, asks for huge pages before the first touch, then sizes the vector.
void resize_huge(std::vector<std::uint8_t>& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), n);
  v.resize(n);
}

}  // namespace

PackedExperts pack_experts(const LayerSpec& spec, const LayerWeights& w, NibbleArranger arrange,
                           const char* who) {
  PackedExperts p;
  p.experts = spec.num_experts;
  p.hidden = spec.hidden;
  p.inter = spec.intermediate;
  const std::int64_t e_count = p.experts, h = p.hidden, inter = p.inter;
  check_view(w.w1, who, "w1", e_count, 2 * inter, h);
  check_view(w.w2, who, "w2", e_count, h, inter);
  if (spec.expert_bias && (w.b1.empty() || w.b2.empty()))
    throw std::invalid_argument(std::string(who) + ": expert biases b1/b2 missing");

  resize_huge(p.w1, static_cast<std::size_t>(e_count * (2 * inter / kRows)) * p.w1_group_bytes());
  resize_huge(p.w2, static_cast<std::size_t>(e_count * (h / kRows)) * p.w2_group_bytes());
  p.gate_bias.assign(static_cast<std::size_t>(e_count * inter), 0.0f);
  p.up_bias.assign(static_cast<std::size_t>(e_count * inter), 0.0f);
  p.b2.assign(static_cast<std::size_t>(e_count * h), 0.0f);
  const bool interleaved = spec.gate_up_layout == GateUpLayout::interleaved;
  auto gate_row = [&](std::int64_t j) { return interleaved ? 2 * j : j; };
  auto up_row = [&](std::int64_t j) { return interleaved ? 2 * j + 1 : inter + j; };
  std::int64_t rows[kRows];
  for (std::int64_t e = 0; e < e_count; ++e) {
    for (std::int64_t jt = 0; jt < inter / kRows; ++jt) {
      for (int up = 0; up < 2; ++up) {
        for (int i = 0; i < kRows; ++i)
          rows[i] = up ? up_row(kRows * jt + i) : gate_row(kRows * jt + i);
        pack_group(w.w1, e, rows, arrange, p.w1_group(e, 2 * jt + up));
      }
    }
    for (std::int64_t ot = 0; ot < h / kRows; ++ot) {
      for (int i = 0; i < kRows; ++i) rows[i] = kRows * ot + i;
      pack_group(w.w2, e, rows, arrange, p.w2_group(e, ot));
    }
    if (spec.expert_bias) {
      for (std::int64_t j = 0; j < inter; ++j) {
        p.gate_bias[static_cast<std::size_t>(e * inter + j)] = w.b1.at(e * 2 * inter + gate_row(j));
        p.up_bias[static_cast<std::size_t>(e * inter + j)] = w.b1.at(e * 2 * inter + up_row(j));
      }
      for (std::int64_t o = 0; o < h; ++o)
        p.b2[static_cast<std::size_t>(e * h + o)] = w.b2.at(e * h + o);
    }
  }
  return p;
}

}  // namespace mxmoe::group16
