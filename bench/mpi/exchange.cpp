// bench_mpi_exchange: the dispatch of one expert-parallel call, three ways, under
// `mpirun -n N bench_mpi_exchange [H] [top_k] [experts]`:
//   p2p        counts, then rows + slots, as non-blocking point-to-point messages polled against
//              a deadline (mxmoe::mpi's Communicator: what ExpertParallelLayer uses)
//   alltoallv  MPI_Alltoall of the counts, then MPI_Alltoallv of the same bytes
//   allgatherv MPI_Allgather of each rank's token count, then MPI_Allgatherv of every rank's
//              rows and expert ids: every rank receives every token and keeps its slots
// for 1, 8 and 64 tokens, on rank 0 only and on every rank. Median of 200 calls after 20,
// each after a barrier. Prints a markdown table on rank 0 (docs/DISTRIBUTED.md quotes it).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "dist/mpi/mpi.hpp"
#include "mxmoe/placement.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Dispatch {
  // Per destination: the bytes this rank sends (slots {expert, row} then rows) and counts.
  std::vector<std::vector<std::byte>> to;
  std::vector<std::uint32_t> counts;  // [2 * n]: rows, slots per destination
  std::vector<std::int32_t> ids;      // [tokens * k] this rank's routing
};

Dispatch build(int tokens, int h, int k, const mxmoe::Placement& p, std::mt19937& rng) {
  const int n = p.ranks();
  Dispatch d;
  d.to.resize(static_cast<std::size_t>(n));
  d.counts.assign(2 * static_cast<std::size_t>(n), 0);
  std::vector<std::vector<std::int32_t>> slots(static_cast<std::size_t>(n));
  std::vector<std::vector<float>> rows(static_cast<std::size_t>(n));
  std::vector<float> x(static_cast<std::size_t>(h), 0.5f);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> experts(static_cast<std::size_t>(p.num_experts()));
    for (int e = 0; e < p.num_experts(); ++e) experts[static_cast<std::size_t>(e)] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    std::vector<int> last(static_cast<std::size_t>(n), -1);
    for (int j = 0; j < k; ++j) {
      const int e = experts[static_cast<std::size_t>(j)];
      d.ids.push_back(e);
      const auto o = static_cast<std::size_t>(p.owner(e));
      if (last[o] != t) {
        last[o] = t;
        rows[o].insert(rows[o].end(), x.begin(), x.end());
        ++d.counts[2 * o];
      }
      slots[o].push_back(e);
      slots[o].push_back(static_cast<std::int32_t>(d.counts[2 * o] - 1));
      ++d.counts[2 * o + 1];
    }
  }
  for (std::size_t o = 0; o < d.to.size(); ++o) {
    auto& m = d.to[o];
    m.resize(slots[o].size() * 4 + rows[o].size() * 4);
    std::memcpy(m.data(), slots[o].data(), slots[o].size() * 4);
    std::memcpy(m.data() + slots[o].size() * 4, rows[o].data(), rows[o].size() * 4);
  }
  return d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_it(F&& f) {
  std::vector<double> us;
  for (int i = 0; i < 220; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    f();
    const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= 20) us.push_back(t);
  }
  double m = median(us), worst = 0;
  MPI_Allreduce(&m, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;  // the slowest rank's median
}

}  // namespace

int main(int argc, char** argv) {
  mxmoe::mpi::Session session(&argc, &argv);
  const int h = argc > 1 ? std::atoi(argv[1]) : 2880;
  const int k = argc > 2 ? std::atoi(argv[2]) : 4;
  const int experts = argc > 3 ? std::atoi(argv[3]) : 32;
  auto comm = mxmoe::mpi::world();
  const int n = comm->size(), me = comm->rank();
  const auto un = static_cast<std::size_t>(n);
  const mxmoe::Placement placement = mxmoe::Placement::contiguous(experts, n);
  if (me == 0)
    std::printf(
        "| ranks | tokens | on | H | k | p2p us | alltoallv us | allgatherv us | bytes sent "
        "by rank 0 |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (bool everywhere : {false, true})
    for (int tokens : {1, 8, 64}) {
      std::mt19937 rng(static_cast<unsigned>(1 + me + 100 * tokens));
      const int mine = everywhere || me == 0 ? tokens : 0;
      const Dispatch d = build(mine, h, k, placement, rng);
      std::vector<std::uint32_t> counts_in(2 * un);
      std::vector<std::vector<std::byte>> in(un);

      // p2p through the Communicator (two rounds, as the layer does).
      const double p2p = time_it([&] {
        std::vector<mxmoe::SendBuffer> s;
        std::vector<mxmoe::RecvBuffer> r;
        for (int p = 0; p < n; ++p) {
          s.push_back(
              {p, reinterpret_cast<const std::byte*>(&d.counts[2 * static_cast<std::size_t>(p)]),
               8});
          r.push_back(
              {p, reinterpret_cast<std::byte*>(&counts_in[2 * static_cast<std::size_t>(p)]), 8});
        }
        comm->exchange(s, r);
        s.clear();
        r.clear();
        for (int p = 0; p < n; ++p) {
          const auto up = static_cast<std::size_t>(p);
          const std::size_t bytes =
              8 * counts_in[2 * up + 1] + 4 * static_cast<std::size_t>(h) * counts_in[2 * up];
          in[up].resize(bytes);
          if (!d.to[up].empty()) s.push_back({p, d.to[up].data(), d.to[up].size()});
          if (bytes > 0) r.push_back({p, in[up].data(), bytes});
        }
        comm->exchange(s, r);
      });

      // MPI collectives: counts, then one MPI_Alltoallv of the same bytes.
      std::vector<std::byte> send_all, recv_all;
      std::vector<int> sc(un), sd(un), rc(un), rd(un);
      const double alltoallv = time_it([&] {
        MPI_Alltoall(d.counts.data(), 2, MPI_UINT32_T, counts_in.data(), 2, MPI_UINT32_T,
                     MPI_COMM_WORLD);
        int so = 0, ro = 0;
        send_all.clear();
        for (std::size_t p = 0; p < un; ++p) {
          sc[p] = static_cast<int>(d.to[p].size());
          sd[p] = so;
          so += sc[p];
          send_all.insert(send_all.end(), d.to[p].begin(), d.to[p].end());
          rc[p] = static_cast<int>(8 * counts_in[2 * p + 1] +
                                   4 * static_cast<std::size_t>(h) * counts_in[2 * p]);
          rd[p] = ro;
          ro += rc[p];
        }
        recv_all.resize(static_cast<std::size_t>(ro));
        MPI_Alltoallv(send_all.data(), sc.data(), sd.data(), MPI_BYTE, recv_all.data(), rc.data(),
                      rd.data(), MPI_BYTE, MPI_COMM_WORLD);
      });

      // Every token to every rank: each rank's token count, then its rows and ids.
      std::vector<int> token_counts(un), bytes_of(un), offsets(un);
      std::vector<std::byte> mine_bytes(
          static_cast<std::size_t>(mine) *
          (4 * static_cast<std::size_t>(h) + 4 * static_cast<std::size_t>(k)));
      std::vector<std::byte> all_bytes;
      const double allgatherv = time_it([&] {
        MPI_Allgather(&mine, 1, MPI_INT, token_counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
        int total = 0;
        for (std::size_t p = 0; p < un; ++p) {
          bytes_of[p] = token_counts[p] * (4 * h + 4 * k);
          offsets[p] = total;
          total += bytes_of[p];
        }
        all_bytes.resize(static_cast<std::size_t>(total));
        MPI_Allgatherv(mine_bytes.data(), static_cast<int>(mine_bytes.size()), MPI_BYTE,
                       all_bytes.data(), bytes_of.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD);
      });
      std::size_t sent = 0;
      for (int p = 1; p < n; ++p) sent += d.to[static_cast<std::size_t>(p)].size();
      if (me == 0)
        std::printf("| %d | %d | %s | %d | %d | %.1f | %.1f | %.1f | %zu |\n", n, tokens,
                    everywhere ? "every rank" : "rank 0", h, k, p2p, alltoallv, allgatherv, sent);
    }
  return 0;
}
