// The oracle's whole public API in one include, for hosts. Each subject has its own header:
// reason codes (reason_codes.hpp), the registered backends' names (registry.hpp), a
// candidate's verdict (verdict.hpp), selections with their JSON (selection.hpp), judge /
// select / agree (judge.hpp), the error when nothing fits (no_backend_error.hpp) and the text
// reports (reports.hpp). The backends themselves are the library's own.
#pragma once

#include "mxmoe/deployment.hpp"
#include "mxmoe/judge.hpp"
#include "mxmoe/no_backend_error.hpp"
#include "mxmoe/reason_codes.hpp"
#include "mxmoe/registry.hpp"
#include "mxmoe/reports.hpp"
#include "mxmoe/selection.hpp"
#include "mxmoe/verdict.hpp"
