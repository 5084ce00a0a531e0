#include "proxy/pins_file.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/config.hpp"
#include "proxy/file_state.hpp"

namespace sluice::proxy {

using admission::Millis;
using Json = nlohmann::json;

PinsFile::Read PinsFile::read(std::chrono::system_clock::time_point now) {
  const auto& path = path_;
  if (path.empty()) return {};
  auto file = file_state(path);
  if (file.key == key_) return {};  // unchanged (a missing file is reported once)
  key_ = file.key;
  Json pin = Json::object();
  if (file.changed) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      auto body = text.str();
      pin = body.find_first_not_of(" \t\r\n") == std::string::npos ? Json::object()
                                                                   : Json::parse(body);
      if (!pin.is_object()) throw std::invalid_argument("not a JSON object");
    } catch (const std::exception& e) {
      // An unreadable pin acts as absent (seed 003), loudly.
      std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(), e.what());
      pin = Json::object();
    }
  } else {
    std::fprintf(stderr, "sluice: pins file %s: cannot read it; acting as no pin\n", path.c_str());
  }

  if (!pin.contains("level")) return {true, std::nullopt};
  try {
    int level = pin.at("level").get<int>();
    std::optional<Millis> ttl;
    if (pin.contains("ttl")) {
      // The TTL runs from the file's change, so a restart does not extend it.
      auto total = config::parse_duration(pin.at("ttl").get<std::string>());
      auto left = total - std::chrono::duration_cast<Millis>(now - *file.changed);
      if (left <= Millis{0}) return {true, std::nullopt};
      ttl = left;
    }
    std::string reason = pin.value("reason", std::string("pins file"));
    return {true, Pin{level, ttl, std::move(reason)}};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: pins file %s: %s; acting as no pin\n", path.c_str(), e.what());
    return {true, std::nullopt};
  }
}

}  // namespace sluice::proxy
