// Checks on the test suite itself, and on a rule of the sources.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

// catch_discover_tests splits a test name at ';': both halves match nothing and
// ctest reports the test passed without running it.
TEST_CASE("no test name contains a semicolon, which ctest would split", "[meta]") {
  namespace fs = std::filesystem;
  const std::regex name(R"(TEST_CASE\(\s*"([^"]*)\")");
  int names = 0;
  for (const auto& entry :
       fs::recursive_directory_iterator(fs::path(SLUICE_SOURCE_DIR) / "tests")) {
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

// A library that exits takes the decision, and the unwinding, away from main:
// a start-up error is a config::ConfigError that serve() turns into exit code 2.
TEST_CASE("no library folder calls exit: start-up errors return to main", "[meta]") {
  namespace fs = std::filesystem;
  // ::_exit at the end of the drain is not matched: the process ends there by design.
  const std::regex exit_call(R"((^|[^_\w])exit\s*\()");
  const fs::path root(SLUICE_SOURCE_DIR);
  int files = 0;
  std::vector<std::string> calls;
  for (const char* folder : {"admission", "replay", "routes", "config", "proxy", "sim", "asio"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      ++files;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (std::regex_search(line, exit_call))
          calls.push_back(entry.path().string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  CHECK(files > 20);
  CHECK(calls == std::vector<std::string>{});
}

TEST_CASE("one version string: the Kubernetes deployment runs the image of this version",
          "[meta]") {
  std::ifstream in(std::filesystem::path(SLUICE_SOURCE_DIR) / "docker/k8s/deployment.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex(R"(image:\s*\S+/sluice:(\S+))")));
  CHECK(m[1].str() == SLUICE_VERSION);
}
