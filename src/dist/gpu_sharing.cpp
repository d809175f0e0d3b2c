#include "dist/gpu_sharing.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace eco {

namespace {
constexpr size_t kRecordBytes = 256;  // a host name (<= HOST_NAME_MAX) and a bus id, with room

std::string host_name() {
  char host[kRecordBytes] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}
}  // namespace

std::string gpu_record(const std::string& host, const std::string& bus_id) {
  return host + "|" + bus_id;
}

bool any_gpu_shared(const std::vector<std::string>& records) {
  std::vector<std::string> sorted = records;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

bool ranks_share_a_gpu(Communicator& world, const std::string& bus_id, int visible_gpus) {
  const bool known = !bus_id.empty();
  std::string mine = known ? gpu_record(host_name(), bus_id) : std::string();
  mine.resize(kRecordBytes - 1);  // fixed size, NUL-padded (a longer name is cut alike)
  std::vector<char> all(kRecordBytes * size_t(world.world()));
  world.all_gather(all.data(), mine.c_str(), int64_t(kRecordBytes));
  if (!known) return local_ranks() > visible_gpus;
  std::vector<std::string> records;
  for (int r = 0; r < world.world(); ++r) {
    const char* rec = all.data() + kRecordBytes * size_t(r);
    if (*rec) records.emplace_back(rec, strnlen(rec, kRecordBytes));  // ranks that know theirs
  }
  return any_gpu_shared(records);
}

}  // namespace eco
