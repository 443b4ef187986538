// The fuzz seed corpora (fuzz/corpus/<target>, written by fuzz/make_corpus.py) are what they
// claim: every valid_* seed is accepted by its parser and every other seed is refused with
// the parser's documented exception, so each seed starts the fuzzer on a known path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <sstream>

#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "model/model_config.hpp"
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/oracle.hpp"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Parses TEXT; true when accepted, false when refused with the documented exception (any
// other exception escapes and fails the test).
using Parser = std::function<bool(const std::string&)>;

template <class Error, class F>
Parser refusing(F parse) {
  return [parse](const std::string& text) {
    try {
      parse(text);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
}

std::span<const std::uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

TEST(FuzzCorpus, ValidSeedsParseAndTheOthersAreRefused) {
  const std::map<std::string, Parser> parsers = {
      {"config",
       refusing<LoadError>([](const std::string& t) { (void)parse_model_config(t, "seed", "m"); })},
      {"npy", refusing<LoadError>([](const std::string& t) {
         (void)parse_npy(bytes(t), "seed", /*allow_bf16_as_u16=*/true);
       })},
      {"hardware",
       refusing<std::invalid_argument>([](const std::string& t) { (void)hardware_from_json(t); })},
      {"deployment", refusing<std::invalid_argument>([](const std::string& t) {
         const auto one_of = [&](auto parse) {
           try {
             parse(t);
             return true;
           } catch (const std::invalid_argument&) {
             return false;
           }
         };
         // A deployment that parses must also be judged (an unknown backend name refuses).
         if (one_of([](const std::string& x) {
               const Deployment d = deployment_from_json(x);
               (void)judge(d, preferences_for(d.layer.family));
             }))
           return;
         if (!one_of([](const std::string& x) { (void)selection_from_json(x); }) &&
             !one_of([](const std::string& x) { (void)request_from_json(x); }) &&
             !one_of([](const std::string& x) { (void)layer_spec_from_json(x); }))
           throw std::invalid_argument("no parser accepts it");
       })},
      {"index",
       refusing<LoadError>([](const std::string& t) { (void)parse_safetensors_index(t, "seed"); })},
      {"safetensors", refusing<LoadError>(
                          [](const std::string& t) { (void)parse_safetensors(bytes(t), "seed"); })},
  };
  const fs::path corpus = fs::path(MXMOE_SOURCE_DIR) / "fuzz" / "corpus";
  for (const auto& [target, parse] : parsers) {
    int valid = 0, refused = 0;
    for (const auto& e : fs::directory_iterator(corpus / target)) {
      const std::string name = e.path().filename().string();
      SCOPED_TRACE(target + "/" + name);
      const bool want = name.rfind("valid", 0) == 0;
      EXPECT_EQ(parse(slurp(e.path())), want);
      (want ? valid : refused) += 1;
    }
    EXPECT_GE(valid, 1) << target;
    EXPECT_GE(refused, 5) << target;
    EXPECT_TRUE(fs::exists(fs::path(MXMOE_SOURCE_DIR) / "fuzz" / "dict" / (target + ".dict")))
        << target;
  }
}

}  // namespace
}  // namespace mxmoe
