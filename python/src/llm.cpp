// mxmoe._mxmoe._LLM: a whole model (include/mxmoe/llm.hpp) for the package's mxmoe.LLM.
// Compute runs with the GIL released; a token callback takes it back for its call only.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/pair.h>

#include "bindings.hpp"
#include "edge.hpp"
#include "mxmoe/llm.hpp"

namespace mxmoe::python {
namespace {

struct PyLLM {
  std::shared_ptr<Runtime> runtime;
  std::unique_ptr<LanguageModel> model;

  PyLLM(const std::string& path, const std::optional<std::string>& activation, bool batch_invariant,
        int threads, const std::optional<std::string>& backend,
        const std::vector<std::string>& exclude, int max_context, int max_batch, int prefill_chunk,
        const std::string& compact, const nb::object& progress) {
    const Request request = make_request(activation, batch_invariant, threads, backend, exclude, 1);
    runtime = shared_runtime(request.threads);
    LlmOptions options;
    options.request = request;
    options.max_context = max_context;
    options.max_batch = max_batch;
    options.prefill_chunk = prefill_chunk;
    options.compact = parse_compact_format(compact);
    if (!progress.is_none())
      options.progress = [progress](const std::string& line) {
        nb::gil_scoped_acquire gil;
        progress(line);
      };
    const Hardware hw = probe();
    nb::gil_scoped_release release;
    model = std::make_unique<LanguageModel>(path, hw, *runtime, std::move(options));
  }

  // [(tokens, finish_reason)] per prompt.
  std::vector<std::pair<std::vector<std::int32_t>, std::string>> generate(
      const std::vector<std::vector<std::int32_t>>& prompts, int max_tokens, float temperature,
      int top_k, float top_p, float min_p, std::uint64_t seed, bool ignore_eos,
      const std::vector<std::int32_t>& stop_ids, const nb::object& on_token) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    p.ignore_eos = ignore_eos;
    p.stop_ids = stop_ids;
    LanguageModel::TokenCallback callback;
    std::optional<nb::python_error> raised;  // a callback's exception, re-raised after the call
    if (!on_token.is_none())
      callback = [&on_token, &raised](std::size_t sequence, std::int32_t token) {
        nb::gil_scoped_acquire gil;
        try {
          return nb::cast<bool>(on_token(sequence, token));
        } catch (nb::python_error& e) {
          raised.emplace(std::move(e));
          return false;
        }
      };
    std::vector<Completion> done;
    {
      nb::gil_scoped_release release;
      done = model->generate(prompts, p, callback, [&raised] { return raised.has_value(); });
    }
    if (raised) throw std::move(*raised);
    std::vector<std::pair<std::vector<std::int32_t>, std::string>> out;
    for (Completion& c : done) out.emplace_back(std::move(c.tokens), std::move(c.finish_reason));
    return out;
  }

  nb::object prompt_logits(const std::vector<std::int32_t>& prompt) {
    auto values = std::make_unique<std::vector<float>>();
    {
      nb::gil_scoped_release release;
      *values = model->prompt_logits(prompt);
    }
    const std::size_t shape[2] = {prompt.size(), static_cast<std::size_t>(model->vocab_size())};
    float* data = values->data();
    nb::capsule owner(values.release(),
                      [](void* v) noexcept { delete static_cast<std::vector<float>*>(v); });
    return nb::ndarray<nb::numpy, float>(data, 2, shape, owner).cast();
  }
};

}  // namespace

void bind_llm(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<PyLLM>(m, "_LLM")
      .def(nb::init<const std::string&, const std::optional<std::string>&, bool, int,
                    const std::optional<std::string>&, const std::vector<std::string>&, int, int,
                    int, const std::string&, const nb::object&>(),
           "path"_a, "activation"_a.none(), "batch_invariant"_a, "threads"_a, "backend"_a.none(),
           "exclude"_a, "max_context"_a, "max_batch"_a, "prefill_chunk"_a, "compact"_a, "progress"_a.none())
      .def("generate", &PyLLM::generate, "prompts"_a, "max_tokens"_a, "temperature"_a, "top_k"_a,
           "top_p"_a, "min_p"_a, "seed"_a, "ignore_eos"_a, "stop_ids"_a, "on_token"_a.none())
      .def("prompt_logits", &PyLLM::prompt_logits, "prompt"_a)
      .def_prop_ro("family", [](const PyLLM& l) { return l.model->family(); })
      .def_prop_ro("vocab_size", [](const PyLLM& l) { return l.model->vocab_size(); })
      .def_prop_ro("max_context", [](const PyLLM& l) { return l.model->max_context(); })
      .def_prop_ro("max_batch", [](const PyLLM& l) { return l.model->max_batch(); })
      .def_prop_ro("eos_ids", [](const PyLLM& l) { return l.model->eos_ids(); })
      .def_prop_ro("bos_id", [](const PyLLM& l) { return l.model->bos_id(); })
      .def("describe", [](const PyLLM& l) { return l.model->describe(); })
      .def_prop_ro("bytes_per_token", [](const PyLLM& l) { return l.model->bytes_per_token(); })
      .def_prop_ro("kv_cache_bytes", [](const PyLLM& l) { return l.model->kv_cache_bytes(); });
}

}  // namespace mxmoe::python
