#pragma once
// A client's request head once check_request_head (proxy/request_head.hpp) has
// let it through: its target's form, and the fields that go upstream. Pure
// functions over the parsed message, so the session and the fuzz target
// (fuzz/request_head.cpp) run the same code.
//
// Threading: no state; any thread.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <memory_resource>
#include <string>
#include <string_view>

#include "routes/routes.hpp"

namespace sluice::proxy {

// Heads are parsed into a per-session arena; bodies are relayed, never kept.
using HeadAlloc = std::pmr::polymorphic_allocator<char>;
using RequestParser =
    boost::beast::http::request_parser<boost::beast::http::buffer_body, HeadAlloc>;
using RequestHead = RequestParser::value_type;

inline constexpr std::string_view kLeaseHeader = "X-Sluice-Lease";

// The route a checked request takes (first match): its method, its path (the
// target before any '?'), its fields, whether it accepts SSE, its body length.
const routes::Route* route_of(const routes::Table& table, const RequestParser& req,
                              std::string_view path);

// A request's route and method as one key (Seat::route): its answers are
// judged against the baseline of its route and kind of method (GET and HEAD,
// POST, PUT and PATCH, the rest), an upload's apart from a read's.
std::uint16_t route_key(std::size_t route, boost::beast::http::verb method);

// The target's form (framing and bytes are check_request_head's): origin-form,
// absolute-form (rewritten to origin-form, its authority as Host), or
// `OPTIONS *`. Returns 0 when the request may go on, else 400 with `why`.
int check_target(RequestHead& m, std::string_view& why);

// Fields that never pass through: hop-by-hop ones, those the message's
// Connection header names, and the framing Sluice states itself. The
// Connection fields are found once for the message, not once per field.
template <class Message>
class HopFields {
 public:
  explicit HopFields(const Message& m)
      : end_(m.end()), connection_(m.find(boost::beast::http::field::connection)) {}

  bool skip(const typename Message::fields_type::value_type& f, bool keep_upgrade) const {
    namespace http = boost::beast::http;
    switch (f.name()) {
      case http::field::connection:
      case http::field::upgrade:
        return !keep_upgrade;
      case http::field::keep_alive:
      case http::field::proxy_connection:
      case http::field::te:
      case http::field::trailer:
      case http::field::transfer_encoding:
      case http::field::proxy_authenticate:
      case http::field::proxy_authorization:
      case http::field::content_length:
      case http::field::expect:
        return true;
      default:
        break;
    }
    for (auto it = connection_; it != end_ && it->name() == http::field::connection; ++it)
      for (auto token : http::token_list{it->value()})
        if (boost::beast::iequals(token, f.name_string())) return true;
    return false;
  }

 private:
  typename Message::const_iterator end_;
  typename Message::const_iterator connection_;
};

inline void append_field(std::string& h, std::string_view name, std::string_view value) {
  h += name;
  h += ": ";
  h += value;
  h += "\r\n";
}

// What append_request_fields left for the caller to state.
struct PassedFields {
  bool forwarded_for = false;  // the client sent X-Forwarded-For (joined by the caller)
  bool has_host = false;
  bool trailers = false;  // the client accepts trailers (its TE, cut to that)
};

// Appends the client's fields that go upstream as "Name: value\r\n" lines: not
// those HopFields drops, nor TE, nor the ones Sluice states itself (the
// X-Forwarded-*, X-Real-IP, X-Request-Id and lease fields).
PassedFields append_request_fields(std::string& h, const RequestHead& m, bool own_host = false);

// Appends the head of the request as it goes upstream, up to the fields Sluice
// adds about the client: the request line (always HTTP/1.1), the client's fields
// (append_request_fields), then the framing Sluice states itself: `TE: trailers`,
// Transfer-Encoding (the client's codings before chunked, then chunked) or
// Content-Length, and `Connection: upgrade` with Upgrade, or `Connection: close`
// when `close_after`. Returns what the caller still states: a Host when the
// client sent none, the X-Forwarded-For it joins.
// With `own_host` (an https:// upstream: it is reached by its name) the
// client's Host goes as X-Forwarded-Host and the caller states the upstream's.
PassedFields append_upstream_head(std::string& h, const RequestParser& req, bool close_after,
                                  bool own_host = false);

// What Sluice states about the client after append_upstream_head, ending the head.
struct Forwarding {
  std::string_view default_host;       // Host, when the client sent none (or own_host)
  std::string_view client;             // the connecting address
  bool replace_forwarded_for = false;  // Sluice is the edge: the client's X-Forwarded-For goes
  std::string_view lease_token;        // X-Sluice-Lease, when the request holds a lease slot
  std::string_view request_id;
  bool https = false;  // the client came over TLS (X-Forwarded-Proto)
};
// Host when the client sent none, X-Forwarded-For (the client's joined with its
// address, or the address alone), X-Real-IP and X-Forwarded-Proto, the lease
// token, X-Request-Id and the blank line.
void append_forwarding(std::string& h, const RequestHead& m, const PassedFields& passed,
                       const Forwarding& f);

}  // namespace sluice::proxy
