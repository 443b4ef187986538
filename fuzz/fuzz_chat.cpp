// libFuzzer: chat messages as `mxmoe serve` and `mxmoe chat` take them from users, rendered in
// each family's format. Byte 0 picks the format and the options; the rest is role, content,
// role, content, ... separated by 0 bytes. Every conversation must render or raise
// std::invalid_argument (a role the format has no place for, turns that do not alternate);
// a rendered conversation holds every content whole.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "text/chat.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using mxmoe::text::ChatFormat;
  constexpr ChatFormat kFormats[] = {ChatFormat::harmony, ChatFormat::chatml,
                                     ChatFormat::mistral_inst};
  const ChatFormat format = kFormats[data[0] % 3];
  const mxmoe::text::ChatOptions options{.add_generation_prompt = (data[0] & 4) != 0,
                                         .enable_thinking = (data[0] & 8) != 0};
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> fields;
  for (std::size_t at = 0;;) {
    const std::size_t end = rest.find('\0', at);
    fields.push_back(rest.substr(at, end == std::string_view::npos ? end : end - at));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  std::vector<mxmoe::text::ChatMessage> messages;
  for (std::size_t i = 0; i + 1 < fields.size(); i += 2)
    messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  std::string rendered;
  try {
    rendered = mxmoe::text::render_chat(format, messages, options);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  for (const auto& m : messages)
    if (rendered.find(m.content) == std::string::npos) std::abort();
  return 0;
}
