// A file written atomically: the bytes go to PATH.tmp, and commit() fsyncs, closes and renames it
// onto PATH (then fsyncs the directory, so that the rename survives a crash). Every write, the
// fsync, the close and the rename are checked: a full disk is an error naming the file, never a
// torn or empty file in place. Destroyed without commit() (an error on the way), the temp file
// is removed and PATH is untouched.
#pragma once
#include <cstddef>
#include <string>

namespace eco {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, size_t n);
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const char* what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace eco
