// Regex over PCRE2 (see regex.hpp). Match data is made per call, so one Regex serves any
// number of threads.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include <fmt/core.h>
#include <pcre2.h>

#include <stdexcept>

#include "text/utf8.hpp"

namespace mxmoe::text {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return fmt::format("error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer));
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!data) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

}  // namespace

Regex::Regex(const std::string& pattern) : compiled_(std::make_unique<Compiled>()), pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!compiled_->code)
    throw std::invalid_argument(fmt::format("regex \"{}\": {} at offset {}", pattern,
                                            pcre2_message(error), offset));
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  MatchData match(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    // The text was validated once (the tokenizer's input); PCRE2 need not check it again.
    const int rc = compiled_->jit
                       ? pcre2_jit_match(compiled_->code, subject, text.size(), start,
                                         PCRE2_NO_UTF_CHECK, match.data, nullptr)
                       : pcre2_match(compiled_->code, subject, text.size(), start,
                                     PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw std::runtime_error(fmt::format("regex \"{}\": {}", pattern_, pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: step over one character
      if (begin >= text.size()) break;
      start = begin + std::max<std::size_t>(1, utf8::valid_char_length(text, begin));
    }
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out = "\\Q";
  for (std::size_t i = 0; i < literal.size(); ++i) {
    if (literal.substr(i, 2) == "\\E") {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += literal[i];
    }
  }
  return out + "\\E";
}

}  // namespace mxmoe::text
