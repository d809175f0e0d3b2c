// Test helpers: run fn and expect an eco::Error of kind Usage (exit code 2) or Data (exit code 3)
// whose one-line message contains every part.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "base/error.h"

inline void expect_error_of_kind(eco::ErrorKind kind, const std::function<void()>& fn,
                                 std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected eco::Error (exit " << int(kind) << "), nothing was thrown";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(e.exit_code(), int(kind));
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << e.what();
  }
}

inline void expect_usage_error(const std::function<void()>& fn,
                               std::initializer_list<std::string> parts) {
  expect_error_of_kind(eco::ErrorKind::Usage, fn, parts);
}

inline void expect_data_error(const std::function<void()>& fn,
                              std::initializer_list<std::string> parts) {
  expect_error_of_kind(eco::ErrorKind::Data, fn, parts);
}
