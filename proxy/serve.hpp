#pragma once
// The proxy's entry point. Deliberately free of Asio/Beast so that callers
// compile quickly.
#include "config/config.hpp"

namespace sluice::proxy {

// Binds the listeners, prints them, serves until SIGTERM/SIGINT and drains.
// Returns the process exit code.
int serve(const config::Config& config);

}  // namespace sluice::proxy
