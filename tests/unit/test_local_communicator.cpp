// The one-process communicator's expert-parallel primitives (dist/communicator.h): split gives
// another world of 1 with its own counters, all_to_all_v copies the one block to self, and both
// refuse what the MPI communicator refuses (tests/mpi covers several ranks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/communicator.h"

namespace eco {
namespace {

// Runs fn and expects an eco::Error whose message contains `part`.
void expect_refused(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected an eco::Error naming \"" << part << "\", nothing was thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(LocalCommunicator, SplitGivesAnotherWorldOfOneWithItsOwnCounters) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const std::unique_ptr<Communicator> child = comm->split(3, -7);
  ASSERT_NE(child, nullptr);
  EXPECT_NE(child.get(), comm.get());
  EXPECT_EQ(child->rank(), 0);
  EXPECT_EQ(child->world(), 1);
  EXPECT_EQ(child->name(), "local");
  float x[2] = {-0.0f, 2.5f};  // the rank-order sum from 0 turns -0 into +0
  child->all_reduce_sum(x, 2);
  EXPECT_FALSE(std::signbit(x[0]));
  EXPECT_EQ(x[1], 2.5f);
  EXPECT_EQ(child->bytes_sent().total(), 0);
  EXPECT_EQ(comm->bytes_sent().total(), 0);
  expect_refused([&] { comm->split(-1, 0); }, "color -1");
}

TEST(LocalCommunicator, AllToAllVCopiesTheOneBlockToItself) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  const char send[] = "tokens";
  char recv[sizeof send] = {};
  comm->all_to_all_v(send, {int64_t(sizeof send)}, recv, {int64_t(sizeof send)});
  EXPECT_STREQ(recv, "tokens");
  comm->all_to_all_v(nullptr, {0}, nullptr, {0});  // an empty block needs no buffers
  EXPECT_EQ(comm->bytes_sent().all_to_all, 0);  // nothing left the process
}

TEST(LocalCommunicator, AllToAllVRefusesCountsThatAreNotOneNonNegativeBlockPerRank) {
  const std::unique_ptr<Communicator> comm = make_local_communicator();
  char buf[8] = {};
  expect_refused([&] { comm->all_to_all_v(buf, {4, 4}, buf + 4, {4}); },
                 "send_bytes has 2 entries for a world of 1");
  expect_refused([&] { comm->all_to_all_v(buf, {4}, buf + 4, {}); },
                 "recv_bytes has 0 entries for a world of 1");
  expect_refused([&] { comm->all_to_all_v(buf, {-1}, buf + 4, {-1}); }, "send_bytes[0] is -1");
  expect_refused([&] { comm->all_to_all_v(buf, {4}, buf + 4, {3}); },
                 "rank 0 sends itself 4 bytes but expects 3");
}

}  // namespace
}  // namespace eco
