// Writes into the run directory, on the lead rank only, under the directory's lock.
#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "train/metrics.h"

namespace eco {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".eco-train.lock";

// The pid written into the lock file by its holder ("?" while it is being written).
std::string lock_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, size_t(n)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "?" : pid;
}

}  // namespace

RunDir::~RunDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::string RunDir::file(const char* name) const { return (fs::path(path_) / name).string(); }

std::vector<std::string> RunDir::prepare() {
  if (!writes()) return {};
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec || !fs::is_directory(path_))
    usage_error("train.out_dir '{}': cannot create directory ({})", path_,
                ec ? ec.message() : "a file of that name exists");
  const std::string lock = file(kLockName);
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    usage_error("train.out_dir '{}': directory is not writable ({}: {})", path_, lock,
                std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = lock_holder(lock_fd_);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EWOULDBLOCK)
      usage_error("train.out_dir '{}' is in use by another eco-train run (pid {}, {}): wait for "
                  "it to finish or choose another train.out_dir",
                  path_, holder, lock);
    usage_error("train.out_dir '{}': cannot lock {}: {}", path_, lock, std::strerror(err));
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    runtime_error("{}: cannot write the lock file: {}", lock, std::strerror(errno));
  // Temp files of writes a killed run left (regular files only: we never make anything else).
  std::vector<std::string> removed;
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp" &&
        fs::is_regular_file(e.symlink_status())) {
      if (!fs::remove(e.path(), ec))
        runtime_error("{}: cannot remove a stale temp file: {}", e.path().string(), ec.message());
      removed.push_back(name);
    }
  }
  return removed;
}

void RunDir::remove_previous_run(const std::string& keep) const {
  if (!writes()) return;
  std::vector<std::string> doomed;
  for (const auto& [step, path] : checkpoints())
    if (path != keep) doomed.push_back(path);
  for (const char* name : {"metrics.jsonl", "samples.txt", "summary.json"}) doomed.push_back(file(name));
  for (const std::string& path : doomed) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) runtime_error("{}: cannot remove: {}", path, ec.message());
  }
}

void RunDir::write_resolved_config(const std::string& yaml) const {
  if (writes()) write_text_file(file("config.resolved.yaml"), yaml);
}

std::string RunDir::save_checkpoint(const CheckpointState& state, int keep) const {
  const std::string path = file(checkpoint_name(state.step).c_str());
  if (!writes()) return path;
  eco::save_checkpoint(path, state);
  prune_checkpoints(keep);  // only after the new one is safely in place
  return path;
}

std::vector<std::string> RunDir::prune_checkpoints(int keep) const {
  if (!writes()) return {};
  return eco::prune_checkpoints(path_, keep);
}

std::vector<std::pair<int64_t, std::string>> RunDir::checkpoints() const {
  return list_checkpoints(path_);
}

std::string RunDir::set_aside(const std::string& checkpoint) const {
  const std::string to = checkpoint + ".corrupt";
  if (writes() && std::rename(checkpoint.c_str(), to.c_str()) != 0)
    runtime_error("{}: cannot rename to {}: {}", checkpoint, to, std::strerror(errno));
  return to;
}

void RunDir::append_sample(int64_t step, const std::string& text) const {
  if (!writes()) return;
  const std::string path = file("samples.txt");
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) runtime_error("{}: cannot open for appending: {}", path, std::strerror(errno));
  const bool written = std::fprintf(f, "=== step %lld ===\n%s\n", (long long)step, text.c_str()) >= 0;
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !flushed || !closed)
    runtime_error("{}: write failed: {}", path, std::strerror(closed ? err : errno));
}

void RunDir::write_summary(const nlohmann::json& summary) const {
  if (writes()) write_json_file(file("summary.json"), summary);
}

nlohmann::json RunDir::read_summary() const {
  std::ifstream in(file("summary.json"));
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

}  // namespace eco
