// A decoder's attention kernels (backends/dense/attention_kernels.hpp, llm/attention.hpp):
// every kernel this CPU runs gives the portable kernel's bits (the numerics class
// attention_dot8: scores, softmax, values), call by call and through attend() over a KV cache
// with windows, sinks, GQA groups, head_dim 64 and 128, 1 to 300 keys and 1 or 2 threads; the
// output is close to a float64 softmax within a bound derived below; the class's exponential is
// within 1 ulp; the choice follows the Hardware (a cap at MXMOE_MAX_ISA=none picks the portable
// kernels) and a head_dim off the 8-lane chunks keeps the portable kernels, saying why.
#include "llm/attention.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/dense/dense_attention.hpp"
#include "base/thread_pool.hpp"
#include "mxmoe/hardware.hpp"
#include "test_platform.hpp"

namespace mxmoe {
namespace {

using dense::AttentionKernels;
using ::testing::HasSubstr;

constexpr double kUnit = 1.0 / (1 << 24);  // f32 unit roundoff

std::vector<float> normal(std::size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The kernels of every Hardware variant this CPU runs (the probe, capped at avx2, at none),
// each once; the portable one last.
std::vector<AttentionKernels> kernels_here(int head_dim) {
  std::vector<AttentionKernels> out;
  for (const char* cap : {"", "avx2", "none"}) {
    const AttentionKernels k =
        dense::judge_attention_kernels(head_dim, probe_hardware(cap)).kernels;
    if (std::none_of(out.begin(), out.end(),
                     [&](const AttentionKernels& o) { return std::string(o.name) == k.name; }))
      out.push_back(k);
  }
  return out;
}

TEST(LlmAttention, TheChoiceFollowsTheHardwareAndACapPicksThePortableKernels) {
  const dense::AttentionSelection none = dense::judge_attention_kernels(64, probe_hardware("none"));
  EXPECT_EQ(none.chosen, "portable_attention");
  EXPECT_EQ(none.kernels.scores, &dense::attention_dot8_scores__portable);
  EXPECT_EQ(none.kernels.values, &dense::attention_dot8_values__portable);
  EXPECT_EQ(none.kernels.softmax, &dense::attention_dot8_softmax__portable);
  ASSERT_EQ(none.candidates.size(), 3u);
  for (std::size_t i = 0; i + 1 < none.candidates.size(); ++i) {
    ASSERT_FALSE(none.candidates[i].supported) << none.candidates[i].name;
    EXPECT_EQ(none.candidates[i].reasons[0].code,
              kX86BackendsCompiled ? ReasonCode::unsupported_isa : ReasonCode::not_compiled);
  }
  EXPECT_THAT(dense::describe(none), HasSubstr("attention: portable_attention"));
  if (kX86BackendsCompiled) {
    const Hardware avx2 = probe_hardware("avx2");
    if (isa_feature(avx2.isa, "avx2").value_or(false) &&
        isa_feature(avx2.isa, "fma").value_or(false) &&
        isa_feature(avx2.isa, "f16c").value_or(false)) {
      const dense::AttentionSelection s = dense::judge_attention_kernels(128, avx2);
      EXPECT_EQ(s.chosen, "avx2_attention");
      EXPECT_EQ(s.kernels.softmax, &dense::attention_dot8_softmax__avx2);
      EXPECT_THAT(dense::describe(s), HasSubstr("MXMOE_MAX_ISA"));  // why avx512 is refused
    }
  }
}

TEST(LlmAttention, AHeadDimOffTheEightLaneChunksKeepsThePortableKernels) {
  const dense::AttentionSelection s = dense::judge_attention_kernels(36, probe_hardware());
  EXPECT_EQ(s.chosen, "portable_attention");
  for (const auto& v : s.candidates)
    if (v.name != "portable_attention") {
      ASSERT_FALSE(v.supported);
      EXPECT_EQ(v.reasons[0].code, ReasonCode::shape_alignment);
    }
  EXPECT_THAT(dense::describe(s), HasSubstr("head_dim = 36"));
}

// Each kernel's calls against the portable ones, bit for bit: heads 1..8 a call (odd ones
// included: the avx512 kernel pairs heads), 1..300 keys (a partial block of 8 and of 64),
// head_dim 8..128 (avx2's 32-column blocks and 8-column tails, avx512's masked half chunk), a
// key stride wider than a head (the cache's kv heads), and large or tiny values.
TEST(LlmAttention, EveryKernelGivesThePortableBitsCallByCall) {
  for (const int hd : {8, 24, 40, 64, 128}) {
    const std::vector<AttentionKernels> kernels = kernels_here(hd);
    for (const int heads : {1, 2, 3, 8})
      for (const std::int64_t keys : {1, 7, 8, 9, 65, 128, 300}) {
        const std::int64_t stride = 3 * hd;
        const unsigned seed = static_cast<unsigned>(hd * 1000 + heads * 100 + keys);
        const std::vector<float> q = normal(static_cast<std::size_t>(heads * hd), seed);
        std::vector<float> k = normal(static_cast<std::size_t>(keys * stride), seed + 1);
        const std::vector<float> v = normal(static_cast<std::size_t>(keys * stride), seed + 2);
        k[0] = 3e18f;  // huge products, and a subnormal one
        if (k.size() > 9) k[9] = 1e-38f;
        std::vector<float> w = normal(static_cast<std::size_t>(heads * keys), seed + 3, 0.1f);
        std::vector<std::vector<float>> scores, values;
        for (const AttentionKernels& kn : kernels) {
          std::vector<float> s(static_cast<std::size_t>(heads * (keys + 1)), std::nanf(""));
          kn.scores({.q = q.data(),
                     .heads = heads,
                     .head_dim = hd,
                     .k = k.data(),
                     .k_stride = stride,
                     .keys = keys,
                     .scale = 0.125f,
                     .scores = s.data(),
                     .scores_stride = keys + 1});
          std::vector<float> o(static_cast<std::size_t>(heads * hd), std::nanf(""));
          kn.values({.w = w.data(),
                     .w_stride = keys,
                     .heads = heads,
                     .head_dim = hd,
                     .v = v.data(),
                     .v_stride = stride,
                     .keys = keys,
                     .out = o.data()});
          scores.push_back(std::move(s));
          values.push_back(std::move(o));
        }
        for (std::size_t i = 0; i + 1 < kernels.size(); ++i) {
          const std::string what = std::string(kernels[i].name) + " head_dim " +
                                   std::to_string(hd) + " heads " + std::to_string(heads) +
                                   " keys " + std::to_string(keys);
          EXPECT_EQ(std::memcmp(scores[i].data(), scores.back().data(), scores[i].size() * 4), 0)
              << "scores, " << what;
          EXPECT_EQ(std::memcmp(values[i].data(), values.back().data(), values[i].size() * 4), 0)
              << "values, " << what;
        }
      }
  }
}

// The class's exponential against float64 over its domain (every 127th float of [-87, 0], both
// ends, and the points where n changes): within 1 ulp of e^x (0.90 at worst on every 61st; the
// attend() bound below allows 2), exactly 1 at 0 and +0 below -87; NaN stays the same NaN.
TEST(LlmAttention, TheExponentialIsWithinOneUlpOfFloat64) {
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const float got = dense::attention_exp(x);
    const double exact = std::exp(double{x});
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    const double err = std::fabs(double{got} - exact) / ulp;
    if (err > worst) worst = err, worst_x = x;
  };
  std::uint32_t bits;
  const float lo = -87.0f;
  std::memcpy(&bits, &lo, 4);
  for (std::uint32_t b = 0; b <= (bits & 0x7FFFFFFFu); b += 127) {  // -0 down to -87
    float x;
    const std::uint32_t neg = b | 0x80000000u;
    std::memcpy(&x, &neg, 4);
    check(x);
  }
  for (int n = -125; n <= 0; ++n)
    for (const float d : {-0.5f, 0.5f}) {
      const float edge = (static_cast<float>(n) + d) * 0.69314718f;
      for (const float x : {std::nextafter(edge, -1e9f), edge, std::nextafter(edge, 1e9f)})
        if (x >= lo && x <= 0) check(x);
    }
  check(lo);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_EQ(dense::attention_exp(0.0f), 1.0f);
  EXPECT_EQ(dense::attention_exp(-0.0f), 1.0f);
  EXPECT_EQ(dense::attention_exp(std::nextafter(lo, -1e9f)), 0.0f);
  EXPECT_EQ(dense::attention_exp(-INFINITY), 0.0f);
  const float nan = std::nanf("7");
  const float got = dense::attention_exp(nan);
  EXPECT_EQ(std::memcmp(&got, &nan, 4), 0);
}

// Whether A and B hold the same bits, but for NaN, where both must be NaN (the class leaves a
// NaN's payload unspecified: two NaNs meeting in a sum keep the first operand's, and the
// compiler may swap a commutative operation's operands).
bool same_bits_or_both_nan(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) ? !std::isnan(b[i]) : std::memcmp(&a[i], &b[i], 4) != 0) return false;
  return true;
}

// Each kernel's softmax against the portable one, bit for bit, row by row: 1..40 keys (every
// tail of the 16-lane chunks, and of AVX2's two 8-lane halves), 300 and 2000, with and without
// sinks, and hostile rows: a key of -inf (a masked score), scores 1e4 apart (weights that
// underflow to +0), a NaN score, a sink far above every score, every score equal, and scores
// spread over the exponential's whole domain [-88, 0] with its edge at -87 (x = s - 0: the
// lanes evaluate the exponential exactly there, where 2^n is smallest).
TEST(LlmAttention, EveryKernelGivesThePortableSoftmaxBits) {
  const std::vector<AttentionKernels> kernels = kernels_here(64);
  std::vector<std::int64_t> key_counts;
  for (std::int64_t k = 1; k <= 40; ++k) key_counts.push_back(k);
  key_counts.push_back(300);
  key_counts.push_back(2000);
  for (const std::int64_t keys : key_counts)
    for (const int variant : {0, 1, 2, 3, 4, 5, 6})
      for (const bool with_sinks : {false, true}) {
        const int heads = 3;
        const std::int64_t stride = keys + 5;
        std::vector<float> in = normal(static_cast<std::size_t>(heads * stride),
                                       static_cast<unsigned>(keys * 10 + variant), 4.0f);
        std::vector<float> sinks = normal(heads, static_cast<unsigned>(keys + 99), 2.0f);
        if (variant == 1 && keys > 1) in[static_cast<std::size_t>(keys / 2)] = -INFINITY;
        if (variant == 2)
          for (std::int64_t p = 0; p < keys; p += 3)
            in[static_cast<std::size_t>(stride + p)] -= 1e4f;
        if (variant == 3) in[static_cast<std::size_t>(2 * stride + keys - 1)] = std::nanf("");
        if (variant == 4) sinks[1] = 1e3f;
        if (variant == 5) std::fill(in.begin(), in.end(), 0.25f);
        if (variant == 6) {
          for (int h = 0; h < heads; ++h)
            for (std::int64_t p = 0; p < keys; ++p)
              in[static_cast<std::size_t>(h * stride + p)] =
                  -88.0f * static_cast<float>(p + h) / static_cast<float>(keys + 2);
          const float edges[] = {-87.0f,  std::nextafter(-87.0f, -1e9f),
                                 std::nextafter(-87.0f, 0.0f), -86.99f, -INFINITY, 0.0f};
          for (std::size_t e = 0; e < std::size(edges); ++e)
            in[(e * 7) % static_cast<std::size_t>(keys)] = edges[e];
          std::fill(sinks.begin(), sinks.end(), -50.0f);
        }
        std::vector<std::vector<float>> outs;
        for (const AttentionKernels& kn : kernels) {
          std::vector<float> s = in;
          kn.softmax({.s = s.data(), .stride = stride, .heads = heads, .keys = keys,
                      .sinks = with_sinks ? sinks.data() : nullptr});
          outs.push_back(std::move(s));
        }
        for (std::size_t i = 0; i + 1 < kernels.size(); ++i)
          EXPECT_TRUE(same_bits_or_both_nan(outs[i], outs.back()))
              << kernels[i].name << " keys " << keys << " variant " << variant << " sinks "
              << with_sinks;
        // The weights of a finite row sum to 1 (to a few roundings); the padding is untouched.
        if (variant != 3 && !with_sinks)
          for (int h = 0; h < heads; ++h) {
            double sum = 0;
            for (std::int64_t p = 0; p < keys; ++p)
              sum += double{outs.back()[static_cast<std::size_t>(h * stride + p)]};
            EXPECT_NEAR(sum, 1.0, static_cast<double>(keys + 8) * kUnit)
                << "keys " << keys << " variant " << variant;
          }
        for (const std::vector<float>& out : outs)
          for (int h = 0; h < heads; ++h)
            for (std::int64_t p = keys; p < stride && h * stride + p < std::ssize(out); ++p)
              ASSERT_EQ(std::memcmp(&out[static_cast<std::size_t>(h * stride + p)],
                                    &in[static_cast<std::size_t>(h * stride + p)], 4),
                        0)
                  << "keys " << keys << ": the padding after the keys was written";
      }
}

struct Case {
  int heads, kv_heads, head_dim, window;
  bool sinks;
};

// attend() over a cache of 2 slots: rows of both slots at positions 0, 6, 127, 299 (1, 7,
// 128, 300 keys, fewer under a window), every kernel and 1 or 2 threads give the portable
// kernel's bits; the portable result is within the bound below of a float64 softmax.
TEST(LlmAttention, AttendGivesThePortableBitsAndIsCloseToFloat64) {
  const std::vector<Case> cases = {{8, 1, 64, 0, true},    {64, 8, 64, 128, true},
                                   {16, 8, 64, 0, false},  {8, 2, 128, 0, false},
                                   {4, 4, 128, 100, true}, {6, 2, 64, 0, true}};
  const int context = 300, slots = 2;
  for (const Case& c : cases) {
    const int hd = c.head_dim, group = c.heads / c.kv_heads;
    llm::KvCache cache(1, slots, context, c.kv_heads, hd);
    const std::size_t kv_row = static_cast<std::size_t>(c.kv_heads * hd);
    for (int slot = 0; slot < slots; ++slot)
      for (int p = 0; p < context; ++p) {
        const auto k = normal(kv_row, static_cast<unsigned>(slot * 1000 + p));
        const auto v = normal(kv_row, static_cast<unsigned>(slot * 1000 + p + 500000));
        std::memcpy(cache.key(0, slot, p), k.data(), kv_row * 4);
        std::memcpy(cache.value(0, slot, p), v.data(), kv_row * 4);
      }
    const std::vector<llm::QueryRow> rows = {{0, 0}, {1, 6}, {0, 127}, {1, 299}, {0, 299}, {1, 0}};
    const std::size_t q_row = static_cast<std::size_t>(c.heads * hd);
    const std::vector<float> q = normal(rows.size() * q_row, 77, 0.5f);
    const std::vector<float> sinks = normal(static_cast<std::size_t>(c.heads), 78);
    const llm::AttentionShape shape{.heads = c.heads,
                                    .kv_heads = c.kv_heads,
                                    .head_dim = hd,
                                    .window = c.window,
                                    .sinks = c.sinks ? sinks.data() : nullptr,
                                    .scale = 1.0f / std::sqrt(static_cast<float>(hd))};
    const std::size_t stride = llm::attention_scratch_floats(context, group);
    std::vector<std::vector<float>> outs;
    std::vector<std::string> names;
    for (const AttentionKernels& kn : kernels_here(hd))
      for (const int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> scratch(stride * static_cast<std::size_t>(threads));
        std::vector<float> out(rows.size() * q_row, std::nanf(""));
        llm::attend(shape, kn, cache, 0, rows, q.data(), out.data(), scratch.data(), stride, pool);
        outs.push_back(std::move(out));
        names.push_back(std::string(kn.name) + " at " + std::to_string(threads) + " threads");
      }
    const std::string what = "heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                             " head_dim " + std::to_string(hd) + " window " +
                             std::to_string(c.window);
    for (std::size_t i = 0; i + 1 < outs.size(); ++i)
      EXPECT_EQ(std::memcmp(outs[i].data(), outs.back().data(), outs.back().size() * 4), 0)
          << names[i] << ", " << what;

    // The bound. A score's error: dot8 sums head_dim / 8 products in a lane and 3 tree levels,
    // then the scale: |ds| <= (head_dim / 8 + 5) u scale sum |q k| = D. Each weight
    // e_p / total is then within a factor exp(2 D) (1 + (n + 10) u) of exact (the max cancels;
    // the class's exp is within 1 ulp (TheExponentialIsWithinOneUlpOfFloat64), counted here as
    // 2 ulp = 4 u; the subtraction before it and the division add a u each, the total at most
    // n u), and the
    // weighted sum of values adds n u sum w |v|; so |out - exact| <= ((exp(2D) - 1) +
    // (2n + 20) u) sum w |v|, where w and v are float64's and sum w |v| <= max |v|.
    const std::vector<float>& got = outs.back();
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (int h = 0; h < c.heads; ++h) {
        const int kvh = h / group;
        const int first = c.window > 0 ? std::max(0, rows[r].position - c.window + 1) : 0;
        const int n = rows[r].position - first + 1;
        std::vector<double> s(static_cast<std::size_t>(n));
        double max_s = c.sinks ? sinks[static_cast<std::size_t>(h)] : -INFINITY, d_bound = 0;
        const float* qh = q.data() + r * q_row + static_cast<std::size_t>(h * hd);
        for (int p = 0; p < n; ++p) {
          const float* kp = cache.key(0, rows[r].slot, first + p) + kvh * hd;
          double dot = 0, mag = 0;
          for (int i = 0; i < hd; ++i) {
            dot += double{qh[i]} * double{kp[i]};
            mag += std::fabs(double{qh[i]} * double{kp[i]});
          }
          s[static_cast<std::size_t>(p)] = dot * double{shape.scale};
          max_s = std::max(max_s, s[static_cast<std::size_t>(p)]);
          d_bound = std::max(d_bound, (hd / 8 + 5) * kUnit * double{shape.scale} * mag);
        }
        double total = c.sinks ? std::exp(double{sinks[static_cast<std::size_t>(h)]} - max_s) : 0;
        for (double& x : s) total += (x = std::exp(x - max_s));
        const double bound = std::expm1(2 * d_bound) + (2 * n + 20) * kUnit;
        for (int d = 0; d < hd; ++d) {
          double exact = 0, mag = 0;
          for (int p = 0; p < n; ++p) {
            const double vp = cache.value(0, rows[r].slot, first + p)[kvh * hd + d];
            exact += s[static_cast<std::size_t>(p)] / total * vp;
            mag += s[static_cast<std::size_t>(p)] / total * std::fabs(vp);
          }
          EXPECT_NEAR(got[r * q_row + static_cast<std::size_t>(h * hd + d)], exact,
                      bound * mag + 1e-30)
              << what << " row " << r << " head " << h << " d " << d;
        }
      }
  }
}

}  // namespace
}  // namespace mxmoe
