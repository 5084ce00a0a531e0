#pragma once
// The proxy's entry point. Deliberately free of Asio/Beast so that callers
// compile quickly.
#include "config/config.hpp"

namespace sluice::proxy {

// Binds the listeners, prints them, serves until SIGTERM/SIGINT and drains.
// Returns the process exit code: 2 when start-up fails on the configuration (a
// name that does not resolve, a log that cannot be opened), after printing
// `sluice: config: SLUICE_X: <what is wrong>` to stderr, with nothing bound.
int serve(const config::Config& config);

}  // namespace sluice::proxy
