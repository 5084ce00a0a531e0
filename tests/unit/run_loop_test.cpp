// The I/O thread's loop (proxy/run_loop.hpp) on a real io_context: a handler
// that throws is reported once and the handlers after it still run.
#include "proxy/run_loop.hpp"

#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using sluice::proxy::kNotStdException;
using sluice::proxy::run_loop;
}  // namespace

TEST_CASE("a handler that throws is reported once and the loop runs the handlers after it",
          "[proxy][worker]") {
  boost::asio::io_context ioc;
  std::vector<std::string> ran;
  std::vector<std::string> reported;
  boost::asio::post(ioc, [&] { ran.push_back("first"); });
  boost::asio::post(ioc, [] { throw std::runtime_error("bad handler"); });
  boost::asio::post(ioc, [&] { ran.push_back("after a std::exception"); });
  boost::asio::post(ioc, [] { throw 42; });  // not a std::exception
  boost::asio::post(ioc, [&] { ran.push_back("after another exception"); });

  run_loop(ioc, [&](std::string_view what) { reported.emplace_back(what); });

  CHECK(ran ==
        std::vector<std::string>{"first", "after a std::exception", "after another exception"});
  CHECK(reported == std::vector<std::string>{"bad handler", std::string(kNotStdException)});
}

TEST_CASE("the loop returns when its io_context is stopped, reporting nothing", "[proxy][worker]") {
  boost::asio::io_context ioc;
  bool ran_after_stop = false;
  int reported = 0;
  boost::asio::post(ioc, [&] { ioc.stop(); });
  boost::asio::post(ioc, [&] { ran_after_stop = true; });
  run_loop(ioc, [&](std::string_view) { ++reported; });
  CHECK_FALSE(ran_after_stop);
  CHECK(reported == 0);
}
