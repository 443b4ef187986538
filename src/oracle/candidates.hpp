// The oracle's forms that are handed their candidates: tests and tools judge their own (stub
// backends, one backend at a time). mxmoe/judge.hpp and mxmoe/reports.hpp give a host the
// same calls over the registered backends, which is what these are called with there.
#pragma once

#include <span>
#include <string>

#include "contract/backend.hpp"
#include "mxmoe/hardware.hpp"
#include "mxmoe/judge.hpp"
#include "mxmoe/reports.hpp"

namespace mxmoe {

// judge() over CANDIDATES: every one judged, chosen == "" when none fits.
Selection judge(const Deployment& d, const Preferences& prefs,
                std::span<const Backend* const> candidates);
// select() over CANDIDATES: throws NoBackendError when none fits.
Selection select(const Deployment& d, const Preferences& prefs,
                 std::span<const Backend* const> candidates);
// The hardware report listing CANDIDATES.
std::string format_hardware_report(const Hardware& h, std::span<const Backend* const> candidates);

}  // namespace mxmoe
