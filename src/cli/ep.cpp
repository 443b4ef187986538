#include "cli/ep.hpp"

#include <fmt/core.h>

#include <cstdlib>

#include "cli/common.hpp"
#if MXMOE_WITH_MPI
#include "mxmoe/mpi.hpp"
#endif

namespace mxmoe::cli {
namespace {

// The launcher's variables (not MXMOE_* settings, which config.hpp parses).
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (!env(name).empty()) return true;
  return false;
}

#if MXMOE_WITH_MPI
struct MpiScope::Session {
  Session(int* argc, char*** argv) : session(argc, argv) {}
  mpi::Session session;
};
#else
struct MpiScope::Session {};
#endif

MpiScope::MpiScope(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
#if MXMOE_WITH_MPI
  session_ = std::make_unique<Session>(argc, argv);
  active_ = true;
  const auto world = mpi::world();
  rank_ = world->rank();
  size_ = world->size();
#else
  (void)argc;
  (void)argv;
  const std::string size =
      env("OMPI_COMM_WORLD_SIZE").empty() ? env("PMI_SIZE") : env("OMPI_COMM_WORLD_SIZE");
  if (!size.empty() && size != "1")
    throw UsageError(
        "mpirun started " + size +
        " copies of an mxmoe built without MPI: install libopenmpi-dev (scripts/deps.sh) and "
        "rebuild, or run one process");
#endif
}

MpiScope::~MpiScope() = default;

void MpiScope::abort(int code) const noexcept {
#if MXMOE_WITH_MPI
  if (active_) mpi::Session::abort(code);
#endif
  std::_Exit(code);
}

void EpOptions::add(CLI::App& app) {
  app.add_option("--ep-deadline", deadline_s,
                 fmt::format("Under mpirun: seconds a rank waits for the others before it ends "
                             "the run naming the silent rank, in [{}, {}] (env "
                             "MXMOE_EP_DEADLINE; default 30)",
                             kMinEpDeadlineSeconds, kMaxEpDeadlineSeconds))
      ->check([](const std::string& v) {  // the variable's parser: NaN and "1e-9" refused too
        try {
          (void)parse_deadline_seconds("--ep-deadline", v);
          return std::string();
        } catch (const ConfigError& e) {
          return std::string(e.what());
        }
      });
}

CommOptions EpOptions::resolve(CLI::App& app) const {
  CommOptions o;
  o.deadline_s = app.count("--ep-deadline") > 0 ? deadline_s : environment().ep_deadline_s;
  return o;
}

std::unique_ptr<Communicator> ep_world(const CommOptions& options) {
  if (!launched_by_mpi()) return nullptr;
#if MXMOE_WITH_MPI
  return mpi::world(options);
#else
  (void)options;
  return nullptr;
#endif
}

std::int64_t from_rank0(Communicator& comm, std::int64_t value) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  allgather(comm, &value, sizeof value, all.data());
  return all.at(0);
}

double from_rank0(Communicator& comm, double value) {
  const std::vector<double> all = gather(comm, value);
  return all.at(0);
}

std::vector<double> gather(Communicator& comm, double value) {
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  allgather(comm, &value, sizeof value, all.data());
  return all;
}

std::vector<ExpertParallelTimes> gather(Communicator& comm, const ExpertParallelTimes& times) {
  std::vector<ExpertParallelTimes> all(static_cast<std::size_t>(comm.size()));
  allgather(comm, &times, sizeof times, all.data());
  return all;
}

int ranks_on_this_node(Communicator& comm) {
#if MXMOE_WITH_MPI
  return mpi::ranks_on_this_node(comm);
#else
  return comm.size();
#endif
}

int threads_per_rank(Communicator& comm, int logical_cpus) {
  return std::max(1, logical_cpus / std::max(1, ranks_on_this_node(comm)));
}

LayerSpec open_layer(const LayerOptions& layer, std::optional<Checkpoint>& checkpoint) {
  if (!layer.from_model()) return layer.spec();
  checkpoint.emplace(Checkpoint::open(layer.model));
  return checkpoint->layer_spec(layer.layer);
}

}  // namespace mxmoe::cli
