#include "proxy/response_bytes.hpp"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <charconv>
#include <limits>

namespace sluice::proxy {

namespace beast = boost::beast;

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::size_t ResponseBytes::take_head(std::string_view bytes, Head& h) {
  constexpr std::string_view kEnd = "\r\n\r\n";
  std::string_view head;
  std::size_t used = 0;
  if (pending_.empty()) {
    const auto end = bytes.find(kEnd);
    if (end == std::string_view::npos) {
      if (bytes.size() > kMaxHead) return kError;
      pending_.assign(bytes);
      return bytes.size();
    }
    head = bytes.substr(0, end + 2);
    used = end + kEnd.size();
  } else {
    const std::size_t before = pending_.size();
    pending_.append(bytes);
    const auto end = pending_.find(kEnd, before >= 3 ? before - 3 : 0);
    if (end == std::string::npos) return pending_.size() > kMaxHead ? kError : bytes.size();
    head = std::string_view(pending_).substr(0, end + 2);
    used = end + kEnd.size() - before;
  }
  if (head.size() > kMaxHead) return kError;

  // "HTTP/1.1 200 OK": the status line Sluice writes (the reason may be empty,
  // its space may not).
  const auto eol = head.find("\r\n");
  const auto line = head.substr(0, eol);
  if (line.size() < 13 || !line.starts_with("HTTP/1.") || line[8] != ' ' || line[12] != ' ')
    return kError;
  unsigned status = 0;
  for (std::size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return kError;
    status = status * 10 + static_cast<unsigned>(line[i] - '0');
  }
  if (status < 100) return kError;
  h.reason = line.substr(13);
  h.fields = head.substr(eol + 2);

  std::optional<std::uint64_t> length;
  bool chunked = false, bad = false;
  for_each_field(h.fields, [&](std::string_view name, std::string_view value) {
    if (beast::iequals(name, "content-length")) {
      std::uint64_t n = 0;
      const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (err != std::errc{} || end != value.data() + value.size() || (length && *length != n))
        bad = true;
      length = n;
    } else if (beast::iequals(name, "transfer-encoding")) {
      if (!beast::iequals(value, "chunked") || chunked) bad = true;
      chunked = true;
    }
  });
  if (bad) return kError;

  h.status = status;
  if (status < 200) return used;  // interim: the final head follows
  if (head_request_ || status == 204 || status == 304 || (!chunked && length && *length == 0)) {
    state_ = State::done;
  } else if (chunked) {
    state_ = State::chunk_size;
    remaining_ = 0;
    digits_ = false;
  } else if (length) {
    state_ = State::length;
    remaining_ = *length;
  } else {
    state_ = State::to_close;
  }
  h.body = state_ != State::done;
  return used;
}

bool ResponseBytes::take_body(std::string_view& bytes, std::string& body) {
  switch (state_) {
    case State::length:
    case State::chunk_data: {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, bytes.size()));
      body.append(bytes.data(), n);
      bytes.remove_prefix(n);
      remaining_ -= n;
      if (remaining_ == 0) state_ = state_ == State::length ? State::done : State::chunk_cr;
      return true;
    }
    case State::to_close:
      body.append(bytes);
      bytes = {};
      return true;
    default:
      break;
  }
  // Framing, a byte at a time: a chunk's size line, the CRLF after its data,
  // the trailer lines after the last one.
  const char c = bytes.front();
  bytes.remove_prefix(1);
  switch (state_) {
    case State::chunk_size:
      if (const int d = hex(c); d >= 0) {
        if (remaining_ > (std::numeric_limits<std::uint64_t>::max() >> 4)) return false;
        remaining_ = remaining_ * 16 + static_cast<std::uint64_t>(d);
        digits_ = true;
        return true;
      }
      if (!digits_) return false;
      if (c == '\r') {
        state_ = State::chunk_size_lf;
        return true;
      }
      if (c != ';' && c != ' ' && c != '\t') return false;
      state_ = State::chunk_ext;
      return true;
    case State::chunk_ext:
      if (c == '\r') state_ = State::chunk_size_lf;
      return c != '\n';
    case State::chunk_size_lf:
      if (c != '\n') return false;
      state_ = remaining_ == 0 ? State::trailer : State::chunk_data;
      line_empty_ = true;
      return true;
    case State::chunk_cr:
      state_ = State::chunk_lf;
      return c == '\r';
    case State::chunk_lf:
      state_ = State::chunk_size;
      remaining_ = 0;
      digits_ = false;
      return c == '\n';
    case State::trailer:
      if (c == '\r')
        state_ = State::trailer_lf;
      else
        line_empty_ = false;
      return c != '\n';
    case State::trailer_lf:
      if (c != '\n') return false;
      state_ = line_empty_ ? State::done : State::trailer;
      line_empty_ = true;
      return true;
    default:
      return false;
  }
}

}  // namespace sluice::proxy
