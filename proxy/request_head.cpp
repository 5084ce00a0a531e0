#include "proxy/request_head.hpp"

namespace sluice::proxy {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

bool iequals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

}  // namespace

bool has_obs_fold(std::string_view head) {
  for (std::size_t i = head.find('\n'); i != std::string_view::npos && i + 1 < head.size();
       i = head.find('\n', i + 1))
    if (head[i + 1] == ' ' || head[i + 1] == '\t') return true;
  return false;
}

int check_request(RequestParser& req, std::string_view& why) {
  auto& m = req.get();
  if (m.version() != 11 && m.version() != 10) {
    why = "http_version";
    return 505;
  }
  if (m.find(http::field::transfer_encoding) != m.end()) {
    // Chunked must be the final coding (else the length is unknowable: 400),
    // and the only one: Sluice re-chunks the body, so another coding before
    // it could not be passed on as it was (501). HTTP/1.0 has no chunking.
    if (!req.chunked() || m.version() != 11 ||
        m.count(http::field::transfer_encoding) != 1) {
      why = "transfer_encoding";
      return 400;
    }
    if (!iequals(m[http::field::transfer_encoding], "chunked")) {
      why = "transfer_coding";
      return 501;
    }
  }
  // Never two Hosts (RFC 9112 3.2), whatever the version: HTTP/1.0 goes upstream as 1.1.
  if (m.count(http::field::host) > 1 || (m.version() == 11 && m.count(http::field::host) != 1)) {
    why = "host";
    return 400;
  }
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

PassedFields append_request_fields(std::string& h, const RequestHead& m) {
  PassedFields passed;
  for (const auto& f : m) {
    if (f.name() == http::field::te) {
      for (const auto& coding : http::ext_list{f.value()})
        passed.trailers |= iequals(coding.first, "trailers");
      continue;
    }
    if (skip_field(m, f, false)) continue;
    auto name = f.name_string();
    if (iequals(name, "x-forwarded-for")) {
      passed.forwarded_for = true;
      continue;
    }
    // Sluice states these itself: a client's own never passes as truth.
    if (iequals(name, "x-forwarded-proto") || iequals(name, "x-request-id") ||
        iequals(name, "x-real-ip") || iequals(name, kLeaseHeader))
      continue;
    passed.has_host |= f.name() == http::field::host;
    append_field(h, name, f.value());
  }
  return passed;
}

}  // namespace sluice::proxy
