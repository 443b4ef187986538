// The MPI Communicator (component mxmoe_mpi). An exchange posts one non-blocking send or
// receive per message (split into pieces of at most 1 GiB: MPI counts are int), on a
// duplicate of the host's communicator whose errors return, and polls them against the
// deadline. Point-to-point rather than MPI_Ialltoallv: a timed-out collective cannot say
// which rank it waits for, while each pending receive here names its peer; for the message
// sizes of a MoE call (docs/DISTRIBUTED.md) Open MPI's own alltoallv is this same pairwise
// exchange. Messages between one pair of ranks on one tag are matched in order (MPI's
// non-overtaking rule), which is the order Communicator::exchange promises.
#include <fmt/core.h>
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/mpi/mpi.hpp"

namespace mxmoe::mpi {
namespace {

constexpr int kTag = 0x6d78;                          // "mx"
constexpr std::size_t kPiece = std::size_t{1} << 30;  // bytes per MPI message

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

void require_initialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw std::logic_error("mxmoe::mpi: MPI is not initialised (create an mxmoe::mpi::Session)");
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm parent, CommOptions options) : options_(options) {
    require_initialized();
    if (!(options.deadline_s > 0))
      throw std::invalid_argument(
          fmt::format("mxmoe::mpi: the deadline must be > 0 s, got {}", options.deadline_s));
    duplicate_within_deadline(parent);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // More ranks on this node than cores: a waiting rank must give its core away.
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      MPI_Comm_size(node, &node_ranks_);
      MPI_Comm_free(&node);
    }
    oversubscribed_ = node_ranks_ > static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  }
  // MPI_Comm_dup is collective and blocks until every rank calls it: a rank that failed
  // before it, or was started with another command, would hang the others. The non-blocking
  // form is polled against the deadline instead.
  void duplicate_within_deadline(MPI_Comm parent) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (int rc = MPI_Comm_idup(parent, &comm_, &request); rc != MPI_SUCCESS)
      throw std::runtime_error("MPI_Comm_idup: " + error_text(rc));
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0;;) {
      if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
        throw std::runtime_error("MPI_Comm_idup: " + error_text(rc));
      if (done) return;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > options_.deadline_s) {
        broken_ = true;
        int rank = 0;
        MPI_Comm_rank(parent, &rank);
        throw CommError({}, fmt::format("rank {}: not every rank joined the expert-parallel group "
                                        "within {:.1f} s (a rank failed before it, or was "
                                        "started with another command)",
                                        rank, options_.deadline_s));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator may have operations in flight: leave it to MPI_Abort / exit.
    if (!finalized && !broken_) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  const CommOptions& options() const noexcept override { return options_; }
  MPI_Comm handle() const noexcept { return comm_; }

  void exchange(std::span<const SendBuffer> sends, std::span<const RecvBuffer> recvs) override {
    if (broken_)
      throw CommError({}, fmt::format("rank {}: the communicator failed earlier", rank_));
    for (const SendBuffer& s : sends) check_peer(s.peer);
    for (const RecvBuffer& r : recvs) check_peer(r.peer);
    ++round_;
    copy_to_self(sends, recvs);

    requests_.clear();
    pending_.clear();
    // Receives first, so that a peer's eager messages find them posted.
    for (const RecvBuffer& r : recvs)
      if (r.peer != rank_) post(r.peer, r.data, r.bytes, true);
    for (const SendBuffer& s : sends)
      if (s.peer != rank_) post(s.peer, const_cast<std::byte*>(s.data), s.bytes, false);
    wait_all();
  }

 private:
  struct Pending {
    int peer;
    std::size_t bytes;
    bool receive;
  };

  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_)
      throw std::invalid_argument(
          fmt::format("exchange: peer {} outside the group of {}", peer, size_));
  }

  // This rank's messages to itself, matched in order like any other pair's.
  void copy_to_self(std::span<const SendBuffer> sends, std::span<const RecvBuffer> recvs) {
    std::size_t next = 0;
    for (const RecvBuffer& r : recvs) {
      if (r.peer != rank_) continue;
      while (next < sends.size() && sends[next].peer != rank_) ++next;
      if (next == sends.size() || sends[next].bytes != r.bytes) {
        broken_ = true;
        throw CommError({rank_}, fmt::format("rank {}: its messages to itself do not match what "
                                             "it expects from itself",
                                             rank_));
      }
      if (r.bytes > 0) std::memcpy(r.data, sends[next].data, r.bytes);
      ++next;
    }
  }

  void post(int peer, std::byte* data, std::size_t bytes, bool receive) {
    std::size_t done = 0;
    do {  // a message of 0 bytes is still one message
      const std::size_t piece = std::min(kPiece, bytes - done);
      MPI_Request request = MPI_REQUEST_NULL;
      const int count = static_cast<int>(piece);
      const int rc = receive ? MPI_Irecv(data + done, count, MPI_BYTE, peer, kTag, comm_, &request)
                             : MPI_Isend(data + done, count, MPI_BYTE, peer, kTag, comm_, &request);
      if (rc != MPI_SUCCESS)
        fail({peer}, fmt::format("posting a message to or from rank {}: {}", peer, error_text(rc)));
      requests_.push_back(request);
      pending_.push_back({peer, piece, receive});
      done += piece;
    } while (done < bytes);
  }

  [[noreturn]] void fail(std::vector<int> peers, const std::string& what) {
    broken_ = true;
    throw CommError(std::move(peers), fmt::format("rank {}: exchange {}: {}", rank_, round_, what));
  }

  // Polls every request until done or the deadline. A large message moves in fragments, each
  // needing a progress call on both sides, so polling must not pause while data flows: it
  // spins (a small exchange between ready ranks takes microseconds). When this node has more
  // ranks than cores, it yields the core between polls after the first 50 us (sched_yield
  // hands it to a rank still computing; Open MPI's yield_when_idle does the same). After
  // 200 ms without any message completing (a peer computing a large batch, or a failed one)
  // it sleeps 200 us between polls. bench_mpi_exchange measures the exchange
  // (docs/DISTRIBUTED.md).
  void wait_all() {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.deadline_s));
    std::size_t left = requests_.size();
    auto last_progress = start;
    indices_.resize(requests_.size());
    statuses_.resize(requests_.size());
    while (left > 0) {
      int completed = 0;
      const int rc = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &completed,
                                  indices_.data(), statuses_.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
        fail(outstanding(), "MPI_Testsome: " + error_text(rc));
      if (completed == MPI_UNDEFINED) break;
      for (int i = 0; i < completed; ++i) {
        const auto at = static_cast<std::size_t>(indices_[static_cast<std::size_t>(i)]);
        const MPI_Status& st = statuses_[static_cast<std::size_t>(i)];
        last_progress = Clock::now();
        const Pending p = pending_[at];
        pending_[at].bytes = kDone;
        --left;
        if (rc == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_SUCCESS)
          fail({p.peer}, fmt::format("a message {} rank {} failed: {}", p.receive ? "from" : "to",
                                     p.peer, error_text(st.MPI_ERROR)));
        if (p.receive) {
          int count = 0;
          MPI_Get_count(&st, MPI_BYTE, &count);
          if (static_cast<std::size_t>(count) != p.bytes)
            fail({p.peer}, fmt::format("rank {} sent {} bytes where {} were expected", p.peer,
                                       count, p.bytes));
        }
      }
      if (left == 0) break;
      const auto now = Clock::now();
      if (now > deadline) {
        const std::vector<int> peers = outstanding();
        std::string names;
        for (int peer : peers) names += fmt::format("{}rank {}", names.empty() ? "" : ", ", peer);
        fail(peers, fmt::format("{} did not answer within {:.1f} s ({} of {} messages pending)",
                                names, options_.deadline_s, left, requests_.size()));
      }
      if (now - last_progress >= std::chrono::milliseconds(200))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      else if (oversubscribed_ && now - start >= std::chrono::microseconds(50))
        sched_yield();
    }
  }

  std::vector<int> outstanding() const {
    std::vector<int> peers;
    for (const Pending& p : pending_)
      if (p.bytes != kDone && std::find(peers.begin(), peers.end(), p.peer) == peers.end())
        peers.push_back(p.peer);
    std::sort(peers.begin(), peers.end());
    return peers;
  }

  static constexpr std::size_t kDone = ~std::size_t{0};
  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::uint64_t round_ = 0;
  bool broken_ = false;
  int node_ranks_ = 1;
  bool oversubscribed_ = false;
  std::vector<MPI_Request> requests_;
  std::vector<Pending> pending_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace

Session::Session(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided); rc != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed: " + error_text(rc));
  owns_ = true;
}

Session::~Session() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

void Session::abort(int code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::unique_ptr<Communicator> world(CommOptions options) {
  require_initialized();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, options);
}

std::unique_ptr<Communicator> from_fortran_handle(int handle, CommOptions options) {
  require_initialized();
  return std::make_unique<MpiCommunicator>(MPI_Comm_f2c(static_cast<MPI_Fint>(handle)), options);
}

int ranks_on_this_node(const Communicator& comm) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm);
  if (mpi == nullptr) return comm.size();  // an in-process group: every rank is here
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(mpi->handle(), MPI_COMM_TYPE_SHARED, mpi->rank(), MPI_INFO_NULL, &node) !=
      MPI_SUCCESS)
    return 1;
  int size = 1;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size;
}

}  // namespace mxmoe::mpi
