#pragma once
// Lanes: the classes of work the admission core tells apart. Plain C++, no I/O.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::admission {

enum class Lane : std::uint8_t { bulk = 0, standard = 1, heavy = 2 };
inline constexpr std::size_t kLaneCount = 3;
inline constexpr std::array<Lane, kLaneCount> kLanes{Lane::bulk, Lane::standard, Lane::heavy};

constexpr std::string_view to_string(Lane lane) {
  switch (lane) {
    case Lane::bulk:
      return "bulk";
    case Lane::standard:
      return "standard";
    case Lane::heavy:
      return "heavy";
  }
  return "standard";
}

constexpr std::optional<Lane> lane_from_string(std::string_view s) {
  for (Lane l : kLanes)
    if (to_string(l) == s) return l;
  return std::nullopt;
}

constexpr std::size_t index(Lane lane) { return static_cast<std::size_t>(lane); }

}  // namespace sluice::admission
