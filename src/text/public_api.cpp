// The text room's public edge (include/mxmoe/tokenizer.hpp): Tokenizer and TextStream over
// text::Tokenizer and text::StreamDecoder, render_chat over the chat formats. The one place
// that knows a model emits ids that are no token (its vocabulary padding) and skips them.
#include "mxmoe/tokenizer.hpp"

#include <utility>

#include "text/chat.hpp"
#include "text/tokenizer.hpp"

namespace mxmoe {

struct Tokenizer::Impl {
  text::Tokenizer tokenizer;
};

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::load(const std::string& path_or_dir) {
  return Tokenizer(std::make_shared<const Impl>(
      Impl{text::Tokenizer::from_file(text::tokenizer_file(path_or_dir))}));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  return impl_->tokenizer.encode(text, parse_special);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  const text::Tokenizer& t = impl_->tokenizer;
  std::size_t known = 0;
  for (const std::int32_t id : ids) known += t.contains(id) ? 1U : 0U;
  if (known == ids.size()) return t.decode(ids, skip_special);
  std::vector<std::int32_t> tokens;
  tokens.reserve(known);
  for (const std::int32_t id : ids)
    if (t.contains(id)) tokens.push_back(id);
  return t.decode(tokens, skip_special);
}

bool Tokenizer::contains(std::int32_t id) const { return impl_->tokenizer.contains(id); }

std::int32_t Tokenizer::vocab_size() const { return impl_->tokenizer.vocab_size(); }

struct TextStream::Impl {
  std::shared_ptr<const Tokenizer::Impl> tokenizer;  // outlives the decoder below
  text::StreamDecoder decoder;

  Impl(std::shared_ptr<const Tokenizer::Impl> t, bool skip_special)
      : tokenizer(std::move(t)), decoder(tokenizer->tokenizer, skip_special) {}
};

TextStream::TextStream(const Tokenizer& tokenizer, bool skip_special)
    : impl_(std::make_unique<Impl>(tokenizer.impl_, skip_special)) {}
TextStream::~TextStream() = default;
TextStream::TextStream(TextStream&&) noexcept = default;
TextStream& TextStream::operator=(TextStream&&) noexcept = default;

std::string TextStream::push(std::int32_t id) {
  return impl_->tokenizer->tokenizer.contains(id) ? impl_->decoder.push(id) : std::string();
}

std::string TextStream::finish() { return impl_->decoder.finish(); }

std::string render_chat(std::string_view model_type, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, bool enable_thinking) {
  return text::render_chat(text::chat_format_for(model_type), messages,
                           {.add_generation_prompt = add_generation_prompt,
                            .enable_thinking = enable_thinking});
}

}  // namespace mxmoe
