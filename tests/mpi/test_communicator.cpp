// The MPI communicator (src/dist/mpi_communicator.cpp) under mpirun -np 2 and -np 4 (ctest
// mpi.np2 / mpi.np4): every rank runs every test, and a failure on any rank fails the job.
//  - all_reduce_sum is the rank-order fold ((0 + x_0) + x_1) + ... bit for bit on every rank,
//    with values whose sum depends on the order (3 ranks or more: another order would fail), for
//    sizes that do not divide by the world; doubles too; int64 sums and maxima exact;
//  - all_gather in rank order, broadcast from a non-zero root;
//  - the byte counters: an all-reduce of n floats sends 2 n (w - 1) floats over all ranks;
//  - ZeRO-1's range collectives over uneven ranges (one empty): reduce_scatter_sum gives each
//    rank the rank-order fold of its range, all_gather and gather move each rank's bytes;
//  - expert parallelism's primitives: split into groups (expert-parallel, expert-data-parallel,
//    one group, rank 0 and the rest) ranked by key then old rank, whose sums fold only the
//    group's ranks in group-rank order and whose byte counters are their own; all_to_all_v with
//    uneven and empty blocks, every byte checked; size vectors that do not fit refused;
//  - the sums' receive buffer under a tiny ECO_MPI_BUFFER_BYTES (many rounds, the last one
//    shorter, sizes that do not divide by the world, empty ranges): the same bits as the default
//    budget and the rank-order fold, the same bytes over all ranks, and never more than
//    max(budget, world x 8) bytes of buffer; the ranks agree on the smallest budget; budgets
//    that are not bytes refused;
//  - whether ranks share a GPU, from every rank's (host, bus id) gathered.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/gpu_sharing.h"
#include "dist/mpi_communicator.h"

namespace {

eco::Communicator* comm = nullptr;

// Rank r's element i: large and small magnitudes of both signs, so that the sum's rounding
// depends on the order of the additions.
template <class T>
T value(int r, int64_t i) {
  const double big = (r + i) % 3 == 0 ? 1e8 : (r + i) % 3 == 1 ? -1e8 : 1.0;
  return T(big * (1 + 0.001 * r) + 0.37 * double(i % 11) + 1e-3 * r);
}

template <class T>
void check_ordered_sum() {
  const int w = comm->world();
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(1001)}) {
    std::vector<T> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<T>(comm->rank(), i);
    comm->all_reduce_sum(x.data(), n);
    int64_t order_matters = 0;
    for (int64_t i = 0; i < n; ++i) {
      T fold = T(0), reversed = T(0);
      for (int r = 0; r < w; ++r) fold += value<T>(r, i);
      for (int r = w - 1; r >= 0; --r) reversed += value<T>(r, i);
      order_matters += fold != reversed;
      ASSERT_EQ(std::memcmp(&x[size_t(i)], &fold, sizeof(T)), 0)
          << "n " << n << " element " << i << ": " << x[size_t(i)] << " vs the rank-order fold "
          << fold;
    }
    // (Two terms commute: with 2 ranks every order gives the fold's bits.)
    if (n == 1001 && w > 2) {
      EXPECT_GT(order_matters, 0) << "the values do not tell the orders apart";
    }
  }
}

TEST(MpiCommunicator, AllReduceSumOfFloatsIsTheRankOrderFold) { check_ordered_sum<float>(); }
TEST(MpiCommunicator, AllReduceSumOfDoublesIsTheRankOrderFold) { check_ordered_sum<double>(); }

TEST(MpiCommunicator, IntegerSumsAndMaximaAreExact) {
  const int w = comm->world(), r = comm->rank();
  int64_t s[2] = {int64_t(r) + 1, (int64_t(1) << 40) * r};
  comm->all_reduce_sum(s, 2);
  EXPECT_EQ(s[0], int64_t(w) * (w + 1) / 2);
  EXPECT_EQ(s[1], (int64_t(1) << 40) * (int64_t(w) * (w - 1) / 2));
  double m[2] = {double(r), -double(r)};
  comm->all_reduce_max(m, 2);
  EXPECT_EQ(m[0], double(w - 1));
  EXPECT_EQ(m[1], 0.0);
}

TEST(MpiCommunicator, AllGatherIsInRankOrderAndBroadcastReachesEveryRank) {
  const int w = comm->world(), r = comm->rank();
  const int32_t mine[2] = {r, 100 + r};
  std::vector<int32_t> all(2 * size_t(w), -1);
  comm->all_gather(all.data(), mine, sizeof mine);
  for (int q = 0; q < w; ++q) {
    EXPECT_EQ(all[2 * size_t(q)], q);
    EXPECT_EQ(all[2 * size_t(q) + 1], 100 + q);
  }
  const int root = w - 1;
  char text[16] = {};
  if (r == root) std::strcpy(text, "from the root");
  comm->broadcast(text, sizeof text, root);
  EXPECT_STREQ(text, "from the root");
}

TEST(MpiCommunicator, CountsTheBytesItSends) {
  const int w = comm->world();
  const int64_t n = 999;
  const int64_t before = comm->bytes_sent().all_reduce;
  std::vector<float> x(static_cast<size_t>(n), 1.0f);
  comm->all_reduce_sum(x.data(), n);
  int64_t sent = comm->bytes_sent().all_reduce - before;
  comm->all_reduce_sum(&sent, 1);  // over all ranks
  EXPECT_EQ(sent, 2 * n * (w - 1) * int64_t(sizeof(float)));
}

// Uneven ranges over n elements, one of them empty (with 2 ranks or more): rank r's range.
std::vector<int64_t> uneven_bounds(int w, int64_t n) {
  std::vector<int64_t> b(size_t(w) + 1, n);
  b[0] = 0;
  for (int r = 1; r < w; ++r) b[size_t(r)] = r == 1 ? b[0] : std::min(n, b[size_t(r) - 1] + n / w + 3 * r);
  return b;
}

TEST(MpiCommunicator, ReduceScatterSumGivesEachRankTheRankOrderFoldOfItsRange) {
  const int w = comm->world(), r = comm->rank();
  for (int64_t n : {int64_t(7), int64_t(1001)}) {
    const std::vector<int64_t> b = uneven_bounds(w, n);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<float>(r, i);
    const int64_t before = comm->bytes_sent().reduce_scatter;
    comm->reduce_scatter_sum(x.data(), b);
    for (int64_t i = b[size_t(r)]; i < b[size_t(r) + 1]; ++i) {
      float fold = 0.0f;
      for (int q = 0; q < w; ++q) fold += value<float>(q, i);
      ASSERT_EQ(std::memcmp(&x[size_t(i)], &fold, sizeof fold), 0)
          << "n " << n << " element " << i << ": " << x[size_t(i)] << " vs " << fold;
    }
    // Each rank sends every other rank's range once: (w - 1) n floats over all ranks.
    int64_t sent = comm->bytes_sent().reduce_scatter - before;
    comm->all_reduce_sum(&sent, 1);
    EXPECT_EQ(sent, (w - 1) * n * int64_t(sizeof(float)));
  }
}

TEST(MpiCommunicator, AllGatherAndGatherOfRangesMoveEachRanksBytes) {
  const int w = comm->world(), r = comm->rank();
  const int64_t n = 1000;
  const std::vector<int64_t> b = uneven_bounds(w, n);
  const auto owner = [&](int64_t i) {
    int q = 0;
    while (i >= b[size_t(q) + 1]) ++q;
    return q;
  };
  // Rank r's bytes carry r in their own range and 0xEE elsewhere.
  const auto fill = [&](std::vector<unsigned char>& buf) {
    for (int64_t i = 0; i < n; ++i)
      buf[size_t(i)] = owner(i) == r ? (unsigned char)(r * 16 + i % 7) : 0xEE;
  };
  std::vector<unsigned char> buf(static_cast<size_t>(n));
  fill(buf);
  comm->all_gather(buf.data(), b);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(buf[size_t(i)], (unsigned char)(owner(i) * 16 + i % 7)) << "all_gather byte " << i;
  const int root = w - 1;
  fill(buf);
  const int64_t before = comm->bytes_sent().gather;
  // In place at the root; elsewhere only the rank's own range, and no whole-size buffer.
  const int64_t begin = b[size_t(r)], end = b[size_t(r) + 1];
  std::vector<unsigned char> own(buf.begin() + begin, buf.begin() + end);
  if (r == root) comm->gather(buf.data() + begin, buf.data(), b, root);
  else comm->gather(own.data(), nullptr, b, root);
  if (r == root) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(buf[size_t(i)], (unsigned char)(owner(i) * 16 + i % 7))
          << "gather to " << root << ", byte " << i;
  }
  int64_t sent = comm->bytes_sent().gather - before;
  comm->all_reduce_sum(&sent, 1);
  EXPECT_EQ(sent, n - (b[size_t(root) + 1] - b[size_t(root)]));
  // The root's range from a buffer of its own too.
  std::vector<unsigned char> whole(static_cast<size_t>(n), 0xEE);
  comm->gather(own.data(), r == root ? whole.data() : nullptr, b, root);
  if (r == root) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(whole[size_t(i)], (unsigned char)(owner(i) * 16 + i % 7)) << "byte " << i;
  }
  // Bounds that do not cover the buffer are refused, on every rank alike.
  EXPECT_THROW(comm->all_gather(buf.data(), std::vector<int64_t>(size_t(w), 0)), std::exception);
}

// Splits the world by color(q), key(q) of each rank q and checks the child against the members
// it should hold: the ranks of this rank's color sorted by (key, old rank).
void check_split(const std::function<int(int)>& color, const std::function<int(int)>& key) {
  const int w = comm->world(), r = comm->rank();
  std::vector<int> members;  // old ranks in child-rank order
  for (int q = 0; q < w; ++q)
    if (color(q) == color(r)) members.push_back(q);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return key(a) < key(b); });
  const int g = int(members.size());
  const int64_t parent_before = comm->bytes_sent().total();

  // Checks that fail on one rank only do not return early: the others would wait for it.
  const std::unique_ptr<eco::Communicator> child = comm->split(color(r), key(r));
  EXPECT_EQ(child->world(), g);
  EXPECT_EQ(child->rank() < g ? members[size_t(child->rank())] : -1, r)
      << "group " << color(r) << " key " << key(r);
  EXPECT_EQ(child->name(), "mpi");
  EXPECT_EQ(child->bytes_sent().total(), 0);

  // The child's sum folds its members' values in child-rank order, bit for bit.
  const int64_t n = 1001;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<float>(r, i);
  child->all_reduce_sum(x.data(), n);
  int64_t order_matters = 0, wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    float fold = 0.0f, reversed = 0.0f;
    for (int q : members) fold += value<float>(q, i);
    for (auto q = members.rbegin(); q != members.rend(); ++q) reversed += value<float>(*q, i);
    order_matters += fold != reversed;
    if (std::memcmp(&x[size_t(i)], &fold, sizeof fold) != 0 && wrong++ == 0) {
      ADD_FAILURE() << "element " << i << ": " << x[size_t(i)]
                    << " vs the group-rank-order fold " << fold;
    }
  }
  EXPECT_EQ(wrong, 0) << "elements that are not the group-rank-order fold";
  if (g > 2) {
    EXPECT_GT(order_matters, 0) << "the values do not tell the orders apart";
  }

  // The child counts its own bytes (an all-reduce of n floats: 2 n (g - 1) over the group) and
  // the parent's counters do not move.
  int64_t sent = child->bytes_sent().all_reduce;
  child->all_reduce_sum(&sent, 1);
  EXPECT_EQ(sent, 2 * n * (g - 1) * int64_t(sizeof(float)));
  EXPECT_EQ(child->bytes_sent().total(), child->bytes_sent().all_reduce);
  EXPECT_EQ(comm->bytes_sent().total(), parent_before);
}

// The header's groups of world = dp x ep, with ep = w / 2 (under -np 4: ep groups {0, 1} and
// {2, 3}, expert-data-parallel groups {0, 2} and {1, 3}; under -np 2: {0}, {1} and {0, 1}).
TEST(MpiCommunicator, SplitFormsTheExpertParallelGroups) {
  const int ep = std::max(comm->world() / 2, 1);
  check_split([=](int q) { return q / ep; }, [=](int q) { return q % ep; });
}
TEST(MpiCommunicator, SplitFormsTheExpertDataParallelGroups) {
  const int ep = std::max(comm->world() / 2, 1);
  check_split([=](int q) { return q % ep; }, [=](int q) { return q / ep; });
}
// One group, keys 0, 0, -1, -1: ranks 2, 3, 0, 1 under -np 4 (equal keys by old rank).
TEST(MpiCommunicator, SplitRanksByKeyThenByOldRank) {
  check_split([](int) { return 0; }, [](int q) { return -(q / 2); });
}
// Rank 0 alone, and the rest backwards (3 ranks under -np 4: the order of the sum matters).
TEST(MpiCommunicator, SplitOffRankZeroFoldsTheRestInKeyOrder) {
  check_split([](int q) { return q == 0 ? 0 : 1; }, [](int q) { return 100 - q; });
}

TEST(MpiCommunicator, SplitRefusesANegativeColor) {
  EXPECT_THROW(comm->split(-1, 0), std::exception);  // on every rank alike, before MPI
}

// all_to_all_v's block from rank s to rank d: (s + 2 d) % 5 bytes (some empty), byte j of it
// 50 s + 10 d + j (distinct for worlds up to 5).
int64_t block_bytes(int s, int d) { return (s + 2 * d) % 5; }
unsigned char block_byte(int s, int d, int64_t j) {
  return static_cast<unsigned char>(50 * s + 10 * d + j);
}

TEST(MpiCommunicator, AllToAllVDeliversEveryBlockInRankOrder) {
  const int w = comm->world(), r = comm->rank();
  std::vector<int64_t> send_bytes(static_cast<size_t>(w)), recv_bytes(static_cast<size_t>(w));
  for (int q = 0; q < w; ++q) {
    send_bytes[size_t(q)] = block_bytes(r, q);
    recv_bytes[size_t(q)] = block_bytes(q, r);
  }
  std::vector<unsigned char> send;
  for (int d = 0; d < w; ++d)
    for (int64_t j = 0; j < block_bytes(r, d); ++j) send.push_back(block_byte(r, d, j));
  const int64_t total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), int64_t(0));
  // One guard byte past the end must stay as it was.
  std::vector<unsigned char> recv(static_cast<size_t>(total) + 1, 0xEE);
  for (int round = 0; round < 2; ++round) {  // twice: one exchange does not leak into the next
    const int64_t before = comm->bytes_sent().all_to_all;
    comm->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
    size_t at = 0;
    int64_t wrong = 0;
    for (int s = 0; s < w; ++s)
      for (int64_t j = 0; j < block_bytes(s, r); ++j, ++at)
        if (recv[at] != block_byte(s, r, j) && wrong++ == 0) {
          ADD_FAILURE() << "byte " << j << " of the block from rank " << s << " to rank " << r
                        << ": " << int(recv[at]) << " vs " << int(block_byte(s, r, j));
        }
    EXPECT_EQ(wrong, 0) << "wrong bytes received in exchange " << round;
    EXPECT_EQ(recv[at], 0xEE) << "written past the last block";
    int64_t to_others = 0;
    for (int d = 0; d < w; ++d)
      if (d != r) to_others += block_bytes(r, d);
    EXPECT_EQ(comm->bytes_sent().all_to_all - before, to_others);
    std::fill(recv.begin(), recv.end(), 0xEE);
  }
}

TEST(MpiCommunicator, AllToAllVRefusesASizeVectorThatIsNotOneBlockPerRank) {
  const int w = comm->world();
  std::vector<unsigned char> buf(static_cast<size_t>(w) + 1), out(static_cast<size_t>(w) + 1);
  const std::vector<int64_t> ones(static_cast<size_t>(w), 1), extra(static_cast<size_t>(w) + 1, 1);
  // On every rank alike, before anything is sent.
  EXPECT_THROW(comm->all_to_all_v(buf.data(), extra, out.data(), ones), std::exception);
  EXPECT_THROW(comm->all_to_all_v(buf.data(), ones, out.data(), extra), std::exception);
  std::vector<int64_t> negative = ones;
  negative.back() = -1;
  EXPECT_THROW(comm->all_to_all_v(buf.data(), negative, out.data(), negative), std::exception);
}

// A communicator over the same ranks in the same order, made under ECO_MPI_BUFFER_BYTES =
// `bytes` on this rank.
std::unique_ptr<eco::Communicator> with_buffer_bytes(const std::string& bytes) {
  setenv("ECO_MPI_BUFFER_BYTES", bytes.c_str(), 1);
  struct Unset {
    ~Unset() { unsetenv("ECO_MPI_BUFFER_BYTES"); }
  } unset;
  return comm->split(0, comm->rank());
}

// What the receive buffer may hold under `budget`: a round takes one element of every rank at
// least (8 bytes at most each).
int64_t buffer_bound(int64_t budget) { return std::max<int64_t>(budget, 8 * comm->world()); }

// Budgets that cut the sums below into many rounds with a shorter last one: one element per rank
// chunk (1 byte), 64 and 100 bytes (under -np 4: 4 and 6 floats, 2 and 3 doubles per rank chunk).
const int64_t kTinyBudgets[] = {1, 64, 100};

template <class T>
void check_sum_in_rounds() {
  const int w = comm->world(), r = comm->rank();
  for (int64_t budget : kTinyBudgets) {
    const std::unique_ptr<eco::Communicator> tiny = with_buffer_bytes(std::to_string(budget));
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(1001), int64_t(4099)}) {
      std::vector<T> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<T>(r, i);
      std::vector<T> whole = x;  // summed under the default budget: one round
      const int64_t before = tiny->bytes_sent().all_reduce;
      tiny->all_reduce_sum(x.data(), n);
      comm->all_reduce_sum(whole.data(), n);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        T fold = T(0);
        for (int q = 0; q < w; ++q) fold += value<T>(q, i);
        const bool same = std::memcmp(&x[size_t(i)], &whole[size_t(i)], sizeof(T)) == 0 &&
                          std::memcmp(&x[size_t(i)], &fold, sizeof(T)) == 0;
        if (!same && wrong++ == 0) {
          ADD_FAILURE() << "budget " << budget << ", n " << n << ", element " << i << ": "
                        << x[size_t(i)] << " vs " << whole[size_t(i)]
                        << " at the default budget and the rank-order fold " << fold;
        }
      }
      EXPECT_EQ(wrong, 0) << "budget " << budget << ", n " << n;
      int64_t sent = tiny->bytes_sent().all_reduce - before;
      comm->all_reduce_sum(&sent, 1);  // over all ranks: 2 n (w - 1) elements in any rounds
      EXPECT_EQ(sent, 2 * n * (w - 1) * int64_t(sizeof(T))) << "budget " << budget;
    }
    EXPECT_LE(eco::mpi_receive_buffer_bytes(*tiny), buffer_bound(budget)) << "budget " << budget;
    if (w > 1) {
      EXPECT_GT(eco::mpi_receive_buffer_bytes(*tiny), 0) << "budget " << budget;
    }
  }
}

TEST(MpiCommunicator, AllReduceSumOfFloatsInRoundsOfATinyBufferKeepsItsBits) {
  check_sum_in_rounds<float>();
}
TEST(MpiCommunicator, AllReduceSumOfDoublesInRoundsOfATinyBufferKeepsItsBits) {
  check_sum_in_rounds<double>();
}

TEST(MpiCommunicator, ReduceScatterSumInRoundsOfATinyBufferKeepsItsBitsAndBytes) {
  const int w = comm->world(), r = comm->rank();
  for (int64_t budget : kTinyBudgets) {
    const std::unique_ptr<eco::Communicator> tiny = with_buffer_bytes(std::to_string(budget));
    for (int64_t n : {int64_t(7), int64_t(1001), int64_t(4099)}) {
      // Uneven ranges with an empty one, and near-equal ranges that do not divide n.
      std::vector<int64_t> even(size_t(w) + 1);
      for (int q = 0; q <= w; ++q) even[size_t(q)] = n * q / w;
      for (const std::vector<int64_t>& b : {uneven_bounds(w, n), even}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<float>(r, i);
        std::vector<float> whole = x;
        const int64_t tiny_before = tiny->bytes_sent().reduce_scatter;
        const int64_t whole_before = comm->bytes_sent().reduce_scatter;
        tiny->reduce_scatter_sum(x.data(), b);
        comm->reduce_scatter_sum(whole.data(), b);
        int64_t wrong = 0;
        for (int64_t i = b[size_t(r)]; i < b[size_t(r) + 1]; ++i) {
          float fold = 0.0f;
          for (int q = 0; q < w; ++q) fold += value<float>(q, i);
          const bool same = std::memcmp(&x[size_t(i)], &whole[size_t(i)], sizeof fold) == 0 &&
                            std::memcmp(&x[size_t(i)], &fold, sizeof fold) == 0;
          if (!same && wrong++ == 0) {
            ADD_FAILURE() << "budget " << budget << ", n " << n << ", element " << i << ": "
                          << x[size_t(i)] << " vs " << whole[size_t(i)]
                          << " at the default budget and the rank-order fold " << fold;
          }
        }
        EXPECT_EQ(wrong, 0) << "budget " << budget << ", n " << n;
        // Each rank sends every other rank's range once, in any rounds.
        EXPECT_EQ(tiny->bytes_sent().reduce_scatter - tiny_before,
                  comm->bytes_sent().reduce_scatter - whole_before)
            << "budget " << budget << ", n " << n;
      }
    }
    EXPECT_LE(eco::mpi_receive_buffer_bytes(*tiny), buffer_bound(budget)) << "budget " << budget;
  }
}

// Rank r asks for 64 (r + 1) bytes: every rank cuts rounds of 64 (rounds cut differently on one
// rank would not match the others' messages).
TEST(MpiCommunicator, RanksTakeTheSmallestBufferBudgetAnyRankAsksFor) {
  const int w = comm->world(), r = comm->rank();
  const std::unique_ptr<eco::Communicator> tiny = with_buffer_bytes(std::to_string(64 * (r + 1)));
  const int64_t n = 1001;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = value<float>(r, i);
  tiny->all_reduce_sum(x.data(), n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    float fold = 0.0f;
    for (int q = 0; q < w; ++q) fold += value<float>(q, i);
    wrong += std::memcmp(&x[size_t(i)], &fold, sizeof fold) != 0;
  }
  EXPECT_EQ(wrong, 0) << "elements that are not the rank-order fold";
  EXPECT_LE(eco::mpi_receive_buffer_bytes(*tiny), buffer_bound(64));
}

TEST(MpiCommunicator, RefusesABufferBudgetThatIsNotBytes) {
  // On every rank alike, before MPI (2^40 + 1 is past the largest budget).
  for (const char* bad : {"0", "-64", "64k", "1e6", " ", "1099511627777"})
    EXPECT_THROW(with_buffer_bytes(bad), std::exception) << "'" << bad << "'";
}

// Whether ranks share a GPU (dist/gpu_sharing.h) over the real gather: every rank on one host
// here, so one bus id for all is shared, one per rank is not, and one repeated pair is shared
// on every rank alike.
TEST(GpuSharing, RanksOnOneHostShareOnlyWhereTheirBusIdsRepeat) {
  const int w = comm->world(), r = comm->rank();
  EXPECT_TRUE(eco::ranks_share_a_gpu(*comm, "0000:41:00.0", 1));
  const std::string own = "0000:" + std::to_string(10 + r) + ":00.0";
  EXPECT_FALSE(eco::ranks_share_a_gpu(*comm, own, 1));
  // Ranks 0 and w - 1 on one GPU, the others on their own.
  const std::string pair = "0000:" + std::to_string(r == w - 1 ? 10 : 10 + r) + ":00.0";
  EXPECT_TRUE(eco::ranks_share_a_gpu(*comm, pair, 1));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<eco::Communicator> c = eco::make_mpi_communicator(&argc, &argv);
  comm = c.get();
  // Only rank 0 prints GoogleTest's report; every rank's failures reach the exit code.
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int64_t any = failed ? 1 : 0;
  comm->all_reduce_sum(&any, 1);
  return any ? 1 : 0;
}
