#include "config/config.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::config {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kUpstreamsExample =
    "api=127.0.0.1:9000|127.0.0.1:9001;auth=127.0.0.1:9100";
constexpr std::string_view kRoutesExample =
    R"([{"prefix":"/v1/uploads","lane":"bulk"},{"prefix":"/v1/responses","sse":true,"lane":"heavy"},{"prefix":"/","lane":"standard"}])";
constexpr std::string_view kDurationHint = "use e.g. 250ms, 5s, 2m";

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

[[noreturn]] void invalid(const std::string& message) { throw std::invalid_argument(message); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Leading decimal digits of text as a number; `digits` gets how many there were.
std::uint64_t leading_number(std::string_view text, std::size_t& digits) {
  std::uint64_t value = 0;
  digits = 0;
  while (digits < text.size() && is_digit(text[digits])) {
    unsigned d = static_cast<unsigned>(text[digits] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - d) / 10)
      invalid(in_quotes(text) + " is too large");
    value = value * 10 + d;
    ++digits;
  }
  return value;
}

std::uint64_t parse_count(std::string_view text) {
  std::size_t digits = 0;
  std::uint64_t value = leading_number(text, digits);
  if (digits == 0 || digits != text.size())
    invalid(in_quotes(text) + " is not a whole number; e.g. 512");
  return value;
}

using Unit = std::pair<std::string_view, std::uint64_t>;
constexpr std::array<Unit, 4> kDurationUnits{
    {{"ms", 1}, {"s", 1'000}, {"m", 60'000}, {"h", 3'600'000}}};
constexpr std::array<Unit, 4> kByteUnits{
    {{"", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}}};

// The unit's multiplier, or 0 when the unit is not in the list.
template <std::size_t N>
std::uint64_t unit_factor(const std::array<Unit, N>& units, std::string_view unit) {
  for (const auto& [name, factor] : units)
    if (name == unit) return factor;
  return 0;
}

std::string format_duration(Duration d) {
  auto ms = d.count();
  if (ms == 0) return "0s";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_micros(admission::Micros us) {
  return format_duration(std::chrono::duration_cast<Duration>(us));
}

// The shortest text that reads back as the same double.
std::string format_number(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// A fraction as a percentage ("30%"), rounded to what anyone would type.
std::string format_percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g%%", v * 100);
  return buf;
}

// "bulk=..;standard=..;heavy=..", the form the per-lane variables take.
template <class T, class Format>
std::string per_lane(const std::array<T, admission::kLaneCount>& values, Format format) {
  std::string out;
  for (auto lane : admission::kLanes)
    out += (out.empty() ? "" : ";") + std::string(admission::to_string(lane)) + "=" +
           format(values[admission::index(lane)]);
  return out;
}

std::string format_bytes(std::uint64_t n) {
  constexpr std::array<std::pair<std::uint64_t, std::string_view>, 3> kUnits{
      {{1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}}};
  for (const auto& [size, unit] : kUnits)
    if (n != 0 && n % size == 0) return std::to_string(n / size) + std::string(unit);
  return std::to_string(n);
}

bool is_ipv6(std::string_view host) {
  in6_addr addr{};
  return inet_pton(AF_INET6, std::string(host).c_str(), &addr) == 1;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

void refuse_unknown(const Env& env) {
  for (const auto& [name, value] : env) {
    if (!name.starts_with("SLUICE_")) continue;
    const Variable* nearest = nullptr;
    std::size_t best = 4;  // suggest only names within edit distance 3
    for (const auto& v : variables()) {
      // The distance is at least the difference in length: skip what cannot be within 3.
      if (name.size() > v.name.size() + 3 || v.name.size() > name.size() + 3) continue;
      std::size_t d = edit_distance(name, v.name);
      if (d == 0) {
        nearest = &v;
        best = 0;
        break;
      }
      if (d < best) {
        best = d;
        nearest = &v;
      }
    }
    if (best == 0) continue;
    if (nearest)
      throw ConfigError(name, "unknown variable; did you mean " + std::string(nearest->name) + "?");
    throw ConfigError(name, "unknown variable; `sluice --help` lists the valid ones");
  }
}

const std::string* lookup(const Env& env, std::string_view name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// Zero would mean "expire at once"; nobody wants that, and "never" is not offered.
Duration parse_timeout(const std::string& text, const Variable& v) {
  Duration d = parse_duration(text);
  if (d.count() <= 0)
    invalid(in_quotes(text) + " is not allowed; valid: greater than 0, e.g. " +
            std::string(v.default_value));
  return d;
}

template <Duration::rep Lo, Duration::rep Hi>
Duration duration_in(const std::string& text) {
  Duration d = parse_duration(text);
  if (d < Duration{Lo} || d > Duration{Hi})
    invalid(in_quotes(text) + " is out of range; valid: " + format_duration(Duration{Lo}) + ".." +
            format_duration(Duration{Hi}));
  return d;
}

constexpr std::uint64_t kNoMax = std::numeric_limits<std::uint64_t>::max();

// A whole number (or a byte size) in Lo..Hi; without Hi, anything a T can hold.
template <class T, std::uint64_t Lo, std::uint64_t Hi = kNoMax, bool Bytes = false>
T count_in(const std::string& text) {
  std::uint64_t n = Bytes ? parse_bytes(text) : parse_count(text);
  auto limit = Hi != kNoMax ? Hi : static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  if (n < Lo || n > limit) {
    std::string range = Hi == kNoMax ? "at least " + std::to_string(Lo)
                        : Bytes      ? format_bytes(Lo) + ".." + format_bytes(Hi)
                                     : std::to_string(Lo) + ".." + std::to_string(Hi);
    invalid(in_quotes(text) + " is out of range; valid: " + range);
  }
  return static_cast<T>(n);
}

template <class T, std::uint64_t Lo, std::uint64_t Hi = kNoMax>
T bytes_in(const std::string& text) {
  return count_in<T, Lo, Hi, true>(text);
}

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw ConfigError("SLUICE_ROUTES_FILE",
                      "cannot read " + in_quotes(path) + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  int error = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (error)
    throw ConfigError("SLUICE_ROUTES_FILE",
                      "cannot read " + in_quotes(path) + ": " + std::strerror(error));
  return text;
}

void load_routes(const Env& env, Config& c) {
  const std::string* inline_routes = lookup(env, "SLUICE_ROUTES");
  const std::string* file = lookup(env, "SLUICE_ROUTES_FILE");
  if (inline_routes && file)
    throw ConfigError("SLUICE_ROUTES", "set together with SLUICE_ROUTES_FILE; set only one");
  if (!inline_routes && !file) {
    c.routes = routes::Table::defaults();
    return;
  }
  std::vector<std::string> names;
  for (const auto& u : c.upstreams) names.push_back(u.name);
  if (file && file->empty())
    throw ConfigError("SLUICE_ROUTES_FILE", "empty; give the path of a JSON routes file");
  const char* variable = inline_routes ? "SLUICE_ROUTES" : "SLUICE_ROUTES_FILE";
  if (file) c.routes_file = *file;
  std::string text = inline_routes ? *inline_routes : read_file(*file);
  try {
    c.routes = routes::Table::parse(text, names);
  } catch (const routes::RouteError& e) {
    throw ConfigError(variable, e.what());
  }
}

Json route_json(const routes::Route& r, const std::vector<Upstream>& upstreams) {
  auto upstream_name = [&](std::size_t i) {
    return i < upstreams.size() ? upstreams[i].name : "#" + std::to_string(i);
  };
  // Only the match fields that are set, so the output can be pasted back into SLUICE_ROUTES.
  Json j;
  j["name"] = r.name;
  if (r.prefix) j["prefix"] = *r.prefix;
  if (r.regex_source) j["regex"] = *r.regex_source;
  if (!r.methods.empty()) j["methods"] = r.methods;
  if (r.header) j["header"] = {{"name", r.header->name}, {"value", r.header->value}};
  if (r.sse) j["sse"] = *r.sse;
  if (r.min_body_bytes) j["min_body_bytes"] = *r.min_body_bytes;
  j["lane"] = std::string(admission::to_string(r.lane));
  j["upstream"] = upstream_name(r.upstream);
  j["alternatives"] = Json::array();
  for (std::size_t a : r.alternatives) j["alternatives"].push_back(upstream_name(a));
  j["pin"] = r.pin;
  if (r.sse_keepalive) j["sse_keepalive"] = format_duration(*r.sse_keepalive);
  if (r.first_event_timeout) j["first_event_timeout"] = format_duration(*r.first_event_timeout);
  return j;
}

// Appends text wrapped to width, every line starting with indent spaces.
void wrap(std::string& out, std::string_view text, std::size_t indent, std::size_t width) {
  std::size_t column = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
    }
    if (column == 0) {
      out.append(indent, ' ');
      column = indent;
    } else {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    pos = end + 1;
  }
  out += '\n';
}

// Phrases such as "unset" or "number of cores" are not values one could type.
bool is_literal_default(std::string_view value) {
  return value != "unset" && value != "required" && value.find(' ') == std::string_view::npos;
}

std::string escape_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

ConfigError::ConfigError(std::string variable, const std::string& message)
    : std::runtime_error(variable + ": " + message), variable_(std::move(variable)) {}

double Tenants::weight(tenants::Id id) const {
  auto it =
      std::lower_bound(weights.begin(), weights.end(), std::pair<tenants::Id, double>{id, 0.0});
  return it != weights.end() && it->first == id ? it->second : 1.0;
}

std::string Redis::str() const {
  std::string auth;
  if (!password.empty()) auth = user + ":(set)@";
  return "redis://" + auth + at.str() + (db ? "/" + std::to_string(db) : "");
}

std::string Endpoint::str() const {
  std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

bool Endpoint::is_loopback() const {
  std::string lower = host;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Env sluice_environment(char** envp) {
  Env env;
  if (!envp) return env;
  for (char** p = envp; *p; ++p) {
    std::string_view entry(*p);
    if (!entry.starts_with("SLUICE_")) continue;
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Duration parse_duration(std::string_view text) {
  if (text.empty()) invalid("empty; " + std::string(kDurationHint));
  if (text == "0") return Duration{0};
  if (text.front() == '-') invalid(in_quotes(text) + " is negative; " + std::string(kDurationHint));
  std::size_t digits = 0;
  std::uint64_t value = leading_number(text, digits);
  if (digits == 0) invalid(in_quotes(text) + " is not a duration; " + std::string(kDurationHint));
  std::string_view unit = text.substr(digits);
  if (unit.empty()) invalid(in_quotes(text) + " has no unit; " + std::string(kDurationHint));
  if (unit.front() == '.')
    invalid(in_quotes(text) + " has a fraction; use a smaller unit, e.g. 1500ms for 1.5s");
  std::uint64_t factor = unit_factor(kDurationUnits, unit);
  if (factor == 0)
    invalid(in_quotes(text) + " has an unknown unit " + in_quotes(unit) +
            "; valid units: ms, s, m, h");
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<Duration::rep>::max());
  if (value > kMax / factor) invalid(in_quotes(text) + " is too large");
  return Duration{static_cast<Duration::rep>(value * factor)};
}

std::uint64_t parse_bytes(std::string_view text) {
  constexpr std::string_view kHint = "use a byte count or KiB, MiB, GiB, e.g. 16384, 16KiB, 64MiB";
  if (text.empty()) invalid("empty; " + std::string(kHint));
  if (text.front() == '-') invalid(in_quotes(text) + " is negative; " + std::string(kHint));
  std::size_t digits = 0;
  std::uint64_t value = leading_number(text, digits);
  if (digits == 0) invalid(in_quotes(text) + " is not a size; " + std::string(kHint));
  std::string_view unit = text.substr(digits);
  std::uint64_t factor = unit_factor(kByteUnits, unit);
  if (factor == 0)
    invalid(in_quotes(text) + " has an unknown unit " + in_quotes(unit) + "; " +
            std::string(kHint));
  if (value > std::numeric_limits<std::uint64_t>::max() / factor)
    invalid(in_quotes(text) + " is too large");
  return value * factor;
}

Endpoint parse_endpoint(std::string_view text) {
  const std::string kHint = "; e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080";
  Endpoint ep;
  std::string_view port;
  if (text.starts_with("[")) {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      invalid(in_quotes(text) + " is not [IPv6]:port" + kHint);
    ep.host = std::string(text.substr(1, close - 1));
    if (!is_ipv6(ep.host)) invalid(in_quotes(ep.host) + " is not an IPv6 address" + kHint);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) invalid(in_quotes(text) + " is not host:port" + kHint);
    ep.host = std::string(text.substr(0, colon));
    if (ep.host.find(':') != std::string::npos)
      invalid(in_quotes(text) + ": an IPv6 address needs brackets, e.g. [::1]:8080");
    if (ep.host.empty()) invalid(in_quotes(text) + " has no host" + kHint);
    bool host_ok = std::all_of(ep.host.begin(), ep.host.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '.' ||
             c == '-' || c == '_';
    });
    if (!host_ok) invalid(in_quotes(ep.host) + " is not a host name or address" + kHint);
    port = text.substr(colon + 1);
  }
  std::size_t digits = 0;
  std::uint64_t number = 0;
  try {
    number = leading_number(port, digits);
  } catch (const std::invalid_argument&) {
    digits = 0;
  }
  // Port 0 is accepted here: a listener may ask the system for a free port.
  if (digits == 0 || digits != port.size() || number > 65535)
    invalid(in_quotes(text) + " has port " + in_quotes(port) + "; valid ports: 0..65535");
  ep.port = static_cast<std::uint16_t>(number);
  return ep;
}

std::vector<Upstream> parse_upstreams(std::string_view text) {
  const std::string kHint = "; e.g. " + std::string(kUpstreamsExample);
  std::vector<Upstream> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = std::min(text.find(';', pos), text.size());
    std::string_view entry = text.substr(pos, end - pos);
    pos = end + 1;
    if (entry.empty()) continue;  // tolerate "a=...;" and ";;"

    Upstream u;
    std::string_view hosts = entry;
    if (auto eq = entry.find('='); eq != std::string_view::npos) {
      u.name = std::string(entry.substr(0, eq));
      hosts = entry.substr(eq + 1);
      bool name_ok = !u.name.empty() && std::all_of(u.name.begin(), u.name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' ||
               c == '-';
      });
      if (!name_ok)
        invalid("upstream name " + in_quotes(u.name) +
                " is not valid; use letters, digits, _ and -" + kHint);
    } else {
      u.name = "default";
    }
    for (const auto& other : out)
      if (other.name == u.name)
        invalid("upstream " + in_quotes(u.name) + " is given twice; names must be unique" + kHint);

    std::size_t hpos = 0;
    while (hpos <= hosts.size()) {
      std::size_t hend = std::min(hosts.find('|', hpos), hosts.size());
      std::string_view host = hosts.substr(hpos, hend - hpos);
      hpos = hend + 1;
      if (host.empty())
        invalid("upstream " + in_quotes(u.name) + " has an empty host; give host:port" + kHint);
      // An optional scheme: https:// (default port 443) or http:// (80); every
      // host of an upstream speaks the same.
      bool https = false;
      std::string_view address = host;
      if (host.starts_with("https://") || host.starts_with("http://")) {
        https = host.starts_with("https://");
        address = host.substr(https ? 8 : 7);
        if (address.ends_with("/")) address.remove_suffix(1);
      } else if (host.find("://") != std::string_view::npos) {
        invalid("upstream " + in_quotes(u.name) + ": " + in_quotes(host) +
                " has a scheme Sluice does not speak; use http:// or https://" + kHint);
      }
      if (u.hosts.empty()) {
        u.tls = https;
      } else if (u.tls != https) {
        invalid("upstream " + in_quotes(u.name) +
                " mixes https:// and plain hosts; give every host of an upstream the same "
                "scheme" +
                kHint);
      }
      Endpoint ep;
      try {
        bool has_port = address.starts_with("[") ? address.find("]:") != std::string_view::npos
                                                 : address.find(':') != std::string_view::npos;
        if (!has_port && host != address)
          ep = parse_endpoint(std::string(address) + (https ? ":443" : ":80"));
        else
          ep = parse_endpoint(address);
      } catch (const std::invalid_argument& e) {
        invalid("upstream " + in_quotes(u.name) + ": " + e.what());
      }
      if (ep.port == 0)
        invalid("upstream " + in_quotes(u.name) + ": " + in_quotes(host) +
                " has port 0; valid ports: 1..65535");
      u.hosts.push_back(std::move(ep));
    }
    out.push_back(std::move(u));
  }
  if (out.empty()) invalid("no upstream given" + kHint);
  return out;
}

namespace {

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    auto at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

double parse_decimal(std::string_view text) {
  double v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc{} || r.ptr != text.data() + text.size() || !(v >= 0))
    invalid(in_quotes(text) + " is not a non-negative number");
  return v;
}

std::array<double, 3> parse_thresholds(std::string_view text) {
  auto parts = split(text, ',');
  if (parts.size() != 3)
    invalid(in_quotes(text) + " needs three thresholds in ms for levels 1,2,3; e.g. 200,250,600");
  std::array<double, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    out[i] = static_cast<double>(parse_count(parts[i]));
    if (out[i] <= 0) invalid(in_quotes(text) + ": thresholds must be above 0");
  }
  if (!(out[0] < out[1] && out[1] < out[2]))
    invalid(in_quotes(text) +
            " is not strictly increasing; each level's entry must be above "
            "the one below, e.g. 200,250,600");
  return out;
}

std::array<Duration, 3> parse_holds(std::string_view text) {
  auto parts = split(text, ',');
  if (parts.size() != 3) invalid(in_quotes(text) + " needs three durations; e.g. 5s,15s,15s");
  std::array<Duration, 3> out{};
  for (std::size_t i = 0; i < 3; ++i) {
    out[i] = parse_duration(parts[i]);
    if (out[i].count() <= 0) invalid(in_quotes(text) + ": each hold must be above 0");
  }
  return out;
}

// "bulk=...;standard=..." into per-lane values; lanes left out keep theirs.
template <class T, class ParseOne>
void parse_per_lane(std::string_view text, std::array<T, admission::kLaneCount>& out,
                    ParseOne parse_one, std::string_view example) {
  for (auto entry : split(text, ';')) {
    if (entry.empty()) continue;
    auto eq = entry.find('=');
    if (eq == std::string_view::npos)
      invalid(in_quotes(entry) + " is not lane=value; e.g. " + std::string(example));
    auto lane = admission::lane_from_string(entry.substr(0, eq));
    if (!lane)
      invalid(in_quotes(entry.substr(0, eq)) + " is not a lane; valid: bulk, standard, heavy");
    out[admission::index(*lane)] = parse_one(entry.substr(eq + 1));
  }
}

admission::LaneFactors parse_factors(std::string_view text, admission::LaneFactors out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        auto parts = split(v, ',');
        if (parts.size() != admission::kLevelCount)
          invalid(in_quotes(v) + " needs four factors for levels 0..3; e.g. bulk=1,0.5,0,0");
        std::array<double, admission::kLevelCount> f{};
        for (std::size_t i = 0; i < f.size(); ++i) {
          f[i] = parse_decimal(parts[i]);
          if (f[i] > 1) invalid(in_quotes(parts[i]) + " is above 1; a factor is a fraction 0..1");
          // More pressure never admits more of a lane.
          if (i > 0 && f[i] > f[i - 1])
            invalid(in_quotes(v) +
                    " rises with the level; factors must not increase from level 0 to 3");
        }
        return f;
      },
      "bulk=1,0.5,0,0;standard=1,1,1,0.5");
  return out;
}

admission::RetryBands parse_bands(std::string_view text, admission::RetryBands out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        auto colon = v.find(':');
        if (colon == std::string_view::npos)
          invalid(in_quotes(v) + " is not floor:cap; e.g. standard=1s:30s");
        admission::RetryBand band{parse_duration(v.substr(0, colon)),
                                  parse_duration(v.substr(colon + 1))};
        if (band.floor < Duration{1000})
          invalid(in_quotes(v) + ": the floor must be at least 1s (Retry-After is whole seconds)");
        if (band.cap < band.floor) invalid(in_quotes(v) + ": the cap is below the floor");
        return band;
      },
      "bulk=120s:180s;standard=1s:30s");
  return out;
}

// A duration as the bulkhead keeps it, in microseconds.
admission::Micros to_micros(std::string_view text, Duration d) {
  constexpr auto kMax = std::chrono::duration_cast<Duration>(admission::Micros::max());
  if (d > kMax) invalid(in_quotes(text) + " is too large");
  return std::chrono::duration_cast<admission::Micros>(d);
}

using LaneNumbers = std::array<double, admission::kLaneCount>;

LaneNumbers parse_floors(std::string_view text, LaneNumbers out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        double f = parse_decimal(v);
        if (f > 1)
          invalid(in_quotes(v) + " is above 1; a floor is a fraction 0..1 of the capacity");
        return f;
      },
      "bulk=0.1;standard=0.5;heavy=0.2");
  double sum = 0;
  for (double f : out) sum += f;
  // A little slack for decimal fractions that do not add up exactly in binary (0.2+0.5+0.3).
  if (sum > 1 + 1e-9) {
    char total[32];
    std::snprintf(total, sizeof total, "%.6g", sum);
    invalid("the floors " + per_lane(out, format_number) + " add up to " + total +
            "; together they may guarantee at most 1 (lanes left out keep their defaults)");
  }
  return out;
}

LaneNumbers parse_weights(std::string_view text, LaneNumbers out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        double w = parse_decimal(v);
        if (w <= 0 || !std::isfinite(w))
          invalid(in_quotes(v) +
                  " is out of range; valid: a finite number above 0, e.g. standard=4");
        return w;
      },
      "bulk=1;standard=4;heavy=2");
  return out;
}

std::array<admission::Micros, admission::kLaneCount> parse_windows(
    std::string_view text, std::array<admission::Micros, admission::kLaneCount> out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        Duration d = parse_duration(v);
        if (d > Duration{300'000}) invalid(in_quotes(v) + " is out of range; valid: 0s..5m");
        return to_micros(v, d);
      },
      "bulk=0s;standard=500ms;heavy=2s");
  return out;
}

LaneNumbers parse_reserves(std::string_view text, LaneNumbers out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        bool percent = v.ends_with('%');
        std::string_view number = percent ? v.substr(0, v.size() - 1) : v;
        double r = 0;
        try {
          r = parse_decimal(number);
        } catch (const std::invalid_argument&) {
          invalid(in_quotes(v) + " is not a percentage or a fraction; e.g. bulk=30% or bulk=0.3");
        }
        if (percent) r /= 100;
        if (r > 1)
          invalid(in_quotes(v) +
                  " is out of range; valid: 0%..100% or a fraction 0..1 of the quota");
        return r;
      },
      "bulk=30%;standard=5%;heavy=15%");
  return out;
}

std::vector<int> parse_close_statuses(const std::string& text) {
  constexpr std::string_view kValid = "valid: 400..599 except 429 and 503, e.g. 402,403";
  if (text.empty()) invalid("empty; give status codes such as 402,403, or unset it for none");
  std::vector<int> out;
  for (auto entry : split(text, ',')) {
    if (entry.empty())
      invalid(in_quotes(text) +
              " has an empty entry; give status codes separated by commas, "
              "e.g. 402,403");
    std::uint64_t status = 0;
    try {
      status = parse_count(entry);
    } catch (const std::invalid_argument&) {
      invalid(in_quotes(entry) + " is not a status code; " + std::string(kValid));
    }
    if (status < 400 || status > 599)
      invalid(in_quotes(entry) + " is out of range; " + std::string(kValid));
    if (status == 429 || status == 503)
      invalid(in_quotes(entry) +
              " is load, not a refusal to close for: it shrinks the upstream's estimate and "
              "closes nothing; " +
              std::string(kValid));
    if (std::find(out.begin(), out.end(), static_cast<int>(status)) != out.end())
      invalid(in_quotes(entry) + " is given twice; list each status once");
    out.push_back(static_cast<int>(status));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A duration in lo..hi, as the admission core keeps it, in microseconds.
admission::Micros parse_micros_in(std::string_view text, Duration lo, Duration hi,
                                  std::string_view valid) {
  Duration d = parse_duration(text);
  if (d < lo || d > hi) invalid(in_quotes(text) + " is out of range; valid: " + std::string(valid));
  return to_micros(text, d);
}

// "base:max", base > 0, max >= base.
std::pair<Duration, Duration> parse_host_eject(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) invalid(in_quotes(text) + " is not base:max; e.g. 1s:30s");
  std::string_view v = text;
  std::pair out{parse_duration(v.substr(0, colon)), parse_duration(v.substr(colon + 1))};
  if (out.first.count() <= 0)
    invalid(in_quotes(text) + ": the base must be greater than 0; e.g. 1s:30s");
  if (out.second < out.first) invalid(in_quotes(text) + ": the max is below the base; e.g. 1s:30s");
  return out;
}

// SLUICE_RESOLVER: system, or the DNS server's address:port (an address: the
// resolver cannot look up its own name).
std::optional<Endpoint> parse_resolver(const std::string& text) {
  if (text == "system") return std::nullopt;
  Endpoint ep = parse_endpoint(text);
  in_addr v4{};
  if (!is_ipv6(ep.host) && inet_pton(AF_INET, ep.host.c_str(), &v4) != 1)
    invalid(in_quotes(ep.host) +
            " is not an IP address; give the DNS server as address:port, e.g. 10.96.0.10:53, or "
            "system");
  if (ep.port == 0) invalid(in_quotes(text) + " has port 0; DNS servers listen on 53");
  return ep;
}

std::string resolver_text(const std::optional<Endpoint>& e) { return e ? e->str() : "system"; }

// SLUICE_HEALTH_CHECKS: {"upstream":{"path":"/healthz","interval":"5s",...}}.
std::map<std::string, hosts::HealthCheck> parse_health_checks(const std::string& text) {
  constexpr std::string_view kHint =
      R"(; e.g. {"api":{"path":"/healthz","interval":"5s","timeout":"1s","healthy":2,"unhealthy":3}})";
  std::map<std::string, hosts::HealthCheck> out;
  if (text == "none") return out;
  auto j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    invalid("is not a JSON object of upstream names, or none" + std::string(kHint));
  for (const auto& upstream : j.items()) {
    const std::string& name = upstream.key();
    const auto& v = upstream.value();
    const std::string where = "upstream " + in_quotes(name) + ": ";
    if (!v.is_object()) invalid(where + "not an object" + std::string(kHint));
    hosts::HealthCheck hc;
    for (const auto& item : v.items()) {
      const std::string& key = item.key();
      const auto& x = item.value();
      auto duration = [&] {
        if (!x.is_string()) invalid(where + key + " is not a duration string, e.g. \"5s\"");
        Duration d = parse_duration(x.get<std::string>());
        if (d.count() <= 0) invalid(where + key + " must be greater than 0");
        return d;
      };
      auto count = [&] {
        if (!x.is_number_unsigned() || x.get<std::uint64_t>() < 1 || x.get<std::uint64_t>() > 100)
          invalid(where + key + " is not a count in 1..100");
        return x.get<std::uint32_t>();
      };
      if (key == "path") {
        if (!x.is_string()) invalid(where + "path is not a string");
        hc.path = x.get<std::string>();
        bool ok =
            hc.path.starts_with('/') &&
            std::all_of(hc.path.begin(), hc.path.end(), [](char c) { return c > ' ' && c < 0x7f; });
        if (!ok) invalid(where + "path " + in_quotes(hc.path) + " is not an absolute request path");
      } else if (key == "interval") {
        hc.interval = duration();
      } else if (key == "timeout") {
        hc.timeout = duration();
      } else if (key == "healthy") {
        hc.healthy = count();
      } else if (key == "unhealthy") {
        hc.unhealthy = count();
      } else {
        invalid(where + "unknown field " + in_quotes(key) +
                "; valid: path, interval, timeout, healthy, unhealthy");
      }
    }
    if (hc.timeout > hc.interval)
      invalid(where + "the timeout is longer than the interval" + std::string(kHint));
    out.emplace(name, std::move(hc));
  }
  return out;
}

Json health_checks_json(const std::map<std::string, hosts::HealthCheck>& checks) {
  Json out = Json::object();
  for (const auto& [name, hc] : checks)
    out[name] = {{"path", hc.path},
                 {"interval", format_duration(hc.interval)},
                 {"timeout", format_duration(hc.timeout)},
                 {"healthy", hc.healthy},
                 {"unhealthy", hc.unhealthy}};
  return out;
}

// 32 hex digits. The value is a secret: no message repeats any of it.
std::string parse_lease_key(const std::string& v) {
  const std::string kHint = "give 32 hex digits (16 bytes), e.g. from openssl rand -hex 16";
  if (v.empty())
    invalid("set but empty; " + kHint + ", or unset it to have one generated at start");
  if (v.size() != 32) invalid("has " + std::to_string(v.size()) + " characters, not 32; " + kHint);
  for (std::size_t i = 0; i < v.size(); ++i) {
    char c = v[i];
    if (!is_digit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F'))
      invalid("character " + std::to_string(i + 1) + " is not a hex digit; " + kHint);
  }
  return v;
}

// The values of single variables, each as its row in the table below reads it.

tenants::Key parse_tenant_key(const std::string& v) { return tenants::parse_key(v); }
std::string tenant_key_text(const tenants::Key& k) { return k.str(); }

std::uint32_t parse_tenant_concurrency(const std::string& v) {
  return count_in<std::uint32_t, 1, 1'000'000>(v);
}
Json concurrency_json(std::uint32_t n) { return n ? Json(n) : Json(nullptr); }

// "R" or "R:B" into the rate's two fields (the concurrency is another row's).
tenants::Limits parse_tenant_rate(const std::string& v, const tenants::Limits& current) {
  tenants::Limits l = current;
  auto r = tenants::parse_rate(v);
  l.rate = r.rate;
  l.burst = r.burst;
  return l;
}
Json rate_json(const tenants::Limits& l) {
  return l.rate > 0 ? Json(tenants::rate_text(l)) : Json(nullptr);
}

// redis://[[user]:password@]host[:port][/db]. No message repeats the password.
Redis parse_redis_url(const std::string& v) {
  const std::string kHint = "; e.g. redis://redis:6379, redis://:password@10.0.0.5:6379/2";
  constexpr std::string_view kScheme = "redis://";
  if (!std::string_view(v).starts_with(kScheme))
    invalid("does not start with redis://" + kHint + " (rediss:// is not supported)");
  std::string_view rest = std::string_view(v).substr(kScheme.size());
  Redis r;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    auto auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = auth.find(':');
    if (colon == std::string_view::npos)
      invalid("has credentials without a ':' before the password" + kHint);
    // Percent-encoded, as in any URL (a password may hold '@', ':' or '/').
    auto decoded = [&](std::string_view text) {
      std::string out;
      for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
          out += text[i];
          continue;
        }
        unsigned byte = 0;
        if (i + 2 >= text.size() ||
            std::from_chars(text.data() + i + 1, text.data() + i + 3, byte, 16).ptr !=
                text.data() + i + 3)
          invalid("has a '%' that is not followed by two hex digits in its credentials" + kHint);
        out += static_cast<char>(byte);
        i += 2;
      }
      return out;
    };
    r.user = decoded(auth.substr(0, colon));
    r.password = decoded(auth.substr(colon + 1));
    if (r.password.empty()) invalid("has an empty password" + kHint);
  }
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    auto db = std::string(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      if (db.size() > 2 || !std::all_of(db.begin(), db.end(), is_digit))
        invalid("database \"" + db + "\" is not a number in 0..99" + kHint);
      r.db = std::stoi(db);
    }
  }
  std::string hostport(rest);
  if (hostport.empty()) invalid("has no host" + kHint);
  bool has_port = hostport.back() != ']' && hostport.find(':') != std::string::npos &&
                  (hostport.front() == '[' || hostport.find(':') == hostport.rfind(':'));
  r.at = parse_endpoint(has_port ? hostport : hostport + ":6379");
  if (r.at.port == 0) invalid("has port 0" + kHint);
  return r;
}
Json redis_json(const Redis& r) { return r.on() ? Json(r.str()) : Json(nullptr); }

// "KEY=W;KEY=W": a key as the requests carry it (hashed here), or its hash as
// the access log shows it (#16 hex digits); W in 1..100.
std::vector<std::pair<tenants::Id, double>> parse_tenant_weights(const std::string& v) {
  const std::string kHint =
      "; e.g. #f10f781241e22466=4;partner-key=2 (a key or #its hash, a weight in 1..100)";
  std::vector<std::pair<tenants::Id, double>> out;
  std::size_t at = 0;
  while (at <= v.size()) {
    auto end = std::min(v.find(';', at), v.size());
    std::string entry = v.substr(at, end - at);
    at = end + 1;
    if (entry.empty()) invalid("has an empty entry" + kHint);
    auto eq = entry.rfind('=');
    if (eq == std::string::npos || eq == 0)
      invalid("entry " + std::to_string(out.size() + 1) + " is not KEY=WEIGHT" + kHint);
    std::string key = entry.substr(0, eq), w = entry.substr(eq + 1);
    double weight = 0;
    try {
      weight = parse_decimal(w);
    } catch (const std::invalid_argument&) {
      weight = 0;
    }
    if (!(weight >= admission::FairQueue::kMinWeight && weight <= admission::FairQueue::kMaxWeight))
      invalid("entry " + std::to_string(out.size() + 1) + ": weight " + in_quotes(w) +
              " is not in 1..100" + kHint);
    tenants::Id id = 0;
    if (key.size() == 17 && key[0] == '#' && std::all_of(key.begin() + 1, key.end(), [](char c) {
          return is_digit(c) || (c >= 'a' && c <= 'f');
        }))
      id = std::stoull(key.substr(1), nullptr, 16);
    else
      id = tenants::hash(key);
    out.emplace_back(id, weight);
  }
  std::sort(out.begin(), out.end());
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first) invalid("lists one tenant twice" + kHint);
  return out;
}
Json weights_json(const std::vector<std::pair<tenants::Id, double>>& weights) {
  if (weights.empty()) return Json(nullptr);
  Json j = Json::object();
  for (const auto& [id, w] : weights) {
    auto h = tenants::hex(id);
    j["#" + std::string(h.data(), h.size())] = w;  // the hash, never the key
  }
  return j;
}

// An HS256 secret. The value is a secret: no message repeats any of it.
std::string parse_jwt_key(const std::string& v) {
  if (v.size() < 16)
    invalid("has " + std::to_string(v.size()) +
            " characters; give the HS256 secret the tokens are signed with, at least 16 "
            "characters, or unset it to read claims unverified");
  return v;
}

std::string parse_admin_token(const std::string& v) {
  // An empty token usually means a secret that failed to expand; refusing beats running open.
  if (v.empty()) invalid("set but empty; give a token or unset it");
  return v;
}

// Checked when the file was laid over the environment (with_config_file).
std::string parse_config_file(const std::string& v) { return v; }

Endpoint parse_listen(const std::string& v) {
  if (v == "off") return Endpoint{};
  return parse_endpoint(v);
}
std::string listen_text(const Endpoint& e) { return e.host.empty() ? "off" : e.str(); }

// Comma-separated paths, each non-empty.
std::vector<std::string> parse_files(const std::string& v) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= v.size()) {
    auto end = std::min(v.find(',', pos), v.size());
    auto one = v.substr(pos, end - pos);
    pos = end + 1;
    if (one.empty()) invalid(in_quotes(v) + " has an empty path; give PEM files separated by ,");
    out.push_back(one);
  }
  return out;
}
Json files_json(const std::vector<std::string>& files) {
  return files.empty() ? Json(nullptr) : Json(files);
}

bool parse_tls13_only(const std::string& v) {
  if (v == "1.2") return false;
  if (v == "1.3") return true;
  invalid(in_quotes(v) + " is not a TLS version Sluice offers as the lowest; valid: 1.2, 1.3");
}
std::string tls_min_text(bool tls13_only) { return tls13_only ? "1.3" : "1.2"; }

std::string parse_cipher_text(const std::string& v) {
  if (v.empty()) invalid("empty; give an OpenSSL cipher list");
  return v;
}

Duration parse_ticket_rotate(const std::string& v) {
  auto d = parse_duration(v);
  if (d < Duration{1'000} || d > Duration{86'400'000})
    invalid(in_quotes(v) + " is out of range; valid: 1s..24h");
  return d;
}

std::size_t parse_send_buffer(const std::string& v) {
  auto n = bytes_in<std::size_t, 0, 64ull << 20>(v);
  if (n != 0 && n < 4096)
    invalid(in_quotes(v) + " is out of range; valid: 0 (the kernel's autotuning) or 4KiB..64MiB");
  return n;
}

bool parse_forwarded_for(const std::string& v) {
  if (v == "append") return false;
  if (v == "replace") return true;
  invalid(in_quotes(v) + " is not a mode; valid: append, replace");
}

admission::Mode parse_mode(const std::string& v) {
  if (v == "enforce") return admission::Mode::enforce;
  if (v == "observe") return admission::Mode::observe;
  if (v == "off") return admission::Mode::off;
  invalid(in_quotes(v) + " is not a mode; valid: enforce, observe, off");
}

std::string parse_profile(const std::string& v) {
  if (v != "fast" && v != "sentinel")
    invalid(in_quotes(v) + " is not a profile; valid: fast, sentinel");
  return v;
}

Duration parse_emergency_ms(const std::string& v) {
  return Duration{static_cast<Duration::rep>(count_in<std::uint64_t, 1, 3'600'000>(v))};
}

double parse_exit_ratio(const std::string& v) {
  double r = parse_decimal(v);
  if (r <= 0 || r > 1) invalid(in_quotes(v) + " is out of range; valid: above 0, at most 1");
  return r;
}

admission::Micros parse_starved_after(const std::string& v, const Variable& variable) {
  return to_micros(v, parse_timeout(v, variable));
}

std::optional<std::uint64_t> parse_ingest_budget(const std::string& v) {
  return bytes_in<std::uint64_t, 1>(v);
}

Json budget_json(const std::optional<std::uint64_t>& b) { return b ? Json(*b) : Json(nullptr); }

LaneNumbers parse_shares(std::string_view text, LaneNumbers out) {
  parse_per_lane(
      text, out,
      [&](std::string_view v) {
        double f = parse_decimal(v);
        if (f <= 0 || f > 1)
          invalid(in_quotes(v) +
                  " is out of range; a share is a fraction above 0, at most 1, "
                  "of SLUICE_INGEST_BUDGET");
        return f;
      },
      "bulk=0.4;standard=1;heavy=0.4");
  return out;
}

std::optional<std::size_t> parse_heavy_cap(const std::string& v) {
  return count_in<std::size_t, 1>(v);
}

double parse_seed(const std::string& v) {
  double seed = parse_decimal(v);
  if (seed < 1 || seed > 100'000) invalid(in_quotes(v) + " is out of range; valid: 1..100000");
  return seed;
}

admission::Micros parse_growth_interval(const std::string& v) {
  Duration d = parse_duration(v);
  if (d < Duration{1}) invalid(in_quotes(v) + " is out of range; valid: at least 1ms");
  return to_micros(v, d);
}

double parse_slow_factor(const std::string& v) {
  double factor = parse_decimal(v);
  if (factor != 0 && !(factor >= 1.5 && std::isfinite(factor)))
    invalid(in_quotes(v) + " is out of range; valid: 0 (off) or a number of at least 1.5");
  return factor;
}

admission::Micros parse_close_for(const std::string& v) {
  return parse_micros_in(v, Duration{1}, Duration{86'400'000}, "greater than 0, at most 24h");
}

admission::Micros parse_probe_every(const std::string& v) {
  return parse_micros_in(v, Duration{100}, Duration{3'600'000}, "100ms..1h");
}

bool parse_on_off(const std::string& v) {
  if (v == "on") return true;
  if (v == "off") return false;
  invalid(in_quotes(v) + " is neither on nor off; valid: on, off");
}

std::string parse_pins_file(const std::string& v) {
  if (v.empty()) invalid("empty; give the path of a JSON pins file");
  return v;
}

std::string parse_tick_log(const std::string& v) {
  if (v.empty()) invalid("empty; give the path of a file to append ticks to");
  return v;
}

bool parse_bool(const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  invalid(in_quotes(v) + " is not a boolean; valid: true, false");
}

// How check-config shows single values.

Json upstreams_json(const std::vector<Upstream>& upstreams) {
  Json out = Json::array();
  for (const auto& u : upstreams) {
    Json hosts = Json::array();
    for (const auto& h : u.hosts) hosts.push_back(h.str());
    out.push_back({{"name", u.name}, {"hosts", hosts}, {"tls", u.tls}});
  }
  return out;
}

// The secrets: only whether one is set.
Json hidden(const std::string& secret) { return secret.empty() ? Json(nullptr) : Json("(set)"); }

Json path_or_null(const std::string& path) { return path.empty() ? Json(nullptr) : Json(path); }

std::string forwarded_for_text(bool replace) { return replace ? "replace" : "append"; }

std::string mode_text(admission::Mode mode) { return std::string(admission::to_string(mode)); }

std::int64_t millis_count(Duration d) { return d.count(); }

template <class Values, class Format>
std::string listed(const Values& values, Format format) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + format(v);
  return out;
}

std::string thresholds_text(const std::array<double, 3>& ms) { return listed(ms, format_number); }

std::string holds_text(const std::array<Duration, 3>& holds) {
  return listed(holds, format_duration);
}

std::string factors_text(const admission::LaneFactors& factors) {
  return per_lane(factors, [](const auto& f) { return listed(f, format_number); });
}

std::string bands_text(const admission::RetryBands& bands) {
  return per_lane(bands, [](const admission::RetryBand& band) {
    return format_duration(band.floor) + ":" + format_duration(band.cap);
  });
}

std::string numbers_text(const LaneNumbers& numbers) { return per_lane(numbers, format_number); }

std::string windows_text(const std::array<admission::Micros, admission::kLaneCount>& windows) {
  return per_lane(windows, format_micros);
}

std::string reserves_text(const LaneNumbers& reserves) {
  return per_lane(reserves, format_percent);
}

Json cap_json(const std::optional<std::size_t>& cap) { return cap ? Json(*cap) : Json(nullptr); }

Json statuses_json(const std::vector<int>& statuses) {
  if (statuses.empty()) return nullptr;
  return listed(statuses, [](int s) { return std::to_string(s); });
}

std::string on_off(bool on) { return on ? "on" : "off"; }

admission::ActionSet parse_actions(const std::string& text) {
  constexpr std::string_view kValid = "valid: short_timeouts, no_keepalive, refuse_connections";
  if (text == "none") return 0;
  admission::ActionSet out = 0;
  for (auto entry : split(text, ',')) {
    auto a = admission::action_from(entry);
    if (!a)
      invalid(in_quotes(entry) + " is not an emergency action; " + std::string(kValid) +
              ", comma-separated, or none");
    if (admission::has(out, *a)) invalid(in_quotes(entry) + " is given twice; list each once");
    out |= admission::bit(*a);
  }
  return out;
}

// The table's rows. A row is one variable: what --help and the reference say
// about it, how it is read into the Config, how check-config shows it, and
// whether a reload puts a new value in force at once or it waits for a restart.
struct Row {
  Variable about;
  // Reads the variable's text into its fields; throws std::invalid_argument (or
  // out_of_range) with the message. nullptr: read by the rules between
  // variables (apply_rules), after every row.
  void (*parse)(Config&, const std::string& text, const Variable& about) = nullptr;
  // check-config's value under about.key; nullptr when the row has no key.
  Json (*show)(const Config&) = nullptr;
  // For a secret, which check-config shows only as (set): whether two configurations hold
  // the same one.
  bool (*same_secret)(const Config&, const Config&) = nullptr;
  // Copies the variable's fields from one configuration to another: what a live reload takes.
  void (*take)(Config& to, const Config& from) = nullptr;
  bool admission = false;        // all its fields are in Config::admission (load_admission)
  std::string_view shown_after;  // check-config shows it right after this key, not in table order

  constexpr Row after(std::string_view key) const {
    Row r = *this;
    r.shown_after = key;
    return r;
  }
};

constexpr Reload live = Reload::live, restart = Reload::restart;
constexpr std::string_view kNotShown{};

// The field a chain of member pointers leads to: member<&Config::admission, &Admission::tick>(c).
template <auto... Path>
constexpr auto& member(auto& config) {
  return (config.*....*Path);
}

template <auto First, auto...>
constexpr bool kInAdmission = std::is_same_v<decltype(First), Admission Config::*>;

// Parse's value for a field holding `current`. A parser that takes the current value
// merges into it (per lane: lanes left out keep theirs); one that takes the Variable
// names its default in its messages.
template <auto Parse, class T>
T parsed(const std::string& text, const T& current, const Variable& about) {
  if constexpr (std::is_invocable_v<decltype(Parse), const std::string&, const T&>)
    return Parse(text, current);
  else if constexpr (std::is_invocable_v<decltype(Parse), const std::string&, const Variable&>)
    return Parse(text, about);
  else
    return Parse(text);
}

// Show = as_is: the field's value is its JSON as it is (numbers, booleans, strings).
struct AsIs {};
constexpr AsIs as_is;

template <auto Show, class T>
Json shown(const T& value) {
  if constexpr (std::is_same_v<std::remove_cv_t<decltype(Show)>, AsIs>)
    return Json(value);
  else
    return Json(std::invoke(Show, value));
}

// A variable held in one field of the Config, at Path.
template <auto Parse, auto Show, auto... Path>
constexpr Row field(Reload reload, std::string_view key, Variable about) {
  about.reload = reload;
  about.key = key;
  Row r{about};
  r.parse = [](Config& c, const std::string& text, const Variable& v) {
    auto& out = member<Path...>(c);
    out = parsed<Parse>(text, out, v);
  };
  r.show = [](const Config& c) { return shown<Show>(member<Path...>(c)); };
  r.take = [](Config& to, const Config& from) { member<Path...>(to) = member<Path...>(from); };
  r.admission = kInAdmission<Path...>;
  return r;
}

// A secret in one field: check-config shows only whether it is set.
template <auto Parse, auto... Path>
constexpr Row secret(Reload reload, std::string_view key, Variable about) {
  about.secret = true;
  Row r = field<Parse, hidden, Path...>(reload, key, about);
  r.same_secret = [](const Config& a, const Config& b) {
    return member<Path...>(a) == member<Path...>(b);
  };
  return r;
}

template <auto Parse, auto Show, auto Member>
constexpr Row controller(Reload reload, std::string_view key, Variable about) {
  return field<Parse, Show, &Config::admission, &Admission::controller, Member>(reload, key, about);
}

template <auto Parse, auto Show, auto Member>
constexpr Row lanes(Reload reload, std::string_view key, Variable about) {
  return field<Parse, Show, &Config::admission, &Admission::lanes, Member>(reload, key, about);
}

template <auto Parse, auto Show, auto Member>
constexpr Row estimate(Reload reload, std::string_view key, Variable about) {
  return field<Parse, Show, &Config::admission, &Admission::estimate, Member>(reload, key, about);
}

template <auto Parse, auto Show, auto Member>
constexpr Row closure(Reload reload, std::string_view key, Variable about) {
  return field<Parse, Show, &Config::admission, &Admission::closure, Member>(reload, key, about);
}

// SLUICE_ROUTES and SLUICE_ROUTES_FILE: the routes need the upstreams' names and
// one variable excludes the other, so apply_rules reads them (load_routes).
constexpr Row routes_row(Reload reload, std::string_view key, Variable about) {
  about.reload = reload;
  about.key = key;
  Row r{about};
  if (!key.empty())
    r.show = [](const Config& c) {
      Json out = Json::array();
      for (const auto& route : c.routes.routes()) out.push_back(route_json(route, c.upstreams));
      return out;
    };
  r.take = [](Config& to, const Config& from) {
    to.routes = from.routes;
    to.routes_file = from.routes_file;
  };
  return r;
}

constexpr Row access_log_row(Reload reload, std::string_view key, Variable about) {
  about.reload = reload;
  about.key = key;
  Row r{about};
  r.parse = [](Config& c, const std::string& v, const Variable&) {
    if (v == "stdout") {
      c.access_log = AccessLog::stdout_;
    } else if (v == "stderr") {
      c.access_log = AccessLog::stderr_;
    } else if (v == "off") {
      c.access_log = AccessLog::off;
    } else {
      if (!v.starts_with("/") && !v.starts_with("./"))
        invalid(in_quotes(v) +
                " is not stdout, stderr, off or a file path; a path must be absolute or start "
                "with ./");
      c.access_log = AccessLog::file;
      c.access_log_path = v;
    }
  };
  r.show = [](const Config& c) -> Json {
    switch (c.access_log) {
      case AccessLog::stdout_:
        return "stdout";
      case AccessLog::stderr_:
        return "stderr";
      case AccessLog::off:
        return "off";
      case AccessLog::file:
        break;
    }
    return c.access_log_path;
  };
  r.take = [](Config& to, const Config& from) {
    to.access_log = from.access_log;
    to.access_log_path = from.access_log_path;
  };
  return r;
}

constexpr Row host_eject_row(Reload reload, std::string_view key, Variable about) {
  about.reload = reload;
  about.key = key;
  Row r{about};
  r.parse = [](Config& c, const std::string& v, const Variable&) {
    std::tie(c.host_eject_base, c.host_eject_max) = parse_host_eject(v);
  };
  r.show = [](const Config& c) {
    return Json(format_duration(c.host_eject_base) + ":" + format_duration(c.host_eject_max));
  };
  r.take = [](Config& to, const Config& from) {
    to.host_eject_base = from.host_eject_base;
    to.host_eject_max = from.host_eject_max;
  };
  return r;
}

using admission::ClosurePolicy;
using admission::ControllerConfig;
using admission::EstimatePolicy;
using admission::LanePolicy;

// The one table: load, check-config, --help, docs/configuration.md and the
// reload's live-or-restart split all walk it. In documentation order.
constexpr Row kRows[] = {
    field<parse_listen, listen_text, &Config::listen>(
        restart, "listen",
        {"SLUICE_LISTEN", "0.0.0.0:8080",
         "Address the proxy accepts plain HTTP client connections on, as host:port or "
         "[IPv6]:port; off: none (HTTPS only, on SLUICE_TLS_LISTEN)."}),
    field<parse_files, files_json, &Config::tls, &Tls::cert_files>(
        restart, "tls_cert",
        {"SLUICE_TLS_CERT", "unset",
         "PEM certificate files (each the certificate, then its chain), separated by ,: with "
         "SLUICE_TLS_KEY, turns on the HTTPS listener. The first is served by default, another to "
         "a client that asks for one of its DNS names (SNI). The files are watched: a changed "
         "certificate (or SIGHUP) is used by new handshakes while open connections keep theirs, "
         "and a bad file is refused with a log line, the one in use staying."}),
    field<parse_files, files_json, &Config::tls, &Tls::key_files>(
        restart, "tls_key",
        {"SLUICE_TLS_KEY", "unset",
         "The private keys (PEM) of SLUICE_TLS_CERT's certificates, one per certificate, in the "
         "same order, separated by ,."}),
    field<parse_endpoint, &Endpoint::str, &Config::tls, &Tls::listen>(
        restart, "tls_listen",
        {"SLUICE_TLS_LISTEN", "0.0.0.0:8443",
         "Address of the HTTPS listener (when SLUICE_TLS_CERT is set), as host:port or "
         "[IPv6]:port; it may not be SLUICE_LISTEN's."}),
    field<parse_tls13_only, tls_min_text, &Config::tls, &Tls::protocol, &tls::Protocol::tls13_only>(
        restart, "tls_min_version",
        {"SLUICE_TLS_MIN_VERSION", "1.2",
         "Lowest TLS version offered, 1.2 or 1.3 (SSLv3, TLS 1.0 and 1.1 never are)."}),
    field<parse_cipher_text, as_is, &Config::tls, &Tls::protocol, &tls::Protocol::ciphers>(
        restart, "tls_ciphers",
        {"SLUICE_TLS_CIPHERS", "ECDHE with AES-GCM or ChaCha20",
         "TLS 1.2 cipher list in OpenSSL's syntax; the default is Mozilla's intermediate list "
         "(forward secrecy, AEAD only)."}),
    field<parse_cipher_text, as_is, &Config::tls, &Tls::protocol, &tls::Protocol::ciphersuites>(
        restart, "tls_ciphersuites",
        {"SLUICE_TLS_CIPHERSUITES", "the three TLS 1.3 suites",
         "TLS 1.3 ciphersuites in OpenSSL's syntax; the default is "
         "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256."}),
    field<parse_timeout, format_duration, &Config::tls, &Tls::handshake_timeout>(
        restart, "tls_handshake_timeout",
        {"SLUICE_TLS_HANDSHAKE_TIMEOUT", "10s",
         "A client's TLS handshake not finished within this time is cut (counted, reason "
         "timeout)."}),
    field<parse_ticket_rotate, format_duration, &Config::tls, &Tls::ticket_rotate>(
        restart, "tls_ticket_rotate",
        {"SLUICE_TLS_TICKET_ROTATE", "1h",
         "A new session ticket key every this long (1s..24h), and with each certificate reload: "
         "a ticket resumes a session for at most one period, then the client makes a full "
         "handshake."}),
    field<parse_endpoint, &Endpoint::str, &Config::admin_listen>(
        restart, "admin_listen",
        {"SLUICE_ADMIN_LISTEN", "127.0.0.1:9901",
         "Address of the admin listener, which serves /metrics, /healthz, /readyz and /admin/... "
         "and "
         "is never gated by admission; an address that is not loopback needs SLUICE_ADMIN_TOKEN "
         "(no "
         "opt-out)."}),
    secret<parse_admin_token, &Config::admin_token>(
        restart, "admin_token",
        {"SLUICE_ADMIN_TOKEN", "unset",
         "Bearer token that mutating admin calls (POST and DELETE /admin/pins, POST "
         "/admin/debug/block) must present as Authorization: Bearer <token>, compared in constant "
         "time; required when SLUICE_ADMIN_LISTEN is not loopback. A secret: no output shows it."}),
    field<parse_upstreams, upstreams_json, &Config::upstreams>(
        restart, "upstreams",
        {"SLUICE_UPSTREAMS", "required",
         "Upstreams as name=host:port[|host:port...] entries separated by ; (a bare host:port "
         "names upstream default); a host may start with https:// (TLS, verified, port 443 unless "
         "given; every host of an upstream alike) or http://; the first upstream is where routes "
         "send requests unless they say "
         "otherwise."}),
    routes_row(
        live, "routes",
        {"SLUICE_ROUTES", "built-in table",
         "Routes as a JSON array, first match wins (schema in docs/configuration.md); without it "
         "and "
         "without SLUICE_ROUTES_FILE, SSE requests go to lane heavy and the rest to lane standard, "
         "all to the first upstream."}),
    routes_row(live, kNotShown,
               {"SLUICE_ROUTES_FILE", "unset",
                "Path of a file holding the routes JSON array, read at start-up and again when it "
                "changes (a live reload); set it or SLUICE_ROUTES, not both."}),
    field<parse_config_file, path_or_null, &Config::config_file>(
        restart, "config_file",
        {"SLUICE_CONFIG_FILE", "unset",
         "Path of a file of SLUICE_X=value lines (# comments) laid over the environment, read at "
         "start-up and again on SIGHUP or when it changes: the variables that reload live take "
         "their new values at once, the others keep theirs until a restart."})
        .after("debug_endpoints"),
    field<count_in<int, 1, 256>, as_is, &Config::threads>(
        restart, "threads",
        {"SLUICE_THREADS", "number of cores",
         "I/O threads, each running its own event loop (1..256)."}),
    access_log_row(restart, "access_log",
                   {"SLUICE_ACCESS_LOG", "stdout",
                    "Where the JSON access log goes, one line per request: stdout, stderr, off, or "
                    "a file path "
                    "(absolute or starting with ./)."}),
    field<parse_config_file, path_or_null, &Config::upstream_tls, &UpstreamTls::ca_file>(
        restart, "upstream_ca",
        {"SLUICE_UPSTREAM_CA", "the system's CA store",
         "PEM file of the CA certificates https:// upstreams are verified against; unset, the "
         "system's store (OpenSSL's, which honours SSL_CERT_FILE and SSL_CERT_DIR). Verification "
         "(chain and host name) is never off."}),
    field<parse_config_file, path_or_null, &Config::upstream_tls, &UpstreamTls::client,
          &tls::Pair::cert>(restart, "upstream_client_cert",
                            {"SLUICE_UPSTREAM_CLIENT_CERT", "unset",
                             "PEM certificate (and chain) Sluice presents to https:// upstreams "
                             "that ask for one (mTLS); with SLUICE_UPSTREAM_CLIENT_KEY."}),
    field<parse_config_file, path_or_null, &Config::upstream_tls, &UpstreamTls::client,
          &tls::Pair::key>(restart, "upstream_client_key",
                           {"SLUICE_UPSTREAM_CLIENT_KEY", "unset",
                            "The private key (PEM) of SLUICE_UPSTREAM_CLIENT_CERT."}),
    field<count_in<std::size_t, 1>, as_is, &Config::upstream_max_connections>(
        restart, "upstream_max_connections",
        {"SLUICE_UPSTREAM_MAX_CONNECTIONS", "512",
         "Most connections open to each upstream, split evenly across the I/O threads' pools, and "
         "the ceiling of its capacity estimate; a request that finds its thread's pool exhausted "
         "waits for a connection, and that wait is the upstream's pressure signal."}),
    field<parse_timeout, format_duration, &Config::upstream_idle_timeout>(
        restart, "upstream_idle_timeout",
        {"SLUICE_UPSTREAM_IDLE_TIMEOUT", "30s",
         "A pooled upstream connection left idle this long is closed."}),
    host_eject_row(
        restart, "host_eject",
        {"SLUICE_HOST_EJECT", "1s:30s",
         "base:max; a host of an upstream that refuses connections is left out of the balancing "
         "for "
         "base, doubling at each new refusal up to max (base greater than 0, max at least base)."}),
    field<parse_resolver, resolver_text, &Config::resolver>(
        restart, "resolver",
        {"SLUICE_RESOLVER", "system",
         "The DNS server upstream host names are asked of, as address:port; system: the "
         "system's resolver (/etc/hosts, then /etc/resolv.conf's servers and search domains). "
         "Every address of a name is a host; a name is asked again when its answer's TTL runs "
         "out, and a name that does not resolve (at start or later) is retried while its "
         "requests get 503 unresolved."}),
    field<duration_in<1000, 3'600'000>, format_duration, &Config::dns_ttl, &hosts::TtlBounds::min>(
        restart, "dns_min_ttl",
        {"SLUICE_DNS_MIN_TTL", "1s",
         "An upstream name's answer is kept at least this long, whatever its TTL (1s..1h); also "
         "the first retry of a lookup that failed, doubling up to 30s."}),
    field<duration_in<1000, 86'400'000>, format_duration, &Config::dns_ttl, &hosts::TtlBounds::max>(
        restart, "dns_max_ttl",
        {"SLUICE_DNS_MAX_TTL", "60s",
         "An upstream name's answer is kept at most this long, whatever its TTL (1s..24h, at "
         "least SLUICE_DNS_MIN_TTL)."}),
    field<parse_health_checks, health_checks_json, &Config::health_checks>(
        restart, "health_checks",
        {"SLUICE_HEALTH_CHECKS", "none",
         "Active health checks, a JSON object by upstream name: "
         "{\"api\":{\"path\":\"/healthz\",\"interval\":\"5s\",\"timeout\":\"1s\",\"healthy\":2,"
         "\"unhealthy\":3}} (each field optional, these are the defaults). Each host gets GET "
         "path every interval (plus up to a tenth at random); a 2xx or 3xx within the timeout "
         "passes; unhealthy failures in a row take the host out of the balancing, healthy "
         "passes bring it back. A host is out while either the checks or a refused connect "
         "(SLUICE_HOST_EJECT) have it out."}),
    field<bytes_in<std::size_t, 1ull << 10, 1ull << 20>, as_is, &Config::max_header_bytes>(
        restart, "max_header_bytes",
        {"SLUICE_MAX_HEADER_BYTES", "16KiB",
         "A request head (request line and headers) above this gets 431 (1KiB..1MiB)."}),
    field<bytes_in<std::uint64_t, 0>, as_is, &Config::max_body_bytes>(
        restart, "max_body_bytes",
        {"SLUICE_MAX_BODY_BYTES", "64MiB",
         "A request body above this gets 413; 0 refuses every request that has a body."}),
    field<parse_forwarded_for, forwarded_for_text, &Config::forwarded_for_replace>(
        restart, "forwarded_for",
        {"SLUICE_FORWARDED_FOR", "append",
         "append: the client's X-Forwarded-For is kept and its address added (Sluice behind a load "
         "balancer that sets it); replace: Sluice is the edge, a client's X-Forwarded-For is "
         "dropped "
         "and only its address is sent. X-Real-IP is always the connecting address."})
        .after("client_send_buffer"),
    field<count_in<std::size_t, 1>, as_is, &Config::max_connections>(
        restart, "max_connections",
        {"SLUICE_MAX_CONNECTIONS", "20000",
         "Most client connections open at once; a connection beyond it is closed as soon as it is "
         "accepted."}),
    field<parse_timeout, format_duration, &Config::header_timeout>(
        restart, "header_timeout",
        {"SLUICE_HEADER_TIMEOUT", "10s",
         "A request head not complete within this time gets 408 and the connection is closed "
         "(slowloris)."}),
    field<parse_timeout, format_duration, &Config::idle_timeout>(
        restart, "idle_timeout",
        {"SLUICE_IDLE_TIMEOUT", "60s",
         "A keep-alive client connection idle this long between two requests is closed."}),
    field<parse_timeout, format_duration, &Config::body_timeout>(
        restart, "body_timeout",
        {"SLUICE_BODY_TIMEOUT", "30s",
         "Each 16KiB of a request body (or its end) must arrive within this much time spent "
         "waiting "
         "on the client, else 408 and the connection is closed: a stalled body and one trickled in "
         "alike. The first 16KiB is read before admission, so a slow body holds no slot and no "
         "upstream connection while it arrives."}),
    field<parse_timeout, format_duration, &Config::send_timeout>(
        restart, "send_timeout",
        {"SLUICE_SEND_TIMEOUT", "30s",
         "Each write of a piece of a response (up to 16KiB) to the client must be done within this "
         "time, else the connection is closed and the upstream connection released (a client that "
         "stops reading, or reads slower than 16KiB per this time). A write still pending after "
         "250ms "
         "gives the request's bulkhead slot back at once (heavy leases excepted): the response "
         "then "
         "waits on the client, not on the upstream."}),
    field<parse_send_buffer, as_is, &Config::client_send_buffer>(
        restart, "client_send_buffer",
        {"SLUICE_CLIENT_SEND_BUFFER", "256KiB",
         "The kernel send buffer of each client connection (SO_SNDBUF, 4KiB..64MiB; 0 leaves it to "
         "the "
         "kernel's autotuning, up to net.ipv4.tcp_wmem's maximum): bounds the memory a client that "
         "stops reading pins in the kernel, and lets its write stall, so SLUICE_SEND_TIMEOUT can "
         "cut "
         "it, before megabytes are queued for it."})
        .after("max_connections"),
    field<parse_timeout, format_duration, &Config::connect_timeout>(
        restart, "upstream_connect_timeout",
        {"SLUICE_UPSTREAM_CONNECT_TIMEOUT", "2s",
         "An upstream connect that fails or does not complete within this gets 502."}),
    field<parse_timeout, format_duration, &Config::response_timeout>(
        restart, "upstream_response_timeout",
        {"SLUICE_UPSTREAM_RESPONSE_TIMEOUT", "30s",
         "No upstream response head within this after the request was sent gets 504; a response "
         "body that stalls this long is cut."}),
    field<parse_timeout, format_duration, &Config::sse_idle_timeout>(
        restart, "sse_idle_timeout",
        {"SLUICE_SSE_IDLE_TIMEOUT", "5m",
         "An SSE stream that receives nothing from the upstream for this long is closed."}),
    field<parse_bool, as_is, &Config::h2>(
        restart, "h2",
        {"SLUICE_H2", "true",
         "Offer HTTP/2 by ALPN (h2) on the TLS listener; false offers HTTP/1.1 only. Each stream "
         "is a request with its own lane, admission decision and refusal; upstreams stay "
         "HTTP/1.1."}),
    field<parse_bool, as_is, &Config::h2c>(
        restart, "h2c",
        {"SLUICE_H2C", "false",
         "true: the plain listener also speaks HTTP/2 to clients that start with its preface "
         "(h2c prior knowledge); HTTP/1.1 clients are served as before."}),
    field<count_in<std::uint32_t, 1, 10'000>, as_is, &Config::h2_max_streams>(
        restart, "h2_max_streams",
        {"SLUICE_H2_MAX_STREAMS", "128",
         "HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: streams one client connection may have open at "
         "once (1..10000); a stream over it is reset with REFUSED_STREAM."}),
    field<bytes_in<std::uint32_t, 65'535, 16ull << 20>, as_is, &Config::h2_window>(
        restart, "h2_window",
        {"SLUICE_H2_WINDOW", "256KiB",
         "HTTP/2 flow control: the request body bytes one stream may send ahead of what its "
         "upstream took (64KiB-1..16MiB); the connection's window is four times this."}),
    field<count_in<std::uint32_t, 1, 1'000'000>, as_is, &Config::h2_frame_budget>(
        restart, "h2_frame_budget",
        {"SLUICE_H2_FRAME_BUDGET", "200",
         "HTTP/2 stream resets and other frames that cost Sluice work but carry no request (PING, "
         "SETTINGS, PRIORITY, empty DATA, streams reset before their answer) one connection may "
         "send per second, in a bucket of twice this: over it the connection gets GOAWAY "
         "ENHANCE_YOUR_CALM and closes (rapid reset, CVE-2023-44487)."}),
    field<duration_in<10, 1'000>, format_duration, &Config::lag_probe_interval>(
        restart, "lag_probe_interval",
        {"SLUICE_LAG_PROBE_INTERVAL", "50ms",
         "How often each I/O thread measures its event-loop lag, the admission core's main "
         "pressure "
         "signal (10ms..1s)."}),
    field<parse_duration, format_duration, &Config::drain_delay>(
        restart, "drain_delay",
        {"SLUICE_DRAIN_DELAY", "5s",
         "On SIGTERM /readyz turns 503 at once and the listener keeps serving this long so load "
         "balancers can deregister the instance (0 allowed)."}),
    field<parse_timeout, format_duration, &Config::drain_timeout>(
        restart, "drain_timeout",
        {"SLUICE_DRAIN_TIMEOUT", "30s",
         "After the drain delay the listener stops accepting and in-flight requests, SSE streams "
         "included, get this long to finish before the process exits."}),
    field<parse_mode, mode_text, &Config::admission, &Admission::mode>(
        live, "admission_mode",
        {"SLUICE_ADMISSION_MODE", "enforce",
         "enforce (refuse with 503), observe (decide as enforce, waits included, and forward what "
         "enforce would refuse, counted would_shed with the same reason) or off."}),
    field<parse_profile, as_is, &Config::admission, &Admission::profile>(
        live, "admission_profile",
        {"SLUICE_ADMISSION_PROFILE", "fast",
         "Timing defaults: fast (a tick controller, seconds) or sentinel (tick 1m, hold 5m,5m,5m, "
         "exit ratio 1.0, spacing 5m, emergency dwell 3m); any variable below overrides its "
         "profile "
         "value."}),
    field<duration_in<10, 3'600'000>, format_duration, &Config::admission, &Admission::tick>(
        live, "tick",
        {"SLUICE_TICK", "1s",
         "The admission controller's tick: one reading, one decision (10ms..1h)."}),
    controller<parse_thresholds, thresholds_text, &ControllerConfig::lag_ms>(
        live, "admission_lag_ms",
        {"SLUICE_ADMISSION_LAG_MS", "200,250,600",
         "Event-loop lag entry thresholds of levels 1,2,3 in ms; strictly increasing."}),
    controller<parse_thresholds, thresholds_text, &ControllerConfig::upstream_wait_ms>(
        live, "admission_upstream_wait_ms",
        {"SLUICE_ADMISSION_UPSTREAM_WAIT_MS", "150,200,600",
         "Upstream-wait (p95 over 1.5 ticks) entry thresholds of levels 1,2,3 in ms; strictly "
         "increasing."}),
    controller<count_in<int, 1, 100>, as_is, &ControllerConfig::rise_ticks>(
        live, "admission_rise_ticks",
        {"SLUICE_ADMISSION_RISE_TICKS", "3",
         "Consecutive ticks of fresh evidence before a level rises (1..100)."}),
    controller<parse_emergency_ms, millis_count, &ControllerConfig::emergency_stall>(
        live, "admission_emergency_ms",
        {"SLUICE_ADMISSION_EMERGENCY_MS", "1000",
         "A single stall (or lag sample) this long in ms goes to level 3 at once."}),
    controller<parse_holds, holds_text, &ControllerConfig::hold>(
        live, "admission_hold",
        {"SLUICE_ADMISSION_HOLD", "5s,15s,15s",
         "Per level 1,2,3: how long the signals must stay under the exit line before the level "
         "steps down one."}),
    controller<parse_exit_ratio, as_is, &ControllerConfig::exit_ratio>(
        live, "admission_exit_ratio",
        {"SLUICE_ADMISSION_EXIT_RATIO", "0.6",
         "Exit line = ratio x the level's entry threshold (0 < ratio <= 1)."}),
    controller<parse_duration, format_duration, &ControllerConfig::spacing>(
        live, "admission_spacing",
        {"SLUICE_ADMISSION_SPACING", "0s",
         "Least time between two automatic level changes (5m in sentinel)."}),
    controller<parse_duration, format_duration, &ControllerConfig::emergency_dwell>(
        live, "admission_emergency_dwell",
        {"SLUICE_ADMISSION_EMERGENCY_DWELL", "0s",
         "Level 2 must have lasted this long before sustained pressure may enter level 3 (3m in "
         "sentinel); stalls and pins excepted."}),
    controller<parse_timeout, format_duration, &ControllerConfig::timeout_window>(
        live, "admission_timeout_pin",
        {"SLUICE_ADMISSION_TIMEOUT_PIN", "30s",
         "An upstream timeout within this window is evidence for level 2."}),
    field<parse_factors, factors_text, &Config::admission, &Admission::factors>(
        live, "lane_factors",
        {"SLUICE_LANE_FACTORS", "bulk=1,0.5,0,0;standard=1,1,1,0.5;heavy=1,0.5,0.25,0.25",
         "Per lane, the admitted fraction of new requests at levels 0..3 (each in 0..1, never "
         "rising "
         "with the level); lanes left out keep their defaults."}),
    field<parse_bands, bands_text, &Config::admission, &Admission::retry>(
        live, "retry_after",
        {"SLUICE_RETRY_AFTER", "bulk=1s:180s;standard=1s:30s;heavy=2s:60s",
         "Per lane, floor and cap of the derived Retry-After (seed 000's fixed bulk band is "
         "bulk=120s:180s, an opt-in); lanes left out keep their defaults; a route's retry_after "
         "replaces its lane's."}),
    lanes<parse_floors, numbers_text, &LanePolicy::floors>(
        live, "lane_floors",
        {"SLUICE_LANE_FLOORS", "bulk=0.1;standard=0.5;heavy=0.2",
         "Per lane, the fraction of an upstream's measured capacity guaranteed to the lane while "
         "it "
         "has work (each in 0..1, together at most 1); lanes left out keep their defaults."}),
    lanes<parse_weights, numbers_text, &LanePolicy::weights>(
        live, "lane_weights",
        {"SLUICE_LANE_WEIGHTS", "bulk=1;standard=4;heavy=2",
         "Per lane, its share of borrowed capacity (weighted fair share above the floors) and how "
         "eagerly it takes the last free slots (each a finite number above 0); lanes left out keep "
         "their defaults."}),
    lanes<parse_windows, windows_text, &LanePolicy::queue_window>(
        live, "queue_window",
        {"SLUICE_QUEUE_WINDOW", "bulk=0s;standard=500ms;heavy=2s",
         "Per lane, how long a request that finds no free slot may wait for one before a 503 "
         "queue_timeout (0s..5m; 0s refuses at once); lanes left out keep their defaults."}),
    lanes<parse_starved_after, format_micros, &LanePolicy::starved_after>(
        live, "starved_after",
        {"SLUICE_STARVED_AFTER", "5s",
         "A lane below its floor whose queue has stayed non-empty this long is listed as starving "
         "and counted (greater than 0)."}),
    lanes<parse_reserves, reserves_text, &LanePolicy::reserve>(
        live, "budget_reserve",
        {"SLUICE_BUDGET_RESERVE", "bulk=30%;standard=5%;heavy=15%",
         "Per lane, the share of an upstream's published quota (RateLimit-* or X-RateLimit-* "
         "response headers) left to the lanes above it: once the remaining quota falls to the "
         "lane's "
         "reserve, the lane borrows nothing more on that upstream until the quota resets (each a "
         "percentage 0%..100% or a fraction 0..1, e.g. 30% or 0.3); lanes left out keep their "
         "defaults."}),
    field<parse_heavy_cap, cap_json, &Config::admission, &Admission::heavy_max_in_flight>(
        restart, "heavy_max_in_flight",
        {"SLUICE_HEAVY_MAX_IN_FLIGHT", "unset",
         "Optional absolute cap (at least 1) on live heavy leases across the process (a heavy "
         "lease "
         "lasts the whole response, an SSE stream included); unset, heavy requests are limited "
         "only "
         "relative to the measured capacity."}),
    field<parse_ingest_budget, budget_json, &Config::admission, &Admission::ingest_budget>(
        restart, "ingest_budget",
        {"SLUICE_INGEST_BUDGET", "unset",
         "Optional: request body bytes in flight across the process (a size such as 64MiB): a "
         "declared body is held whole from admission until written upstream, a chunked one as it "
         "is read. A body that does not fit waits in its lane's queue (its queue window, at "
         "least 1s) and is then refused with 503 ingest_budget, its Retry-After from the drain "
         "rate measured. Requests without a body never meet it."}),
    field<parse_shares, numbers_text, &Config::admission, &Admission::ingest_shares>(
        restart, "ingest_shares",
        {"SLUICE_INGEST_SHARES", "bulk=0.4;standard=1;heavy=0.4",
         "Per lane, the fraction of SLUICE_INGEST_BUDGET its requests may hold (above 0, at most "
         "1): uploads in bulk and heavy leave standard's bodies room; a body larger than its "
         "lane's share goes alone in its lane. Lanes left out keep their defaults."})
        .after("ingest_budget"),
    field<parse_tenant_key, tenant_key_text, &Config::tenants, &Tenants::key>(
        restart, "tenant_key",
        {"SLUICE_TENANT_KEY", "none",
         "Who a request belongs to: header:NAME (a request header, e.g. an API key), client_ip "
         "(the connection's peer address) or jwt:CLAIM (a claim of the bearer JWT in "
         "Authorization, e.g. jwt:sub); none: every request is one tenant. A key is hashed "
         "(SHA-256) as soon as it is read and only its hash is kept or logged; requests without "
         "one share one tenant. A free slot of a lane goes to the waiting tenant holding the "
         "fewest; a "
         "route's tenant_key replaces this one."}),
    secret<parse_jwt_key, &Config::tenants, &Tenants::jwt_key>(
        restart, "tenant_jwt_key",
        {"SLUICE_TENANT_JWT_KEY", "unset",
         "The HS256 secret bearer JWTs are signed with (at least 16 characters): a jwt: tenant "
         "key is then taken only from a token whose signature verifies, and any other request "
         "is the shared tenant; unset, claims are read without verification (Sluice only "
         "groups requests by them; authentication stays with the API). A secret."}),
    field<parse_tenant_concurrency, concurrency_json, &Config::tenants, &Tenants::limits,
          &tenants::Limits::concurrency>(
        restart, "tenant_concurrency",
        {"SLUICE_TENANT_CONCURRENCY", "unset",
         "Optional: the requests one tenant (SLUICE_TENANT_KEY) may have in flight (1..1000000); "
         "one more is answered 429 tenant_limit until one of its requests ends."}),
    field<parse_tenant_rate, rate_json, &Config::tenants, &Tenants::limits>(
        restart, "tenant_rate",
        {"SLUICE_TENANT_RATE", "unset",
         "Optional: requests per second per tenant, as a token bucket: R or R:B (e.g. 50 or "
         "50:100; the bucket B is one second of R by default). A request without a token is "
         "answered 429 tenant_limit, Retry-After when the next token comes, with the IETF "
         "RateLimit and RateLimit-Policy fields; a request refused afterwards (level, lane) "
         "gets its token back."}),
    field<parse_tenant_weights, weights_json, &Config::tenants, &Tenants::weights>(
        restart, "tenant_weights",
        {"SLUICE_TENANT_WEIGHTS", "unset",
         "Optional: tenants' weights in their lanes' shares of slots, KEY=W;KEY=W (a key as "
         "requests "
         "carry it, or its hash as the access log shows it, #16 hex digits; W in 1..100: W times "
         "the slots of a tenant of weight 1 when both want more); a tenant not listed has 1. "
         "Check-config shows only the hashes."}),
    field<count_in<std::size_t, 16, 16'777'216>, as_is, &Config::tenants, &Tenants::table>(
        restart, "tenant_table",
        {"SLUICE_TENANT_TABLE", "65536",
         "The tenants whose limits are tracked at most (16..16777216); past it the least "
         "recently seen tenant with nothing in flight is forgotten (its bucket starts full "
         "again), counted in sluice_tenant_evictions_total."}),
    field<parse_redis_url, redis_json, &Config::redis>(
        restart, "redis_url",
        {"SLUICE_REDIS_URL", "unset",
         "redis://[[user]:password@]host[:port][/db] (port 6379 by default): tenants' rates "
         "(SLUICE_TENANT_RATE, routes' tenant_rate) become the fleet's, every instance counting "
         "its admissions locally and reconciling them with Redis off the request path every "
         "SLUICE_REDIS_INTERVAL. While Redis is slow or down no request waits on it: each "
         "instance holds each tenant to its share of the rate (the rate / the instances last "
         "seen). Check-config shows the password only as (set)."}),
    field<duration_in<10, 500>, format_duration, &Config::redis_interval>(
        restart, "redis_interval",
        {"SLUICE_REDIS_INTERVAL", "100ms",
         "How often an instance reconciles its tenants' counts with Redis (10ms..500ms: the "
         "counts are per second); also how long it waits for an answer before it falls back "
         "to its share."}),
    field<parse_on_off, on_off, &Config::fleet_capacity>(
        restart, "fleet_capacity",
        {"SLUICE_FLEET_CAPACITY", "on",
         "With SLUICE_REDIS_URL: the fleet shares each upstream's capacity (on, off). Each "
         "instance reports its requests in flight and its demand every SLUICE_REDIS_INTERVAL "
         "and holds the share it is given (max-min fair over demand; a share under one slot is "
         "a turn); a decrease anywhere reaches every instance at once. Redis silent for 3 "
         "intervals: each instance estimates alone, from its share. off: each instance "
         "estimates alone."}),
    estimate<parse_seed, as_is, &EstimatePolicy::seed>(
        restart, "bulkhead_seed",
        {"SLUICE_BULKHEAD_SEED", "4",
         "The capacity estimate an upstream starts from, for the whole process (every I/O thread "
         "shares it), before slow start grows it (1..100000)."}),
    estimate<parse_growth_interval, format_micros, &EstimatePolicy::growth_interval>(
        restart, "bulkhead_growth_interval",
        {"SLUICE_BULKHEAD_GROWTH_INTERVAL", "250ms",
         "Least time between two growths of an upstream's capacity estimate, and never faster than "
         "the upstream's baseline response time (at least 1ms)."}),
    estimate<parse_slow_factor, as_is, &EstimatePolicy::slow_factor>(
        restart, "bulkhead_slow_factor",
        {"SLUICE_BULKHEAD_SLOW_FACTOR", "4",
         "A response head this many times slower than its route's normal range (the route's mean "
         "and four mean deviations, and 50 ms more) is slow; two slow heads in one of the "
         "estimate's windows count as too much load and lower it; 0 turns this off, otherwise "
         "at least 1.5."}),
    field<parse_actions, admission::actions_text, &Config::admission, &Admission::actions,
          &admission::ActionsConfig::enabled>(
        live, "emergency_actions",
        {"SLUICE_EMERGENCY_ACTIONS", "none",
         "Seed 003's switch, off by default: what Sluice itself gives up once emergency (the "
         "process's level or an upstream's at 3) has lasted SLUICE_EMERGENCY_ACTIONS_AFTER, one "
         "per tick in this order: short_timeouts (client header and idle timeouts cut to a tenth, "
         "at least 1s), no_keepalive (Connection: close on every response), refuse_connections "
         "(new client connections closed at once while SLUICE_EMERGENCY_CONNECTION_FLOOR are "
         "open). Comma-separated, or none. All are undone in a tick of their own before the "
         "level steps down."}),
    field<parse_duration, format_duration, &Config::admission, &Admission::actions,
          &admission::ActionsConfig::after>(
        live, "emergency_actions_after",
        {"SLUICE_EMERGENCY_ACTIONS_AFTER", "5m",
         "How long emergency must last before the first emergency action applies (seed 003: "
         "five more minutes), and again after a restoration (0 allowed)."}),
    field<count_in<std::size_t, 0>, as_is, &Config::admission, &Admission::connection_floor>(
        live, "emergency_connection_floor",
        {"SLUICE_EMERGENCY_CONNECTION_FLOOR", "1000",
         "Client connections always accepted while refuse_connections is applied: above this "
         "many open, a new one is closed at once (sluice_emergency_connections_refused_total)."}),
    field<parse_close_statuses, statuses_json, &Config::admission, &Admission::close_statuses>(
        live, "close_statuses",
        {"SLUICE_CLOSE_STATUSES", "unset",
         "Comma-separated upstream response statuses that close the upstream: a refusal no load "
         "change cures, such as a quota 402 or 403 (each 400..599; not 429 or 503, which are load "
         "and only shrink the estimate); unset, no status closes an upstream."}),
    closure<parse_close_for, format_micros, &ClosurePolicy::close_for>(
        live, "close_for",
        {"SLUICE_CLOSE_FOR", "35m",
         "How long a status in SLUICE_CLOSE_STATUSES closes the upstream when the upstream gave no "
         "Retry-After or RateLimit-Reset (greater than 0, at most 24h)."}),
    closure<parse_probe_every, format_micros, &ClosurePolicy::probe_every>(
        live, "probe_every",
        {"SLUICE_PROBE_EVERY", "10s",
         "While an upstream is closed, one probe request is let through this often, and only while "
         "nothing runs on it; a probe that ends cleanly reopens the upstream (100ms..1h)."}),
    field<parse_on_off, on_off, &Config::admission, &Admission::delegation>(
        restart, "delegation",
        {"SLUICE_DELEGATION", "on",
         "on or off; on: each forwarded request carries a signed lease token (header "
         "X-Sluice-Lease), and a request that carries a live lease's token is seated at once on "
         "its "
         "parent's lane."}),
    secret<parse_lease_key, &Config::admission, &Admission::lease_key>(
        restart, "lease_key",
        {"SLUICE_LEASE_KEY", "generated at start",
         "32 hex digits (16 bytes), the key that signs lease tokens; set the same key on all "
         "instances only if tokens must verify across restarts. check-config shows it only as "
         "(set)."}),
    field<parse_pins_file, path_or_null, &Config::admission, &Admission::pins_file>(
        restart, "pins_file",
        {"SLUICE_PINS_FILE", "unset",
         "A JSON file of pins ({\"level\":N,\"ttl\":\"10m\",\"reason\":\"...\"} or {} for none), "
         "re-read when it changes; a missing or unreadable file acts as no pin."}),
    field<parse_tick_log, path_or_null, &Config::admission, &Admission::tick_log>(
        restart, "tick_log",
        {"SLUICE_TICK_LOG", "unset",
         "Append every tick's reading and decision to this file in the trace format `sluice "
         "replay` "
         "reads."}),
    field<parse_bool, as_is, &Config::debug_endpoints>(
        restart, "debug_endpoints",
        {"SLUICE_DEBUG_ENDPOINTS", "false",
         "true enables fault injection on the admin listener (POST /admin/debug/block stalls an "
         "I/O "
         "thread's event loop) for tests and game days; mutating calls still need the admin "
         "token."}),
};

static_assert(
    std::all_of(std::begin(kRows), std::end(kRows),
                [](const Row& r) {
                  bool shows_after =
                      r.shown_after.empty() ||
                      std::any_of(std::begin(kRows), std::end(kRows), [&](const Row& other) {
                        return !other.about.key.empty() && other.about.key == r.shown_after;
                      });
                  return (r.about.reload == Reload::live || r.about.reload == Reload::restart) &&
                         r.take && r.about.key.empty() == !r.show &&
                         r.about.secret == (r.same_secret != nullptr) && shows_after;
                }),
    "every row says live or restart, can be taken by a reload, and is shown under its key "
    "(a secret hidden) or not at all");

constexpr auto kVariables = [] {
  std::array<Variable, std::size(kRows)> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = kRows[i].about;
  return out;
}();

// Every row that is set in env, each on its own; errors name the variable.
void read_variables(const Env& env, Config& c, bool admission_only) {
  for (const Row& row : kRows) {
    if (!row.parse || (admission_only && !row.admission)) continue;
    const std::string* text = lookup(env, row.about.name);
    if (!text) continue;
    try {
      row.parse(c, *text, row.about);
    } catch (const std::logic_error& e) {  // invalid_argument and out_of_range
      throw ConfigError(std::string(row.about.name), e.what());
    }
  }
}

// The rules between variables, after every variable was read on its own: all in
// this one place.
// The variable a TLS load error is about.
std::string_view tls_variable(tls::Error::Part part, bool upstream) {
  switch (part) {
    case tls::Error::Part::key:
      return upstream ? "SLUICE_UPSTREAM_CLIENT_KEY" : "SLUICE_TLS_KEY";
    case tls::Error::Part::ciphers:
      return "SLUICE_TLS_CIPHERS";
    case tls::Error::Part::ciphersuites:
      return "SLUICE_TLS_CIPHERSUITES";
    case tls::Error::Part::ca:
      return "SLUICE_UPSTREAM_CA";
    case tls::Error::Part::cert:
    case tls::Error::Part::other:
      break;
  }
  return upstream ? "SLUICE_UPSTREAM_CLIENT_CERT" : "SLUICE_TLS_CERT";
}

// The certificate pairs, the listeners, and the upstreams' TLS: every file is
// loaded here once, so check-config and start-up refuse what would not work.
void load_tls(Config& c) {
  auto& t = c.tls;
  if (t.cert_files.size() != t.key_files.size())
    throw ConfigError(
        t.key_files.size() < t.cert_files.size() ? "SLUICE_TLS_KEY" : "SLUICE_TLS_CERT",
        std::to_string(t.cert_files.size()) + " certificate(s) in SLUICE_TLS_CERT and " +
            std::to_string(t.key_files.size()) +
            " key(s) in SLUICE_TLS_KEY; give one key per certificate, in the same "
            "order");
  t.pairs.clear();
  for (std::size_t i = 0; i < t.cert_files.size(); ++i)
    t.pairs.push_back({t.cert_files[i], t.key_files[i]});
  if (!c.plain_listener() && !t.on())
    throw ConfigError(
        "SLUICE_LISTEN",
        "off leaves no listener; set SLUICE_TLS_CERT and SLUICE_TLS_KEY for HTTPS, or "
        "give SLUICE_LISTEN an address");
  if (t.on()) {
    if (c.plain_listener() && t.listen == c.listen && t.listen.port != 0)
      throw ConfigError("SLUICE_TLS_LISTEN", t.listen.str() +
                                                 " is SLUICE_LISTEN's address too; give HTTPS its "
                                                 "own port, or SLUICE_LISTEN=off");
    try {
      tls::ServerContexts check(t.pairs, t.protocol, std::chrono::seconds(3600));
    } catch (const tls::Error& e) {
      throw ConfigError(std::string(tls_variable(e.part(), false)), e.what());
    }
  }
  const auto& u = c.upstream_tls;
  if (u.client.cert.empty() != u.client.key.empty())
    throw ConfigError(
        u.client.key.empty() ? "SLUICE_UPSTREAM_CLIENT_CERT" : "SLUICE_UPSTREAM_CLIENT_KEY",
        u.client.key.empty() ? "a client certificate needs its key: set "
                               "SLUICE_UPSTREAM_CLIENT_KEY too, or neither"
                             : "a client key needs its certificate: set "
                               "SLUICE_UPSTREAM_CLIENT_CERT too, or neither");
  bool any =
      std::any_of(c.upstreams.begin(), c.upstreams.end(), [](const Upstream& x) { return x.tls; });
  if (any || !u.ca_file.empty() || !u.client.cert.empty()) {
    try {
      tls::check_client_context({u.ca_file, u.client, tls::Protocol{}});
    } catch (const tls::Error& e) {
      throw ConfigError(std::string(tls_variable(e.part(), true)), e.what());
    }
  }
}

void apply_rules(const Env& env, Config& c, bool admission_only) {
  // A profile's values are defaults: each admission variable left unset takes
  // the profile's value, each one set overrides it.
  if (c.admission.profile == "sentinel") {
    Config profile;
    profile.admission.controller = ControllerConfig::sentinel();
    profile.admission.tick = Duration{60'000};
    for (const Row& row : kRows)
      if (row.admission && !lookup(env, row.about.name)) row.take(c, profile);
    // Not a variable: the profile alone selects how sustained pressure enters emergency.
    c.admission.controller.emergency_rule = profile.admission.controller.emergency_rule;
  }
  if (admission_only) return;

  // Off loopback, anyone who reaches the port could pin the level: the
  // listener refuses to bind there unless mutating calls need a token.
  if (c.admin_token.empty() && !c.admin_listen.is_loopback())
    throw ConfigError("SLUICE_ADMIN_LISTEN",
                      c.admin_listen.str() +
                          " is not loopback and SLUICE_ADMIN_TOKEN is unset; set "
                          "SLUICE_ADMIN_TOKEN (mutating admin calls then need it) or listen on "
                          "127.0.0.1");

  if (c.dns_ttl.max < c.dns_ttl.min)
    throw ConfigError("SLUICE_DNS_MAX_TTL", format_duration(c.dns_ttl.max) +
                                                " is below SLUICE_DNS_MIN_TTL (" +
                                                format_duration(c.dns_ttl.min) + ")");
  for (const auto& check : c.health_checks)
    if (std::none_of(c.upstreams.begin(), c.upstreams.end(),
                     [&](const Upstream& u) { return u.name == check.first; }))
      throw ConfigError("SLUICE_HEALTH_CHECKS",
                        "upstream " + in_quotes(check.first) + " is not in SLUICE_UPSTREAMS");

  load_tls(c);

  // SLUICE_ROUTES or SLUICE_ROUTES_FILE, not both, naming SLUICE_UPSTREAMS' upstreams.
  load_routes(env, c);
}

}  // namespace

std::span<const Variable> variables() { return kVariables; }

Admission load_admission(const Env& given) {
  refuse_unknown(given);
  const Env env = with_config_file(given);
  refuse_unknown(env);
  Config c;
  read_variables(env, c, true);
  apply_rules(env, c, true);
  return c.admission;
}

Env with_config_file(const Env& env) {
  const std::string* path = lookup(env, "SLUICE_CONFIG_FILE");
  if (!path) return env;
  if (path->empty())
    throw ConfigError("SLUICE_CONFIG_FILE",
                      "empty; give the path of a file of SLUICE_X=value lines");
  std::FILE* f = std::fopen(path->c_str(), "rb");
  if (!f)
    throw ConfigError("SLUICE_CONFIG_FILE",
                      "cannot read " + in_quotes(*path) + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  Env out = env;
  std::size_t line_no = 0;
  for (auto line : split(text, '\n')) {
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    auto eq = line.find('=');
    auto name = line.substr(0, eq);
    if (eq == std::string_view::npos || !name.starts_with("SLUICE_"))
      throw ConfigError("SLUICE_CONFIG_FILE", in_quotes(*path) + " line " +
                                                  std::to_string(line_no) + ": not SLUICE_X=value");
    if (name == "SLUICE_CONFIG_FILE")
      throw ConfigError("SLUICE_CONFIG_FILE", in_quotes(*path) + " line " +
                                                  std::to_string(line_no) +
                                                  ": a config file cannot name another");
    out[std::string(name)] = std::string(line.substr(eq + 1));
  }
  return out;
}

Config load(const Env& given) {
  refuse_unknown(given);
  const Env env = with_config_file(given);
  refuse_unknown(env);
  if (!lookup(env, "SLUICE_UPSTREAMS"))
    throw ConfigError("SLUICE_UPSTREAMS",
                      "required; e.g. SLUICE_UPSTREAMS=" + std::string(kUpstreamsExample));
  Config c;
  c.threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 256u));
  read_variables(env, c, false);
  apply_rules(env, c, false);
  return c;
}

std::string to_json(const Config& c) {
  Json j;
  // Table order, but for rows shown right after another one.
  auto show = [&](auto& self, const Row& row) -> void {
    j[std::string(row.about.key)] = row.show(c);
    for (const Row& next : kRows)
      if (next.shown_after == row.about.key) self(self, next);
  };
  for (const Row& row : kRows)
    if (row.show && row.shown_after.empty()) show(show, row);
  // A path is any bytes: one that is not UTF-8 prints with U+FFFD for its bad bytes.
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

Reloaded reload(const Config& running, const Config& next) {
  Reloaded out{running, {}, {}};
  for (const Row& row : kRows) {
    bool is_live = row.about.reload == Reload::live;
    if (is_live) row.take(out.config, next);
    if (!row.show) continue;  // SLUICE_ROUTES_FILE: what it holds is compared as routes
    bool same =
        row.same_secret ? row.same_secret(running, next) : row.show(running) == row.show(next);
    if (!same) (is_live ? out.live : out.restart).push_back(row.about.key);
  }
  return out;
}

std::string help_text() {
  constexpr std::size_t kWidth = 100;
  std::string out =
      "Usage: sluice [serve|check-config|healthcheck|replay [FILE|-]] [--help|--version]\n"
      "\n"
      "Sluice is an HTTP/1.1 reverse proxy that sorts requests into lanes (bulk, standard, heavy)\n"
      "and answers 503 with a measured Retry-After when its own pressure says to shed load.\n"
      "\n"
      "Commands:\n"
      "  serve            Run the proxy (the default when no command is given).\n"
      "  check-config     Validate the environment and print the effective configuration as JSON;\n"
      "                   exit 0, or exit 2 with the error on an invalid value.\n"
      "  healthcheck      Exit 0 when the local instance answers /healthz on the admin listener.\n"
      "  replay [FILE|-]  Run the admission controller offline over a tick trace (- reads "
      "standard\n"
      "                   input) and print one JSON line per tick, then a summary line.\n"
      "  simulate [--scenario burst|idle|isolation|step|review|all] [--model provider|mmc]\n"
      "           [--runs N] [--seed S] [--json]\n"
      "                   Run the policy simulator: the admission core on a virtual clock against\n"
      "                   a modelled upstream, beside other policies; one table per scenario.\n"
      "  --help           Print this text.\n"
      "  --version        Print the version.\n"
      "\n"
      "Environment (a bad value or an unknown SLUICE_ name stops start-up; durations take a unit:\n"
      "250ms, 5s, 2m, 1h; sizes are bytes or KiB, MiB, GiB; docs/configuration.md has the "
      "details):\n";
  for (const auto& v : kVariables) {
    out += "\n  ";
    out += v.name;
    out += "  (default: ";
    out += v.default_value;
    out += ")\n";
    std::string meaning(v.meaning);
    if (v.reload == Reload::live) meaning += " Reloads live.";
    wrap(out, meaning, 6, kWidth);
  }
  return out;
}

std::string reference_markdown() {
  std::string out =
      "# Configuration reference\n"
      "\n"
      "Generated from the variable table in `config/config.cpp` by `sluice config-reference`;\n"
      "a unit test in CI fails when this file and the table differ, so edit the table, not this\n"
      "file.\n"
      "\n"
      "Sluice reads its configuration at start-up from environment variables with the prefix\n"
      "`SLUICE_`. A bad value, or an unknown `SLUICE_` name (a typo), stops start-up with\n"
      "`sluice: config: SLUICE_X: <what is wrong and what would be valid>` and exit status 2.\n"
      "`sluice check-config` validates the environment and prints the effective configuration\n"
      "as JSON (the admin token and the lease key shown only as `(set)`). A reload (`SIGHUP`,\n"
      "or a change of `SLUICE_CONFIG_FILE` or `SLUICE_ROUTES_FILE`) puts the new value of a\n"
      "`live` variable in force at once; a `restart` variable keeps its value until the next\n"
      "start, and the reload lists it under `needs_restart`.\n"
      "\n"
      "| variable | default | reload | meaning |\n"
      "|---|---|---|---|\n";
  for (const auto& v : kVariables) {
    out += "| `";
    out += v.name;
    out += "` | ";
    if (is_literal_default(v.default_value)) {
      out += "`" + escape_cell(v.default_value) + "`";
    } else {
      out += escape_cell(v.default_value);
    }
    out += v.reload == Reload::live ? " | live | " : " | restart | ";
    out += escape_cell(v.meaning);
    out += " |\n";
  }
  out +=
      "\n"
      "## Durations\n"
      "\n"
      "A whole number followed by a unit: `ms`, `s`, `m` or `h` (`250ms`, `5s`, `2m`, `1h`).\n"
      "`0` may stand alone. A number without a unit (`10`), a fraction (`1.5s`) or a negative\n"
      "value is an error. Timeouts must be greater than zero; `SLUICE_DRAIN_DELAY` may be `0`.\n"
      "\n"
      "## Byte sizes\n"
      "\n"
      "A whole number of bytes, optionally with a binary unit: `KiB` (1024), `MiB` or `GiB`\n"
      "(`16384`, `16KiB`, `64MiB`, `1GiB`). Decimal units such as `KB` or `MB` are refused rather\n"
      "than guessed.\n"
      "\n"
      "## Upstreams\n"
      "\n"
      "`SLUICE_UPSTREAMS` lists the upstreams as `name=host:port[|host:port...]` entries\n"
      "separated by `;`, for example\n"
      "`SLUICE_UPSTREAMS=" +
      std::string(kUpstreamsExample) +
      "`.\n"
      "\n"
      "- A bare `host:port` (or `host:port|host:port`) names the upstream `default`.\n"
      "- Names use letters, digits, `_` and `-`, and are unique.\n"
      "- A host is an IPv4 address, a name resolved at start-up, or an IPv6 address in brackets\n"
      "  (`[::1]:9000`); ports are 1..65535.\n"
      "- The first upstream is where routes send requests unless they name another.\n"
      "\n"
      "## Routes\n"
      "\n"
      "`SLUICE_ROUTES` (inline) or `SLUICE_ROUTES_FILE` (a path, read at start-up) holds a JSON\n"
      "array of routes; set one, not both. Each request goes to the first route that matches; a\n"
      "request that matches none gets 404. Without either variable the built-in table applies:\n"
      "a route `sse` (requests that accept `text/event-stream` go to lane `heavy`) and a route\n"
      "`default` (everything else to lane `standard`), both to the first upstream.\n"
      "\n"
      "A route is a flat JSON object. Match fields are optional and all given ones must hold:\n"
      "\n"
      "| field | value | matches when |\n"
      "|---|---|---|\n"
      "| `prefix` | string starting with `/` | the path starts with it (not with `regex`) |\n"
      "| `regex` | [RE2](https://github.com/google/re2/wiki/Syntax) regular expression: no "
      "back-references or look-arounds, counts up to 1000 | it matches somewhere in the path, "
      "in time linear in its length (not with `prefix`) |\n"
      "| `methods` | non-empty array of methods | the method is one of them (written upper-case) "
      "|\n"
      "| `header` | `{\"name\": .., \"value\": ..}` | the header (name case-insensitive) has "
      "exactly this non-empty value |\n"
      "| `sse` | boolean | `true`: the request accepts `text/event-stream`; `false`: it does "
      "not |\n"
      "| `min_body_bytes` | non-negative integer | the request's Content-Length is at least this "
      "(a request without one, or chunked, counts as 0) |\n"
      "\n"
      "Action and naming fields:\n"
      "\n"
      "| field | value | default | meaning |\n"
      "|---|---|---|---|\n"
      "| `name` | non-empty string, unique | `route<index>` (from 0) | the route's name in logs "
      "and `/admin/state` |\n"
      "| `lane` | `bulk`, `standard` or `heavy` | `standard` | the admission lane |\n"
      "| `upstream` | an upstream name | the first upstream | where the request goes |\n"
      "| `alternatives` | array of other upstream names, each once | none | upstreams to fall "
      "back to |\n"
      "| `pin` | boolean | `false` | `true`: never fall back (not with `alternatives`) |\n"
      "| `retry_after` | `\"floor:cap\"` (ms, s or m; floor at least 1s) | the lane's band | the "
      "band of its refusals' Retry-After, in place of the lane's `SLUICE_RETRY_AFTER` (seed 000's "
      "`/logs` exception: `\"2s:4s\"`) |\n"
      "| `sse_keepalive` | a duration, 100ms..60m | none | an SSE stream's client gets a "
      "`: keep-alive` comment line after this long without a byte, before the first event and "
      "between events, never inside one (so a load balancer's idle cut on the path does not end "
      "a silent stream); the upstream's own silence is still cut at `SLUICE_SSE_IDLE_TIMEOUT` |\n"
      "| `first_event_timeout` | a duration, 100ms..60m | none | a request whose upstream sends "
      "no response head within this after the request went (an SSE response: no first event), "
      "before any byte went to the client, moves once to one of its `alternatives` (counted and "
      "logged with `fallback_why` `first_event`); with none open it is sent again to its own "
      "upstream. Its body goes again only when it was read whole before admission (16KiB) |\n"
      "| `tenant_key` | as `SLUICE_TENANT_KEY` (`\"header:X-Org-Id\"`, `\"client_ip\"`, "
      "`\"jwt:sub\"`, `\"none\"`) | `SLUICE_TENANT_KEY` | who its requests belong to |\n"
      "| `tenant_concurrency` | a count, 1..1000000 | none | a tenant's requests in flight on "
      "this route, counted apart from its other routes and on top of "
      "`SLUICE_TENANT_CONCURRENCY` (429 `tenant_limit` above) |\n"
      "| `tenant_rate` | `\"R\"` or `\"R:B\"`, as `SLUICE_TENANT_RATE` | none | a tenant's "
      "requests per second on this route, counted apart and on top of `SLUICE_TENANT_RATE` |\n"
      "\n"
      "Any other field is an error, and so is an empty array. Errors name the route's index and\n"
      "field, e.g. `SLUICE_ROUTES: route 1: field \"lane\": \"fast\" is not a lane; valid: bulk, "
      "standard, heavy`.\n"
      "\n"
      "Example:\n"
      "\n"
      "```json\n" +
      std::string(kRoutesExample) +
      "\n"
      "```\n";
  return out;
}

std::string reference_json() {
  Json out = Json::array();
  for (const auto& v : kVariables)
    out.push_back({{"name", std::string(v.name)},
                   {"default", std::string(v.default_value)},
                   {"reload", v.reload == Reload::live ? "live" : "restart"},
                   {"key", v.key.empty() ? Json(nullptr) : Json(std::string(v.key))},
                   {"secret", v.secret}});
  return out.dump(2);
}

}  // namespace sluice::config
