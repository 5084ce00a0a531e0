#pragma once
// An I/O thread's loop. A handler that throws has lost what it was doing (its
// connection); the exception is reported and the loop goes on with the next
// handler, so one bad connection never stops the thread's others. Asio lets
// run() be called again after a handler's exception, without restart().
//
// Threading: runs on the thread that owns `ioc`; on_exception runs there too.
#include <boost/asio/io_context.hpp>
#include <exception>
#include <string_view>

namespace sluice::proxy {

inline constexpr std::string_view kNotStdException = "an exception not derived from std::exception";

// Runs ioc until run() returns (stopped, or out of work), calling
// on_exception(what) once for each handler that threw.
template <class OnException>
void run_loop(boost::asio::io_context& ioc, OnException&& on_exception) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      on_exception(std::string_view(e.what()));
    } catch (...) {
      on_exception(kNotStdException);
    }
  }
}

}  // namespace sluice::proxy
