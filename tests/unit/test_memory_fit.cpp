// The memory check before allocation (train/memory_check.h): the plan's total against the host's
// RAM, counted once per rank an MPI launcher put on this host (its environment says how many).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/config.h"
#include "dist/communicator.h"  // local_ranks
#include "train/memory_check.h"

namespace {

eco::Config tiny() {
  return eco::parse_config(
      "model: {family: gpt2, n_layer: 1, n_head: 2, d_model: 32, vocab_size: 64, seq_len: 16}\n"
      "data: {source: synthetic}\ntrain: {max_steps: 1}\n",
      "test_memory_fit");
}

// Sets an environment variable for a scope (restoring its absence).
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

TEST(MemoryFit, CountsThePlanOncePerRankOnThisHost) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), nullptr) << "run this test alone";
  const eco::MemoryFit one = eco::memory_fit(tiny());
  EXPECT_EQ(eco::local_ranks(), 1);
  const ScopedEnv env("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_EQ(eco::local_ranks(), 4);
  const eco::MemoryFit four = eco::memory_fit(tiny());
  EXPECT_EQ(four.needed, 4 * one.needed);
  EXPECT_NE(four.source.find("4 ranks on this host"), std::string::npos) << four.source;
}

}  // namespace
