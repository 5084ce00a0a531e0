#pragma once
// What every fuzz target shares: a property check that ends the run (libFuzzer
// keeps the input as a crash) and says which property broke.
#include <cstdio>
#include <cstdlib>

namespace sluice::fuzz {

inline void expect(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "fuzz: property broken: %s\n", property);
  std::abort();
}

}  // namespace sluice::fuzz
