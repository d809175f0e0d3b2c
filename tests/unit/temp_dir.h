// A test helper: a fresh scratch directory under /tmp (mkdtemp), removed with everything in it.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace eco::test {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/eco-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

}  // namespace eco::test
