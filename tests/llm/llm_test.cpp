// The whole-model runtime (src/llm, include/mxmoe/llm.hpp) on tiny generated gpt-oss and
// Qwen3 checkpoints: batch invariance in bits (a sequence's logits alone, in a batch at every
// slot, in one step or mixed with other sequences' prefill and decode, at 1 and 2 threads),
// the refusals (context, vocabulary, tensors that disagree with config.json, DeepSeek), the
// sampler's determinism. Agreement with transformers' own models is python/tests/test_llm.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "base/json.hpp"
#include "llm/decoder.hpp"
#include "llm/sampler.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/generate.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/llm.hpp"
#include "mxmoe/oracle.hpp"
#include "produce/quantize_checkpoint.hpp"
#include "test_runtime.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

LayerSpec tiny_spec(const std::string& preset) {
  return resize(mxmoe::preset(preset), {.experts = 4, .top_k = 2, .hidden = 64, .intermediate = 64});
}

// A tiny whole model of PRESET written once per test program (Qwen3's BF16 experts as
// published, then quantized to MXFP4 as a user converts them).
const std::string& tiny_model(const std::string& preset) {
  // Removed when the test program ends.
  struct Made : std::map<std::string, std::string> {
    ~Made() {
      for (const auto& [name, dir] : *this) fs::remove_all(dir);
    }
  };
  static Made made;
  auto it = made.find(preset);
  if (it != made.end()) return it->second;
  const std::string dir = (fs::temp_directory_path() /
                           ("mxmoe-llm-test-" + preset + "-" + std::to_string(::getpid())))
                              .string();
  GenerateOptions o;
  o.full = true;
  o.layers = 3;
  o.vocab = 300;
  o.attention_heads = 4;
  o.kv_heads = 2;
  o.head_dim = 16;
  o.force = true;
  if (preset == "qwen3-30b-a3b") {
    generate_checkpoint(dir + "-bf16", tiny_spec(preset), o);
    produce::QuantizeOptions q;
    q.force = true;
    produce::quantize_checkpoint(dir + "-bf16", dir, q);
    fs::remove_all(dir + "-bf16");
  } else {
    generate_checkpoint(dir, tiny_spec(preset), o);
  }
  return made.emplace(preset, dir).first->second;
}

llm::DecoderOptions options(int slots, bool invariant = true) {
  llm::DecoderOptions o;
  o.request.batch_invariant = invariant;
  o.max_context = 64;
  o.max_slots = slots;
  o.max_step_rows = 64;
  return o;
}

std::vector<std::int32_t> prompt(int length, int seed) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(length));
  for (int i = 0; i < length; ++i) p[static_cast<std::size_t>(i)] = (seed * 37 + i * 11) % 290 + 3;
  return p;
}

// The logits of every position of P run alone in slot 0 of a fresh decoder, one step per
// token after a prefill of `prefill` tokens.
std::vector<float> alone(llm::Decoder& d, const std::vector<std::int32_t>& p, int prefill) {
  const int vocab = d.config().vocab;
  d.reset(0);
  std::vector<float> out(p.size() * static_cast<std::size_t>(vocab));
  std::vector<llm::StepRow> rows;
  for (int i = 0; i < prefill; ++i) rows.push_back({p[static_cast<std::size_t>(i)], 0, true});
  d.step(rows, out.data());
  for (std::size_t i = static_cast<std::size_t>(prefill); i < p.size(); ++i) {
    const llm::StepRow row{p[i], 0, true};
    d.step({&row, 1}, out.data() + i * static_cast<std::size_t>(vocab));
  }
  return out;
}

class Invariance : public ::testing::TestWithParam<std::string> {};

TEST_P(Invariance, ASequenceHasTheSameLogitBitsAloneAndInAnyBatch) {
  const std::string& dir = tiny_model(GetParam());
  const Hardware hw = probe_hardware();
  llm::Decoder one(dir, hw, testing::test_runtime(1), options(1));
  const int vocab = one.config().vocab;
  const auto a = prompt(20, 1), b = prompt(7, 2), c = prompt(33, 3);
  const std::vector<float> want = alone(one, a, 20);
  // Prefilled token by token instead: the same bits (the step's size does not matter).
  EXPECT_EQ(alone(one, a, 1), want);

  for (int threads : {1, 2}) {
    llm::Decoder d(dir, hw, testing::test_runtime(threads), options(3));
    for (int slot = 0; slot < 3; ++slot) {
      // A's prefill shares its step with B's whole prompt and C's first half; then A decodes
      // beside the others' decode and C's second half.
      for (int s = 0; s < 3; ++s) d.reset(s);
      const int other1 = (slot + 1) % 3, other2 = (slot + 2) % 3;
      std::vector<llm::StepRow> rows;
      for (std::int32_t t : b) rows.push_back({t, other1, false});
      for (int i = 0; i < 12; ++i) rows.push_back({a[static_cast<std::size_t>(i)], slot, true});
      for (int i = 0; i < 16; ++i) rows.push_back({c[static_cast<std::size_t>(i)], other2, false});
      std::vector<float> got(a.size() * static_cast<std::size_t>(vocab));
      d.step(rows, got.data());
      for (std::size_t i = 12; i < a.size(); ++i) {
        rows.clear();
        rows.push_back({c[16 + (i - 12)], other2, false});
        rows.push_back({a[i], slot, true});
        rows.push_back({b[0], other1, false});
        d.step(rows, got.data() + i * static_cast<std::size_t>(vocab));
      }
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << "slot " << slot << ", " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Invariance, ::testing::Values("gpt-oss-20b", "qwen3-30b-a3b"));

TEST(Decoder, RefusesPastTheContextNamingTheLimitAndKeepsItsState) {
  const std::string& dir = tiny_model("gpt-oss-20b");
  llm::DecoderOptions o = options(1);
  o.max_context = 8;
  llm::Decoder d(dir, probe_hardware(), testing::test_runtime(1), o);
  std::vector<llm::StepRow> rows(6, {5, 0, false});
  std::vector<float> logits(static_cast<std::size_t>(d.config().vocab));
  d.step(rows, logits.data());
  EXPECT_EQ(d.length(0), 6);
  try {
    d.step(rows, logits.data());
    FAIL() << "12 positions fit a context of 8";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("exceed its context of 8 tokens"));
  }
  EXPECT_EQ(d.length(0), 6);  // the refused step left nothing behind
}

TEST(Decoder, DescribesItsAttentionKernelsAndACapPicksThePortableOnes) {
  const std::string& dir = tiny_model("gpt-oss-20b");
  llm::DecoderOptions o = options(1);
  o.request.allow_reference = true;  // no MoE backend is left under the cap but the reference
  const llm::Decoder capped(dir, probe_hardware("none"), testing::test_runtime(1), o);
  EXPECT_THAT(capped.describe(), HasSubstr("attention: portable_attention\n"));
  const llm::Decoder here(dir, probe_hardware(), testing::test_runtime(1), options(1));
  EXPECT_THAT(here.describe(), HasSubstr(isa_feature(probe_hardware().isa, "avx512f").value_or(false)
                                             ? "attention: avx512_attention\n"
                                             : "attention: "));
}

TEST(Decoder, RefusesATokenOutsideTheVocabulary) {
  llm::Decoder d(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), options(1));
  const llm::StepRow row{300, 0, true};
  std::vector<float> logits(300);
  try {
    d.step({&row, 1}, logits.data());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 300 (row 0) is outside the vocabulary [0, 300)"));
  }
  EXPECT_EQ(d.length(0), 0);
}

// A copy of the tiny model whose config.json is edited by EDIT.
std::string edited_copy(const std::string& name, const std::function<void(json::Json&)>& edit) {
  const fs::path src = tiny_model("gpt-oss-20b");
  const fs::path dst = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::copy(src, dst, fs::copy_options::recursive);
  std::ifstream in(dst / "config.json");
  json::Json j = json::Json::parse(in);
  edit(j);
  std::ofstream(dst / "config.json") << j.dump(2);
  return dst.string();
}

TEST(Decoder, ATensorThatDisagreesWithConfigIsRefusedByName) {
  const std::string dir = edited_copy("mxmoe-llm-heads", [](json::Json& j) { j["num_attention_heads"] = 8; });
  try {
    llm::Decoder d(dir, probe_hardware(), testing::test_runtime(1), options(1));
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.layers.0.self_attn.q_proj.weight' has shape [64, 64], "
                                    "config.json implies [128, 64]"));
  }
  fs::remove_all(dir);
}

TEST(Decoder, DeepSeekIsRefusedNamingTheMissingAttention) {
  const std::string dir = edited_copy("mxmoe-llm-v3", [](json::Json& j) { j["model_type"] = "deepseek_v3"; });
  try {
    llm::Decoder d(dir, probe_hardware(), testing::test_runtime(1), options(1));
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("multi-head latent attention"));
    EXPECT_THAT(e.what(), HasSubstr("layer API"));
  }
  fs::remove_all(dir);
}

TEST(Decoder, MemoryBeyondTheLimitIsRefusedBeforeAllocating) {
  llm::DecoderOptions o = options(1);
  o.memory_limit = 1000;
  try {
    llm::Decoder d(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), o);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("KV cache"));
    EXPECT_THAT(e.what(), HasSubstr("--max-context"));
  }
}

// The step's buffers and the MoE layers' workspaces grow with the rows of a step (the prefill
// chunk): a step of a million rows asks for gigabytes even of a tiny model, and was allocated
// unchecked before this test.
TEST(Decoder, StepBuffersBeyondTheLimitAreRefusedNamingThePrefillChunk) {
  llm::DecoderOptions o = options(1);
  o.memory_limit = std::uint64_t{1} << 30;
  { llm::Decoder fits(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), o); }
  o.max_step_rows = 1 << 20;
  try {
    llm::Decoder d(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), o);
    FAIL() << "a step of 2^20 rows fit in 1 GiB";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("step buffers"));
    EXPECT_THAT(e.what(), HasSubstr("steps of 1048576 rows"));
    EXPECT_THAT(e.what(), HasSubstr("--prefill-chunk"));
  }
}

TEST(LanguageModel, RefusesPromptsPastTheContextAndEmptyOnes) {
  LlmOptions o;
  o.max_context = 16;
  o.max_batch = 2;
  LanguageModel m(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), o);
  SamplingParams p;
  p.max_tokens = 8;
  EXPECT_THROW(m.generate({prompt(9, 1)}, p), std::invalid_argument);  // 9 + 8 > 16
  EXPECT_THROW(m.generate({{}}, p), std::invalid_argument);
  EXPECT_THROW(m.generate({prompt(3, 1), prompt(3, 2), prompt(3, 3)}, p), std::invalid_argument);
  p.max_tokens = 0;
  EXPECT_THROW(m.generate({prompt(3, 1)}, p), std::invalid_argument);
  p.max_tokens = 8;
  const auto done = m.generate({prompt(8, 1)}, p);  // 8 + 8 = 16 fits
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].tokens.empty());
}

TEST(LanguageModel, TheSameSeedGivesTheSameTokensAndGreedyEqualsTheArgmaxOfTheLogits) {
  LlmOptions o;
  o.max_context = 40;
  LanguageModel m(tiny_model("qwen3-30b-a3b"), probe_hardware(), testing::test_runtime(2), o);
  SamplingParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.seed = 42;
  const auto first = m.generate({prompt(10, 4)}, p), second = m.generate({prompt(10, 4)}, p);
  EXPECT_EQ(first[0].tokens, second[0].tokens);
  p.seed = 43;
  const auto third = m.generate({prompt(10, 4)}, p);
  EXPECT_NE(first[0].tokens, third[0].tokens);  // 12 tokens of a 300-token vocabulary

  // Greedy: each new token is the argmax of the logits after the tokens before it.
  p.temperature = 0;
  const auto greedy = m.generate({prompt(10, 4)}, p);
  std::vector<std::int32_t> seq = prompt(10, 4);
  for (std::int32_t t : greedy[0].tokens) {
    const std::vector<float> l = m.prompt_logits(seq);
    const std::span<const float> last(l.data() + (seq.size() - 1) * 300, 300);
    EXPECT_EQ(t, llm::argmax(last));
    seq.push_back(t);
  }
}

// Continuous batching: sequences that join while others decode, with prompts split into
// chunks of 5 and mixed with decode rows, get the tokens and logprob bits they get alone.
TEST(ContinuousBatch, SequencesJoiningAndLeavingGetWhatTheyGetAlone) {
  LlmOptions o;
  o.request.batch_invariant = true;
  o.max_context = 64;
  o.max_batch = 3;
  o.prefill_chunk = 5;
  LanguageModel m(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(2), o);
  SamplingParams p;
  p.ignore_eos = true;
  p.temperature = 0.8f;
  p.seed = 9;
  struct Run {
    std::vector<std::int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<std::int32_t> top;
  };
  const std::vector<std::vector<std::int32_t>> prompts = {prompt(13, 1), prompt(4, 2), prompt(21, 3), prompt(7, 4)};
  const std::vector<int> lengths = {10, 6, 8, 5};
  auto run_alone = [&](std::size_t i) {
    ContinuousBatch b(m);
    SamplingParams q = p;
    q.max_tokens = lengths[i];
    b.add(prompts[i], q, 3);
    Run r;
    while (b.running() > 0)
      for (const StepEvent& e : b.step()) {
        r.tokens.push_back(e.token);
        r.logprobs.push_back(e.logprob);
        for (const auto& t : e.top) r.top.push_back(t.token);
      }
    return r;
  };
  std::vector<Run> alone;
  for (std::size_t i = 0; i < prompts.size(); ++i) alone.push_back(run_alone(i));

  ContinuousBatch b(m);
  std::map<std::uint64_t, std::size_t> which;
  std::vector<Run> together(prompts.size());
  std::size_t next = 0;
  int steps = 0;
  while (next < prompts.size() || b.running() > 0) {
    // One sequence joins every third step while there is a slot.
    if (next < prompts.size() && b.free_slots() > 0 && steps % 3 == 0) {
      SamplingParams q = p;
      q.max_tokens = lengths[next];
      which[b.add(prompts[next], q, 3)] = next;
      ++next;
    }
    for (const StepEvent& e : b.step()) {
      Run& r = together[which.at(e.id)];
      r.tokens.push_back(e.token);
      r.logprobs.push_back(e.logprob);
      for (const auto& t : e.top) r.top.push_back(t.token);
    }
    ++steps;
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "sequence " << i;
    ASSERT_EQ(together[i].logprobs.size(), alone[i].logprobs.size());
    EXPECT_EQ(std::memcmp(together[i].logprobs.data(), alone[i].logprobs.data(),
                          alone[i].logprobs.size() * sizeof(float)), 0) << "sequence " << i;
    EXPECT_EQ(together[i].top, alone[i].top);
    EXPECT_EQ(alone[i].tokens.size(), static_cast<std::size_t>(lengths[i]));
  }
}

TEST(ContinuousBatch, LogprobsAreTheLogSoftmaxAndACancelledSlotIsFreeAtOnce) {
  LlmOptions o;
  o.max_context = 32;
  o.max_batch = 2;
  LanguageModel m(tiny_model("gpt-oss-20b"), probe_hardware(), testing::test_runtime(1), o);
  SamplingParams p;
  p.max_tokens = 4;
  p.ignore_eos = true;
  const auto a = prompt(6, 5);
  // The reference: float64 log-softmax of the prompt's last logits.
  const std::vector<float> logits = m.prompt_logits(a);
  const std::span<const float> last(logits.data() + 5 * 300, 300);
  double mx = -1e300, sum = 0;
  for (float v : last) mx = std::max(mx, static_cast<double>(v));
  for (float v : last) sum += std::exp(static_cast<double>(v) - mx);
  std::vector<std::pair<double, std::int32_t>> ref;
  for (std::int32_t t = 0; t < 300; ++t)
    ref.push_back({static_cast<double>(last[static_cast<std::size_t>(t)]) - mx - std::log(sum), t});
  std::stable_sort(ref.begin(), ref.end(), [](const auto& x, const auto& y) { return x.first > y.first; });

  ContinuousBatch b(m);
  const std::uint64_t id = b.add(a, p, 5);
  const auto first = b.step();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, id);
  EXPECT_EQ(first[0].token, ref[0].second);  // greedy
  ASSERT_EQ(first[0].top.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(first[0].top[k].token, ref[k].second);
    EXPECT_NEAR(first[0].top[k].logprob, ref[k].first, 1e-5);
  }
  EXPECT_NEAR(first[0].logprob, ref[0].first, 1e-5);

  const std::uint64_t other = b.add(prompt(3, 6), p);
  EXPECT_EQ(b.free_slots(), 0);
  EXPECT_THROW(b.add(prompt(3, 7), p), std::length_error);
  EXPECT_TRUE(b.cancel(id));
  EXPECT_FALSE(b.cancel(id));
  EXPECT_EQ(b.free_slots(), 1);
  EXPECT_EQ(b.running(), 1u);
  const std::uint64_t third = b.add(prompt(3, 7), p);
  EXPECT_NE(third, other);
  // Refusals change nothing.
  EXPECT_THROW(b.add(prompt(30, 8), p), std::invalid_argument);  // 30 + 4 > 32
  EXPECT_THROW(b.add({}, p), std::invalid_argument);
  EXPECT_EQ(b.running(), 2u);
  std::size_t events = 0;
  while (b.running() > 0) events += b.step().size();
  EXPECT_EQ(events, 4u + 4u);
  EXPECT_TRUE(b.step().empty());
}

TEST(Sampler, TopKOneIsGreedyAndMinPOneKeepsOnlyTheBest) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.9f, -1.0f};
  llm::Sampler k1({.temperature = 1.0f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f, .seed = 7});
  llm::Sampler p1({.temperature = 5.0f, .top_k = 0, .top_p = 1.0f, .min_p = 1.0f, .seed = 7});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.next(logits), 1);
    EXPECT_EQ(p1.next(logits), 1);
  }
  // At a high temperature every token is drawn; the draws follow the seed.
  const llm::SamplerSettings hot{.temperature = 100.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 1};
  llm::Sampler a(hot), b(hot);
  std::set<std::int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const std::int32_t x = a.next(logits);
    EXPECT_EQ(x, b.next(logits));
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Sampler, ArgmaxTakesTheFirstOfEqualsAndSkipsNaN) {
  EXPECT_EQ(llm::argmax(std::vector<float>{1.0f, 3.0f, 3.0f}), 1);
  EXPECT_EQ(llm::argmax(std::vector<float>{std::nanf(""), -5.0f, -4.0f}), 2);
}

}  // namespace
}  // namespace mxmoe
