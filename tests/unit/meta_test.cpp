// Checks on the test suite itself.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

// catch_discover_tests splits a test name at ';': both halves match nothing and
// ctest reports the test passed without running it.
TEST_CASE("no test name contains a semicolon, which ctest would split", "[meta]") {
  namespace fs = std::filesystem;
  const std::regex name(R"(TEST_CASE\(\s*"([^"]*)\")");
  int names = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(SLUICE_SOURCE_DIR) / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
      ++names;
      INFO(entry.path().string() << ": " << (*it)[1]);
      CHECK((*it)[1].str().find(';') == std::string::npos);
    }
  }
  CHECK(names > 100);
}
