#include "cli/ep.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string_view>
#include <utility>

#include "base/json.hpp"
#include "cli/common.hpp"
#include "cli/watchdog.hpp"
#include "runtime/setting_parsers.hpp"
#if MXMOE_WITH_MPI
#include "dist/mpi/mpi.hpp"
#endif

namespace mxmoe::cli {
namespace {

// The launcher's variables (not MXMOE_* settings, which environment.hpp parses).
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

namespace {

// The launcher's number for this process and the job's, before MPI_Init (-1 when unknown).
int env_int(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const std::string v = env(name);
    if (v.empty()) continue;
    int value = -1;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec == std::errc() && end == v.data() + v.size() && value >= 0) return value;
  }
  return -1;
}

// Where the ranks of this job on this node leave a mark as they reach MPI_Init: the PMIx
// server's directory of the job (Open MPI 4 and 5 set PMIX_SERVER_TMPDIR for each rank; the
// launcher removes it when the job ends). Empty when the launcher gives none.
std::string arrival_dir() {
  std::string dir = env("PMIX_SERVER_TMPDIR");
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return {};
  return dir;
}

std::string arrival_mark(const std::string& dir, int rank) {
  return fmt::format("{}/mxmoe-ep-rank-{}", dir, rank);
}

// What the watchdog of MPI_Init says: which ranks did not reach it, when this node can tell
// (every rank runs here and left its mark, or did not), else that it cannot.
std::string init_timeout_line(int rank, int size, double deadline_s) {
  const std::string who = rank >= 0 ? fmt::format("rank {}: ", rank) : "";
  const std::string limit = fmt::format("within {:.1f} s (--ep-deadline)", deadline_s);
  const std::string ending = "; this rank ends (exit 1) and mpirun ends the job\n";
  const std::string dir = arrival_dir();
  const int local = env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  if (!dir.empty() && size > 0 && local == size) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      std::error_code ec;
      if (!std::filesystem::exists(arrival_mark(dir, r), ec)) missing.push_back(r);
    }
    if (!missing.empty()) {
      std::string names;
      for (std::size_t i = 0; i < missing.size() && i < 16; ++i)
        names += fmt::format("{}{}", i == 0 ? "" : ", ", missing[i]);
      if (missing.size() > 16) names += fmt::format(" and {} more", missing.size() - 16);
      return fmt::format(
          "mxmoe: {}error: {} {} of the {} that mpirun started did not reach MPI_Init {}: it "
          "failed to start, is still starting, or runs another program{}",
          who, missing.size() == 1 ? "rank" : "ranks", names, size, limit, ending);
    }
    return fmt::format(
        "mxmoe: {}error: MPI_Init did not complete {} although all {} ranks "
        "reached it (MPI's own start-up is stuck){}",
        who, limit, size, ending);
  }
  return fmt::format(
      "mxmoe: {}error: MPI_Init did not complete {}: a rank of the {} that mpirun started did "
      "not reach it (failed to start, still starting, or another program); ranks on other "
      "nodes cannot be named from here{}",
      who, limit, size > 0 ? std::to_string(size) : std::string("ranks"), ending);
}

}  // namespace
#else
struct MpiScope::Session {};
#endif

MpiScope::MpiScope(int* argc, char*** argv, double deadline_s) : deadline_s_(deadline_s) {
  if (!launched_by_mpi()) return;
#if MXMOE_WITH_MPI
  // MPI_Init returns once every rank of the job has called it: a rank that never starts would
  // hold this one there for ever. Leave a mark that this rank arrived, then wait at most the
  // deadline.
  const int rank = env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"});
  const int size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  if (const std::string dir = arrival_dir(); !dir.empty() && rank >= 0)
    std::ofstream(arrival_mark(dir, rank)).put('\n');
  {
    Watchdog watchdog(
        deadline_s, [=] { return init_timeout_line(rank, size, deadline_s); }, kExitError);
    session_ = std::make_unique<Session>(argc, argv);
  }
  active_ = true;
  const auto world = mpi::world({deadline_s});
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

// MPI_Finalize waits for every rank too (Open MPI's ends with a barrier): a rank stopped
// after the command's last collective would hold this one there for ever.
MpiScope::~MpiScope() {
  if (session_ == nullptr) return;
  std::fflush(nullptr);  // the report is out even if the watchdog below ends the process
  const int rank = rank_, size = size_;
  const double deadline_s = deadline_s_;
  const Watchdog watchdog(
      deadline_s,
      [=] {
        return fmt::format(
            "mxmoe: rank {}: error: MPI_Finalize did not complete within {:.1f} s "
            "(--ep-deadline): a rank of the {} did not finish; this rank "
            "ends (exit 1)\n",
            rank, deadline_s, size);
      },
      kExitError);
  session_.reset();
}

void MpiScope::abort(int code) const noexcept {
#if MXMOE_WITH_MPI
  if (active_) mpi::Session::abort(code);
#endif
  std::_Exit(code);
}

double ep_deadline_of(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    const CLI::Option* opt = sub->get_option_no_throw("--ep-deadline");
    if (opt != nullptr && opt->count() > 0) return opt->as<double>();
  }
  return environment().ep_deadline_s;
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

std::unique_ptr<Communicator> ep_world(const CommOptions& options, const CLI::App& sub) {
  if (!launched_by_mpi()) return nullptr;
#if MXMOE_WITH_MPI
  auto world = mpi::world(options);
  require_same_flags(*world, sub);
  return world;
#else
  (void)options;
  (void)sub;
  return nullptr;
#endif
}

namespace {

// Flags each rank may be given its own way: where it reads its machine from (`--hardware`
// replays another machine, as docs/DISTRIBUTED.md describes), its thread count (hosts differ),
// and paths whose contents are checked on their own (`--model`: the ranks' weights are compared
// by digest; `--input`, `--token-ids` and `--output` are read or written by rank 0 only).
constexpr std::string_view kPerRankFlags[] = {"--hardware", "--threads",   "--model",
                                              "--input",    "--token-ids", "--output"};

using Flags = std::vector<std::pair<std::string, std::string>>;

// SUB's name and the flags given to it (but the per-rank ones), in the order SUB declares
// them (the same on every rank); a flag's values joined by spaces.
Flags given_flags(const CLI::App& sub) {
  Flags flags = {{"subcommand", sub.get_name()}};
  for (const CLI::Option* opt : sub.get_options()) {
    if (opt->count() == 0) continue;
    const std::string name = opt->get_name();
    if (std::find(std::begin(kPerRankFlags), std::end(kPerRankFlags), name) !=
        std::end(kPerRankFlags))
      continue;
    std::string values;
    for (const std::string& v : opt->results()) values += (values.empty() ? "" : " ") + v;
    flags.emplace_back(name, values);
  }
  return flags;
}

// As JSON, so a value holding any character (an inline placement, a line break) travels whole.
std::string flags_text(const Flags& flags) {
  json::Json j = json::Json::array();
  for (const auto& [name, values] : flags) j.push_back(json::Json::array({name, values}));
  return j.dump();
}

Flags parse_flags_text(const std::string& text, std::size_t rank) {
  const json::Json j = json::parse_strict(text, fmt::format("rank {}'s flags", rank));
  Flags flags;
  for (const json::Json& pair : j)
    flags.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
  return flags;
}

// "'3'" or "not given".
std::string flag_value(const Flags& flags, const std::string& name) {
  for (const auto& [n, v] : flags)
    if (n == name) return v.empty() ? "given" : fmt::format("'{}'", v);
  return "not given";
}

}  // namespace

void require_same_flags(Communicator& comm, const CLI::App& sub) {
  const std::vector<std::string> all = allgather_strings(comm, flags_text(given_flags(sub)));
  const Flags first = parse_flags_text(all.at(0), 0);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const Flags theirs = parse_flags_text(all[r], r);
    // The first flag (in rank 0's order, then the rank's own) whose values differ.
    std::string name;
    for (const Flags* list : {&first, &theirs})
      for (const auto& [n, v] : *list)
        if (name.empty() && flag_value(first, n) != flag_value(theirs, n)) name = n;
    const std::string what = name == "subcommand" ? "the command" : name;
    throw UsageError(fmt::format(
        "under mpirun every rank takes the flags rank 0 was given (but --hardware, --threads and "
        "the paths of --model, --input, --token-ids, --output): {} is {} on rank 0 and {} on "
        "rank {}",
        what, flag_value(first, name), flag_value(theirs, name), r));
  }
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
