// Errors: one exception type with an exit code, so the CLI can print one line and exit cleanly.
// Exit codes: 2 usage/config, 3 data, 1 everything else (I/O, checkpoints, internal).
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <fmt/format.h>

namespace eco {

enum class ErrorKind { Internal = 1, Usage = 2, Data = 3 };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// A user's value quoted in a message: at most `max` characters, so that a 100 MB value still
// gives one short line ("aaaa... (104857600 characters)").
inline std::string clip_for_message(std::string_view text, size_t max = 80) {
  if (text.size() <= max) return std::string(text);
  return fmt::format("{}... ({} characters)", text.substr(0, max), text.size());
}

template <class... Args>
[[noreturn]] void usage_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::Usage, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
[[noreturn]] void data_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::Data, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::Internal, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace eco

// Internal invariant: a violated ECO_ASSERT is a bug in ecotrain, not a user mistake.
#define ECO_ASSERT(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond))                                                                                \
      ::eco::runtime_error("{}:{}: internal check failed: {} ({})", __FILE__, __LINE__, #cond, \
                           fmt::format(__VA_ARGS__));                                          \
  } while (0)
