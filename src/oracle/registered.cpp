// The host's forms of judge(), select() and the hardware report (mxmoe/judge.hpp,
// mxmoe/reports.hpp): the same calls over the registered backends. The one file of the oracle
// that names the registry; everything else in it is handed its candidates
// (oracle/candidates.hpp).
#include "backends/registry.hpp"
#include "mxmoe/judge.hpp"
#include "mxmoe/reports.hpp"
#include "oracle/candidates.hpp"

namespace mxmoe {

Selection judge(const Deployment& d, const Preferences& prefs) {
  return judge(d, prefs, registered_backends());
}

Selection select(const Deployment& d, const Preferences& prefs) {
  return select(d, prefs, registered_backends());
}

std::string format_hardware_report(const Hardware& h) {
  return format_hardware_report(h, registered_backends());
}

}  // namespace mxmoe
