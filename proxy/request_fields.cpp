#include "proxy/request_fields.hpp"

#include <charconv>

#include "proxy/request_head.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

bool contains_ci(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return false;
  for (std::size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (iequals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

}  // namespace

std::uint16_t route_key(std::size_t route, boost::beast::http::verb method) {
  using boost::beast::http::verb;
  std::size_t kind = 3;
  if (method == verb::get || method == verb::head)
    kind = 0;
  else if (method == verb::post)
    kind = 1;
  else if (method == verb::put || method == verb::patch)
    kind = 2;
  return static_cast<std::uint16_t>((route * 4 + kind) & 0xffff);
}

const routes::Route* route_of(const routes::Table& table, const RequestParser& req,
                              std::string_view path) {
  const auto& m = req.get();
  routes::RequestView view;
  view.method = m.method_string();
  view.path = path;
  view.ctx = &m;
  view.header = [](const void* ctx, std::string_view name) -> std::string_view {
    const auto& msg = *static_cast<const RequestHead*>(ctx);
    auto it = msg.find(name);
    return it == msg.end() ? std::string_view{} : std::string_view(it->value());
  };
  if (auto accept = m.find(http::field::accept); accept != m.end())
    view.accepts_sse = contains_ci(accept->value(), "text/event-stream");
  if (auto len = req.content_length()) view.body_bytes = *len;
  return table.match(view);
}

int check_target(RequestHead& m, std::string_view& why) {
  auto target = m.target();
  if (target.starts_with("http://") || target.starts_with("https://")) {
    // absolute-form: the path goes upstream, the authority becomes Host.
    auto rest = target.substr(target.find("//") + 2);
    auto slash = rest.find('/');
    auto authority = rest.substr(0, slash);
    std::string path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
    m.set(http::field::host, authority);
    m.target(path);
  } else if (!target.starts_with('/') && !(target == "*" && m.method() == http::verb::options)) {
    why = "target";
    return 400;
  }
  return 0;
}

PassedFields append_request_fields(std::string& h, const RequestHead& m, bool own_host) {
  PassedFields passed;
  const HopFields hop(m);
  for (const auto& f : m) {
    if (f.name() == http::field::te) {
      for (const auto& coding : http::ext_list{f.value()})
        passed.trailers |= iequals(coding.first, "trailers");
      continue;
    }
    if (hop.skip(f, false)) continue;
    auto name = f.name_string();
    if (iequals(name, "x-forwarded-for")) {
      passed.forwarded_for = true;
      continue;
    }
    // Sluice states these itself: a client's own never passes as truth.
    if (iequals(name, "x-forwarded-proto") || iequals(name, "x-request-id") ||
        iequals(name, "x-real-ip") || iequals(name, kLeaseHeader))
      continue;
    if (f.name() == http::field::host && own_host) {
      append_field(h, "X-Forwarded-Host", f.value());  // Sluice states the upstream's Host
      continue;
    }
    passed.has_host |= f.name() == http::field::host;
    append_field(h, name, f.value());
  }
  return passed;
}

PassedFields append_upstream_head(std::string& h, const RequestParser& req, bool close_after,
                                  bool own_host) {
  const auto& m = req.get();
  h += m.method_string();
  h += ' ';
  h += m.target();
  h += " HTTP/1.1\r\n";
  auto passed = append_request_fields(h, m, own_host);
  if (passed.trailers) h += "TE: trailers\r\n";
  if (req.chunked()) {
    // The client's codings before chunked go on as they were applied (names
    // only; identity is no coding); chunked is Sluice's own.
    h += "Transfer-Encoding: ";
    for_each_coding(m, [&h](const head_detail::Coding& c) {
      if (iequals(c.name, "chunked") || iequals(c.name, "identity")) return;
      h += c.name;
      h += ", ";
    });
    h += "chunked\r\n";
  } else if (auto len = req.content_length()) {
    char n[24];
    h += "Content-Length: ";
    h.append(n, std::to_chars(n, n + sizeof n, *len).ptr);
    h += "\r\n";
  }
  if (req.upgrade()) {
    h += "Connection: upgrade\r\n";
    append_field(h, "Upgrade", m[http::field::upgrade]);
  } else if (close_after) {
    h += "Connection: close\r\n";
  }
  return passed;
}

void append_forwarding(std::string& h, const RequestHead& m, const PassedFields& passed,
                       const Forwarding& f) {
  if (!passed.has_host) append_field(h, "Host", f.default_host);
  h += "X-Forwarded-For: ";
  if (passed.forwarded_for && !f.replace_forwarded_for)
    for (const auto& field : m)
      if (iequals(field.name_string(), "x-forwarded-for")) {
        h += field.value();
        h += ", ";
      }
  h += f.client;
  h += "\r\nX-Real-IP: ";
  h += f.client;
  h += f.https ? "\r\nX-Forwarded-Proto: https\r\n" : "\r\nX-Forwarded-Proto: http\r\n";
  if (!f.lease_token.empty()) append_field(h, kLeaseHeader, f.lease_token);
  h += "X-Request-Id: ";
  h += f.request_id;
  h += "\r\n\r\n";
}

}  // namespace sluice::proxy
