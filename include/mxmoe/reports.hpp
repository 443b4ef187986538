// The oracle's text reports for people: a selection as a table, an expert-parallel group's
// gathered reasons, and the hardware report that lists the candidates. (The JSON forms:
// mxmoe/selection.hpp; the NoBackendError message: mxmoe/no_backend_error.hpp.)
#pragma once

#include <span>
#include <string>

#include "mxmoe/export.h"
#include "mxmoe/hardware.hpp"
#include "mxmoe/selection.hpp"

namespace mxmoe {

// The gathered reasons of an expert-parallel group (agree(), mxmoe/judge.hpp), one line per
// (rank, rejected candidate, reason): "rank 2: amx_bf16 rejected: unsupported_isa: ..."
// ("every rank: ..." when all give it).
MXMOE_API std::string format_rank_reasons(std::span<const Selection> ranks);

// A human table of the selection: one line per candidate with verdict and reasons.
MXMOE_API std::string format_selection_table(const Selection& s);

// `mxmoe info --hardware` as text: CPU, caches, usable and absent instruction sets, OS
// refusals, the cap, CUDA devices, where the description came from, the registered backends.
MXMOE_API std::string format_hardware_report(const Hardware& h);

}  // namespace mxmoe
