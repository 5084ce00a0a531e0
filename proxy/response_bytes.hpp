#pragma once
// An HTTP/1.1 response as a Session writes it to an HTTP/2 stream, read back
// for HEADERS and DATA: each head whole (interim 1xx heads first), then the
// body without its framing (Content-Length, chunked, or to the close).
//
// The bytes are Sluice's own: the upstream's fields passed Beast's parser
// before the Session wrote them, and the rest (status line, framing, its own
// fields) Sluice wrote itself. So this reads that shape only, in one pass and
// without a field table: the head's lines are handed over as they are, and
// only the framing fields are looked at. Anything else is an error.
//
// Pure: no I/O; the bytes may come split anywhere.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::proxy {

class ResponseBytes {
 public:
  struct Head {
    unsigned status = 0;
    std::string_view reason;
    std::string_view fields;  // "Name: value\r\n" lines, the blank line excluded
    bool body = false;        // body bytes follow (a final head only)
  };

  static constexpr std::size_t kMaxHead = 1u << 20;

  // `head_request`: the response to a HEAD has no body whatever its fields say.
  explicit ResponseBytes(bool head_request) : head_request_(head_request) {}

  // Takes the next bytes. Each head goes to on_head(const Head&) as it is
  // whole (returning false from it stops with an error); body bytes are
  // appended to `body`. False when the bytes are not a response of the shape
  // above. Bytes after the response ends are not taken (not this stream's).
  template <class OnHead>
  bool feed(std::string_view bytes, std::string& body, OnHead&& on_head) {
    while (!bytes.empty() && state_ != State::done) {
      if (state_ == State::head) {
        Head h;
        const std::size_t used = take_head(bytes, h);
        if (used == kError) return false;
        bytes.remove_prefix(used);
        if (h.status == 0) return true;  // not whole yet: kept
        if (!on_head(static_cast<const Head&>(h))) return false;
        if (!pending_.empty()) pending_.clear();
        continue;
      }
      if (!take_body(bytes, body)) return false;
    }
    return true;
  }

  // The writer ended: a body delimited by the close is whole.
  void eof() {
    if (state_ == State::to_close) state_ = State::done;
  }
  bool done() const { return state_ == State::done; }
  // A final head was taken (what follows is its body).
  bool final_head() const { return state_ != State::head; }

  // Calls f(name, value) for each line of Head::fields, the value without the
  // whitespace around it.
  template <class F>
  static void for_each_field(std::string_view fields, F&& f) {
    while (!fields.empty()) {
      const auto eol = fields.find("\r\n");
      const auto line = fields.substr(0, eol);
      fields.remove_prefix(eol == std::string_view::npos ? fields.size() : eol + 2);
      const auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      f(line.substr(0, colon), trim(line.substr(colon + 1)));
    }
  }

 private:
  enum class State {
    head,
    length,
    chunk_size,
    chunk_ext,
    chunk_size_lf,
    chunk_data,
    chunk_cr,
    chunk_lf,
    trailer,
    trailer_lf,
    to_close,
    done
  };
  static constexpr std::size_t kError = ~std::size_t{0};

  static std::string_view trim(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  }
  // A head from bytes (and what was kept of it): the bytes used, kError, or
  // all of them with h.status 0 while it is not whole.
  std::size_t take_head(std::string_view bytes, Head& h);
  bool take_body(std::string_view& bytes, std::string& body);

  bool head_request_;
  State state_ = State::head;
  std::string pending_;          // a head's first bytes, when it came split
  std::uint64_t remaining_ = 0;  // of the Content-Length, or of the chunk
  bool digits_ = false;          // the chunk size line has its digits
  bool line_empty_ = true;       // a trailer line so far has no bytes
};

}  // namespace sluice::proxy
