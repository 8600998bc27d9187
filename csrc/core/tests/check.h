// A minimal test harness: TEST(name) registers a function; CHECK records a
// failure with file and line and carries on; main() runs every test.
#ifndef HBCORE_TESTS_CHECK_H_
#define HBCORE_TESTS_CHECK_H_

#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace hbcore {
namespace testing {

struct TestCase {
  std::string name;
  std::function<void()> fn;
};

inline std::vector<TestCase>& Registry() {
  static std::vector<TestCase> tests;
  return tests;
}

inline int& Failures() {
  static int failures = 0;
  return failures;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> fn) {
    Registry().push_back({name, std::move(fn)});
  }
};

}  // namespace testing
}  // namespace hbcore

#define TEST(name)                                                  \
  static void name();                                               \
  static ::hbcore::testing::Registrar name##_registrar(#name, name); \
  static void name()

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++::hbcore::testing::Failures();                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond \
                << std::endl;                                              \
    }                                                                      \
  } while (0)

#define CHECK_EQ(a, b)                                                    \
  do {                                                                    \
    auto hb_a_ = (a);                                                     \
    auto hb_b_ = (b);                                                     \
    if (!(hb_a_ == hb_b_)) {                                              \
      ++::hbcore::testing::Failures();                                    \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK_EQ failed: " #a \
                << " == " #b << " (" << hb_a_ << " vs " << hb_b_ << ")"   \
                << std::endl;                                             \
    }                                                                     \
  } while (0)

#define CHECK_CONTAINS(text, part)                                          \
  do {                                                                      \
    std::string hb_t_ = (text);                                             \
    if (hb_t_.find(part) == std::string::npos) {                            \
      ++::hbcore::testing::Failures();                                      \
      std::cerr << __FILE__ << ":" << __LINE__ << ": '" << hb_t_            \
                << "' does not contain '" << (part) << "'" << std::endl;    \
    }                                                                       \
  } while (0)

#endif  // HBCORE_TESTS_CHECK_H_
