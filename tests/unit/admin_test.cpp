// The admin listener's route table: which calls need the token.
#include "proxy/admin.hpp"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <utility>

using sluice::proxy::admin_routes;

TEST_CASE("an admin route that is not a GET is mutating, so the router asks it for the token",
          "[proxy][admin]") {
  for (const auto& r : admin_routes()) {
    INFO(r.method << " " << r.path);
    if (r.method != "GET") CHECK(r.mutating);
  }
}

TEST_CASE("the admin route table has each method and path once, and the known mutating calls",
          "[proxy][admin]") {
  std::set<std::pair<std::string, std::string>> seen;
  std::set<std::pair<std::string, std::string>> mutating;
  for (const auto& r : admin_routes()) {
    INFO(r.method << " " << r.path);
    CHECK(seen.emplace(r.method, r.path).second);
    CHECK(r.path.starts_with("/"));
    if (r.mutating) mutating.emplace(r.method, r.path);
  }
  CHECK(mutating == std::set<std::pair<std::string, std::string>>{{"POST", "/admin/pins"},
                                                                  {"DELETE", "/admin/pins"},
                                                                  {"POST", "/admin/debug/block"}});
}
