// Model families' wishes, as data for the one select(). Orderings only break ties between
// equal cost estimates; a family without one of its own takes the registry's order
// (backends.inc), and names not registered in this build are ignored by judge().
#include "mxmoe/judge.hpp"

namespace mxmoe {

Preferences preferences_for(Family family) {
  Preferences p;
  p.source = std::string(to_string(family)) + " family";
  // bf16 activations keep every family within its accuracy budget on every backend that
  // implements them; int8/mxfp8 stay opt-in (--activation) until per-family accuracy data
  // says otherwise. Same for the ordering: one ladder until measurements differ per family.
  p.default_activation = ActivationFormat::bf16;
  // The tie-break is the registry's order (src/backends/backends.inc, best-known-first), so
  // no second list of backend names is kept here: a family's own order goes in p.order when
  // measurements say it should differ.
  static_cast<void>(family);
  return p;
}

}  // namespace mxmoe
