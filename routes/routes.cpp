#include "routes/routes.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace sluice::routes {
namespace {

using nlohmann::json;

constexpr std::string_view kValidFields =
    "name, prefix, regex, methods, header, sse, min_body_bytes, lane, upstream, alternatives, pin, "
    "retry_after, sse_keepalive, first_event_timeout, tenant_key, tenant_concurrency, "
    "tenant_rate";
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

// "250ms", "2s", "1m": a whole number and its unit.
std::optional<admission::Millis> duration_of(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9) return std::nullopt;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < digits; ++i) n = n * 10 + (text[i] - '0');
  std::string_view unit = text.substr(digits);
  if (unit == "ms") return admission::Millis{n};
  if (unit == "s") return admission::Millis{n * 1000};
  if (unit == "m") return admission::Millis{n * 60'000};
  return std::nullopt;
}

admission::RetryBand band_field(const json& v, std::size_t index, std::string_view field) {
  const auto& s = string_field(v, index, field, "\"2s:4s\"");
  auto colon = s.find(':');
  std::string_view text(s);
  auto floor = duration_of(text.substr(0, colon));
  auto cap = colon == std::string::npos ? std::nullopt : duration_of(text.substr(colon + 1));
  if (!floor || !cap)
    fail(index, field, in_quotes(s) + " is not floor:cap (ms, s or m); e.g. \"2s:4s\"");
  if (*floor < admission::Millis{1000})
    fail(index, field,
         in_quotes(s) + ": the floor must be at least 1s (Retry-After is whole seconds)");
  if (*cap < *floor) fail(index, field, in_quotes(s) + ": the cap is below the floor");
  return {*floor, *cap};
}

std::size_t upstream_index(const std::string& name, const std::vector<std::string>& upstreams,
                           std::size_t index, std::string_view field) {
  auto it = std::find(upstreams.begin(), upstreams.end(), name);
  if (it == upstreams.end())
    fail(index, field,
         in_quotes(name) + " is not a configured upstream; valid: " + join(upstreams));
  return static_cast<std::size_t>(it - upstreams.begin());
}

// What one route regex may hold: RE2 compiles it to a program and caches DFA
// states within this budget (a search past it falls back to RE2's NFA, still
// linear in the path). 1 MiB holds some 60,000 instructions, more than any path needs.
constexpr std::int64_t kRegexMaxMem = 1 << 20;

// Compiles a route's regex, or refuses it saying what is wrong in the route's terms.
std::shared_ptr<const re2::RE2> compile_regex(const std::string& source, std::size_t index) {
  constexpr std::string_view kField = "regex";
  RE2::Options options;
  options.set_encoding(RE2::Options::EncodingLatin1);  // byte by byte, as the path is
  options.set_never_capture(true);                     // match() only asks whether it matches
  options.set_log_errors(false);                       // a refusal is a RouteError, not stderr
  options.set_max_mem(kRegexMaxMem);
  auto re = std::make_shared<const re2::RE2>(source, options);
  if (re->ok()) return re;
  const std::string& arg = re->error_arg();
  const std::string what = in_quotes(source);
  const std::string none =
      "; route regexes are RE2, which has none (it matches in time linear in the path)";
  switch (re->error_code()) {
    case RE2::ErrorBadEscape:
      if (arg.size() == 2 && arg[1] >= '1' && arg[1] <= '9')
        fail(index, kField, what + " has a back-reference (" + arg + ")" + none);
      break;
    case RE2::ErrorBadPerlOp:
      if (arg == "(?=" || arg == "(?!")
        fail(index, kField, what + " has a look-ahead (" + arg + ")" + none);
      break;
    case RE2::ErrorRepeatSize:
      fail(index, kField,
           what + " repeats more than 1000 times at " + arg +
               " (counts inside counts multiply); at most 1000");
    case RE2::ErrorPatternTooLarge:
      fail(index, kField,
           what + " is too large once compiled (over " + std::to_string(kRegexMaxMem >> 20) +
               " MiB); use smaller counts or fewer alternatives");
    default:
      break;
  }
  fail(index, kField, what + " is not a valid RE2 regex (" + re->error() + ")");
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
      r.regex = compile_regex(*r.regex_source, index);
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
    } else if (key == "retry_after") {
      r.retry_after = band_field(v, index, key);
    } else if (key == "sse_keepalive") {
      const auto& text = string_field(v, index, key, "\"15s\"");
      auto d = duration_of(text);
      if (!d || *d < admission::Millis{100} || *d > admission::Millis{3'600'000})
        fail(index, key,
             in_quotes(text) + " is not a duration in 100ms..60m (ms, s or m); e.g. \"15s\"");
      r.sse_keepalive = *d;
    } else if (key == "first_event_timeout") {
      const auto& text = string_field(v, index, key, "\"10s\"");
      auto d = duration_of(text);
      if (!d || *d < admission::Millis{100} || *d > admission::Millis{3'600'000})
        fail(index, key,
             in_quotes(text) + " is not a duration in 100ms..60m (ms, s or m); e.g. \"10s\"");
      r.first_event_timeout = *d;
    } else if (key == "tenant_concurrency") {
      if (!v.is_number_unsigned() || v.get<std::uint64_t>() < 1 ||
          v.get<std::uint64_t>() > 1'000'000)
        fail(index, key, v.dump() + " is not a count of requests in 1..1000000; e.g. 10");
      r.tenant_limits.concurrency = v.get<std::uint32_t>();
    } else if (key == "tenant_rate") {
      const auto& text = string_field(v, index, key, "\"50\" or \"50:100\"");
      try {
        auto l = tenants::parse_rate(text);
        r.tenant_limits.rate = l.rate;
        r.tenant_limits.burst = l.burst;
      } catch (const std::invalid_argument& e) {
        fail(index, key, e.what());
      }
    } else if (key == "tenant_key") {
      const auto& text = string_field(v, index, key, "\"header:X-Api-Key\"");
      try {
        r.tenant_key = tenants::parse_key(text);
      } catch (const std::invalid_argument& e) {
        fail(index, key, e.what());
      }
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
  if (r.tenant_limits.on()) r.tenant_scope = tenants::hash(r.name);
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
  if (regex && !RE2::PartialMatch(re2::StringPiece(req.path.data(), req.path.size()), *regex))
    return false;
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
