#include <iostream>

#include "check.h"

int main() {
  using namespace hbcore::testing;
  for (const TestCase& t : Registry()) {
    int before = Failures();
    t.fn();
    std::cout << (Failures() == before ? "PASS " : "FAIL ") << t.name
              << std::endl;
  }
  std::cout << Registry().size() << " tests, " << Failures()
            << " failed checks" << std::endl;
  return Failures() == 0 ? 0 : 1;
}
