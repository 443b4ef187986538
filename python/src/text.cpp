// mxmoe._mxmoe._Tokenizer, _TextStream and _render_chat: the public text API
// (include/mxmoe/tokenizer.hpp) for the package's mxmoe.Tokenizer and LLM's text. Encoding and
// decoding run with the GIL released (a long prompt is real work); the arguments are copied
// into C++ values first.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/stl/pair.h>

#include "bindings.hpp"
#include "mxmoe/tokenizer.hpp"

namespace mxmoe::python {
namespace {

struct PyTokenizer {
  Tokenizer tokenizer;

  explicit PyTokenizer(const std::string& path) : tokenizer(load(path)) {}

  static Tokenizer load(const std::string& path) {
    nb::gil_scoped_release release;
    return Tokenizer::load(path);
  }

  std::vector<std::int32_t> encode(const std::string& text, bool parse_special) const {
    nb::gil_scoped_release release;
    return tokenizer.encode(text, parse_special);
  }

  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special) const {
    nb::gil_scoped_release release;
    return tokenizer.decode(ids, skip_special);
  }
};

}  // namespace

void bind_text(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<PyTokenizer>(m, "_Tokenizer")
      .def(nb::init<const std::string&>(), "path"_a)
      .def("encode", &PyTokenizer::encode, "text"_a, "parse_special"_a)
      .def("decode", &PyTokenizer::decode, "ids"_a, "skip_special"_a)
      .def("contains", [](const PyTokenizer& t, std::int32_t id) { return t.tokenizer.contains(id); },
           "id"_a)
      .def_prop_ro("vocab_size", [](const PyTokenizer& t) { return t.tokenizer.vocab_size(); });
  nb::class_<TextStream>(m, "_TextStream")
      .def("__init__",
           [](TextStream* self, const PyTokenizer& t, bool skip_special) {
             new (self) TextStream(t.tokenizer, skip_special);
           },
           "tokenizer"_a, "skip_special"_a)
      .def("push", &TextStream::push, "id"_a)
      .def("finish", &TextStream::finish);
  m.def(
      "_render_chat",
      [](const std::string& model_type, const std::vector<std::pair<std::string, std::string>>& messages,
         bool add_generation_prompt, bool enable_thinking) {
        std::vector<ChatMessage> list;
        list.reserve(messages.size());
        for (const auto& [role, content] : messages) list.push_back({role, content});
        return render_chat(model_type, list, add_generation_prompt, enable_thinking);
      },
      "model_type"_a, "messages"_a, "add_generation_prompt"_a, "enable_thinking"_a);
}

}  // namespace mxmoe::python
