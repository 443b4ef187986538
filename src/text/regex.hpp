// The tokenizer's regular expressions: PCRE2 (8-bit, UTF + UCP so \s, \w, \p{L} are Unicode's;
// JIT-compiled where the platform allows), for the Hugging Face patterns with look-ahead
// (\s+(?!\S)), possessive quantifiers ([^\r\n\p{L}\p{N}]?+) and Unicode classes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mxmoe::text {

class Regex {
 public:
  // Throws std::invalid_argument naming PATTERN and PCRE2's reason when it does not compile.
  explicit Regex(const std::string& pattern);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // The non-empty matches in TEXT (valid UTF-8), left to right, as [begin, end) offsets.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string pattern_;
};

// PATTERN (a literal string) escaped for a Regex.
std::string regex_escape(std::string_view literal);

}  // namespace mxmoe::text
