#include "routes/routes.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace sluice::routes {
namespace {

using nlohmann::json;

constexpr std::string_view kValidFields =
    "name, prefix, regex, methods, header, sse, min_body_bytes, lane, upstream, alternatives, pin";
constexpr std::string_view kExample = R"([{"prefix":"/","lane":"standard"}])";

std::string in_quotes(std::string_view s) { return json(std::string(s)).dump(); }

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

[[noreturn]] void fail(std::size_t index, const std::string& what) {
  throw RouteError("route " + std::to_string(index) + ": " + what);
}

[[noreturn]] void fail(std::size_t index, std::string_view field, const std::string& what) {
  fail(index, "field " + in_quotes(field) + ": " + what);
}

// RFC 9110 token: what a method or a header name may be made of.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~";
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           kExtra.find(c) != std::string_view::npos;
  });
}

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

const std::string& string_field(const json& v, std::size_t index, std::string_view field,
                                std::string_view example) {
  if (!v.is_string())
    fail(index, field, v.dump() + " is not a string; e.g. " + std::string(example));
  return v.get_ref<const std::string&>();
}

bool bool_field(const json& v, std::size_t index, std::string_view field) {
  if (!v.is_boolean()) fail(index, field, v.dump() + " is not a boolean; valid: true, false");
  return v.get<bool>();
}

std::size_t upstream_index(const std::string& name, const std::vector<std::string>& upstreams,
                           std::size_t index, std::string_view field) {
  auto it = std::find(upstreams.begin(), upstreams.end(), name);
  if (it == upstreams.end())
    fail(index, field,
         in_quotes(name) + " is not a configured upstream; valid: " + join(upstreams));
  return static_cast<std::size_t>(it - upstreams.begin());
}

constexpr std::uint64_t kMaxRepetition = 1000;

// The largest number in a regex's {n}, {n,} or {n,m} counts and \\N
// back-references (any other escaped character is no number); the cap plus one
// when a number has more digits than the cap.
std::uint64_t largest_repetition(std::string_view re) {
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < re.size(); ++i) {
    bool backreference = re[i] == '\\' && i + 1 < re.size() && re[i + 1] >= '0' && re[i + 1] <= '9';
    if (re[i] == '\\' && !backreference) {
      ++i;
      continue;
    }
    if (re[i] != '{' && !backreference) continue;
    std::uint64_t n = 0;
    for (std::size_t j = i + 1; j < re.size() && ((re[j] >= '0' && re[j] <= '9') || re[j] == ','); ++j) {
      n = re[j] == ',' ? 0 : std::min(n * 10 + static_cast<std::uint64_t>(re[j] - '0'), kMaxRepetition + 1);
      largest = std::max(largest, n);
    }
  }
  return largest;
}

Route parse_route(const json& obj, std::size_t index, const std::vector<std::string>& upstreams) {
  if (!obj.is_object())
    fail(index,
         obj.dump() + " is not a JSON object; e.g. {\"prefix\":\"/\",\"lane\":\"standard\"}");

  Route r;
  r.name = "route" + std::to_string(index);
  const json* alternatives = nullptr;
  for (const auto& [key, v] : obj.items()) {
    if (key == "name") {
      r.name = string_field(v, index, key, "\"api\"");
      if (r.name.empty()) fail(index, key, "is empty; give a name such as \"api\"");
    } else if (key == "prefix") {
      r.prefix = string_field(v, index, key, "\"/v1/\"");
      // A path always starts with '/', so any other prefix could never match.
      if (r.prefix->empty() || r.prefix->front() != '/')
        fail(index, key, in_quotes(*r.prefix) + " does not start with '/'; e.g. \"/v1/\"");
    } else if (key == "regex") {
      r.regex_source = string_field(v, index, key, "\"^/v[0-9]+/chat\"");
      // std::regex unrolls a{n} n times, and overflows on a number past 2^63:
      // a path needs no number that large.
      if (auto n = largest_repetition(*r.regex_source); n > kMaxRepetition)
        fail(index, key,
             in_quotes(*r.regex_source) + " has a count or back-reference of " +
                 std::to_string(n) + "; at most " + std::to_string(kMaxRepetition));
      try {
        r.regex.emplace(*r.regex_source, std::regex::ECMAScript | std::regex::optimize);
      } catch (const std::regex_error& e) {
        fail(index, key,
             in_quotes(*r.regex_source) + " is not a valid ECMAScript regex (" + e.what() + ")");
      }
    } else if (key == "methods") {
      if (!v.is_array() || v.empty())
        fail(index, key,
             v.dump() + " is not a non-empty array of methods; e.g. [\"GET\",\"HEAD\"]");
      for (const auto& m : v) {
        if (!m.is_string() || !is_token(m.get_ref<const std::string&>()))
          fail(index, key, m.dump() + " is not a method; e.g. \"GET\", \"POST\"");
        r.methods.push_back(upper(m.get<std::string>()));
      }
    } else if (key == "header") {
      constexpr std::string_view kHeaderExample = R"({"name":"X-Tenant","value":"batch"})";
      if (!v.is_object() || v.size() != 2 || !v.contains("name") || !v.contains("value"))
        fail(index, key,
             v.dump() + " is not an object with exactly \"name\" and \"value\"; e.g. " +
                 std::string(kHeaderExample));
      const auto& name = v.at("name");
      const auto& value = v.at("value");
      if (!name.is_string() || !is_token(name.get_ref<const std::string&>()))
        fail(index, key, "name " + name.dump() + " is not a header name; e.g. \"X-Tenant\"");
      // An absent header reads as empty, so an empty value would match requests without it.
      if (!value.is_string() || value.get_ref<const std::string&>().empty())
        fail(index, key, "value " + value.dump() + " is not a non-empty string; e.g. \"batch\"");
      r.header = HeaderMatch{name.get<std::string>(), value.get<std::string>()};
    } else if (key == "sse") {
      r.sse = bool_field(v, index, key);
    } else if (key == "min_body_bytes") {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
        fail(index, key, v.dump() + " is not a non-negative integer; e.g. 1048576");
      r.min_body_bytes = v.get<std::uint64_t>();
    } else if (key == "lane") {
      const auto& s = string_field(v, index, key, "\"bulk\"");
      auto lane = admission::lane_from_string(s);
      if (!lane) fail(index, key, in_quotes(s) + " is not a lane; valid: bulk, standard, heavy");
      r.lane = *lane;
    } else if (key == "upstream") {
      const auto& s = string_field(v, index, key, in_quotes(upstreams.front()));
      r.upstream = upstream_index(s, upstreams, index, key);
    } else if (key == "alternatives") {
      alternatives = &v;  // checked after "upstream", whatever the key order
    } else if (key == "pin") {
      r.pin = bool_field(v, index, key);
    } else {
      fail(index,
           "unknown field " + in_quotes(key) + "; valid fields: " + std::string(kValidFields));
    }
  }

  if (alternatives) {
    constexpr std::string_view kField = "alternatives";
    if (!alternatives->is_array())
      fail(index, kField,
           alternatives->dump() + " is not an array of upstream names; e.g. [\"" +
               upstreams.back() + "\"]");
    for (const auto& a : *alternatives) {
      if (!a.is_string()) fail(index, kField, a.dump() + " is not an upstream name");
      std::size_t alt = upstream_index(a.get<std::string>(), upstreams, index, kField);
      if (alt == r.upstream)
        fail(index, kField,
             a.dump() + " is the route's own upstream; list only upstreams to fall back to");
      if (std::find(r.alternatives.begin(), r.alternatives.end(), alt) != r.alternatives.end())
        fail(index, kField, a.dump() + " is listed twice; list each upstream once");
      r.alternatives.push_back(alt);
    }
  }
  if (r.prefix && r.regex)
    fail(index, "fields \"prefix\" and \"regex\" are exclusive; use one of them");
  if (r.pin && !r.alternatives.empty())
    fail(index,
         "fields \"pin\" and \"alternatives\" are exclusive: a pinned route never falls back; "
         "drop one of them");
  return r;
}

}  // namespace

bool Route::matches(const RequestView& req) const {
  if (!methods.empty() && std::find(methods.begin(), methods.end(), req.method) == methods.end())
    return false;
  if (prefix && !req.path.starts_with(*prefix)) return false;
  if (sse && *sse != req.accepts_sse) return false;
  if (min_body_bytes && req.body_bytes < *min_body_bytes) return false;
  if (header) {
    // The lookup compares names case-insensitively (RequestView's contract).
    std::string_view value = req.header ? req.header(req.ctx, header->name) : std::string_view{};
    if (value != header->value) return false;
  }
  // Last: the only check that may cost more than a compare.
  if (regex && !std::regex_search(req.path.begin(), req.path.end(), *regex)) return false;
  return true;
}

Table Table::defaults() {
  Table t;
  Route sse;
  sse.name = "sse";
  sse.sse = true;
  sse.lane = admission::Lane::heavy;
  Route rest;
  rest.name = "default";
  rest.lane = admission::Lane::standard;
  t.routes_.push_back(std::move(sse));
  t.routes_.push_back(std::move(rest));
  return t;
}

Table Table::parse(std::string_view text, const std::vector<std::string>& upstream_names) {
  if (upstream_names.empty()) throw RouteError("routes: no upstreams to route to");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number too large (1e999)
    throw RouteError(std::string("invalid JSON: ") + e.what());
  }
  if (!doc.is_array())
    throw RouteError("routes: " + doc.dump() + " is not a JSON array of routes; e.g. " +
                     std::string(kExample));
  if (doc.empty())
    throw RouteError("routes: the array is empty, so nothing would be routed; e.g. " +
                     std::string(kExample));

  Table t;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    Route r = parse_route(doc[i], i, upstream_names);
    for (std::size_t j = 0; j < t.routes_.size(); ++j)
      if (t.routes_[j].name == r.name)
        fail(i, "name",
             in_quotes(r.name) + " is already the name of route " + std::to_string(j) +
                 "; names must be unique");
    t.routes_.push_back(std::move(r));
  }
  return t;
}

const Route* Table::match(const RequestView& req) const {
  for (const Route& r : routes_)
    if (r.matches(req)) return &r;
  return nullptr;
}

}  // namespace sluice::routes
