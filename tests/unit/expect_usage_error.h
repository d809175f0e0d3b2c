// A test helper: runs fn and expects an eco::Error of kind Usage (exit code 2) whose one-line
// message contains every part.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "base/error.h"

inline void expect_usage_error(const std::function<void()>& fn,
                               std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected eco::Error (Usage), nothing was thrown";
  } catch (const eco::Error& e) {
    EXPECT_EQ(e.kind(), eco::ErrorKind::Usage) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << e.what();
  }
}
