#pragma once
// TLS contexts over OpenSSL 3, held as Asio ssl::contexts (what an
// ssl::stream is built from):
//   - ServerContexts: the client listener's certificates, one context per
//     certificate and key pair, the first the default, the others chosen by the
//     name a client asks for (SNI) against each certificate's DNS names; TLS 1.2
//     and 1.3 only, no renegotiation, ALPN http/1.1, session tickets under
//     OpenSSL's own key, new with every set of contexts (so a rotation is a
//     rebuild: the proxy's Reloader).
//   - client_context(): the upstreams' context, verifying the peer against the
//     system's CA store (which honours SSL_CERT_FILE and SSL_CERT_DIR) or a
//     given bundle, with an optional client certificate; prepare_client() sets
//     the name a connection sends (SNI) and checks (hostname verification).
// Nothing here does I/O on a socket: the proxy's streams (proxy/stream.hpp) do.
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace boost::asio::ssl {
class context;
}
using SSL = struct ssl_st;
using SSL_SESSION = struct ssl_session_st;

namespace sluice::tls {

// Mozilla's "intermediate" TLS 1.2 list: forward secrecy and AEAD ciphers only.
inline constexpr std::string_view kDefaultCiphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
// OpenSSL's own TLS 1.3 list (every TLS 1.3 suite is an AEAD with forward secrecy).
inline constexpr std::string_view kDefaultCiphersuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

// A load failure: what() names the file and OpenSSL's reason; part() says
// which setting was wrong.
class Error : public std::runtime_error {
 public:
  enum class Part { cert, key, ciphers, ciphersuites, ca, other };
  Error(Part part, const std::string& what) : std::runtime_error(what), part_(part) {}
  Part part() const { return part_; }

 private:
  Part part_;
};

struct Pair {
  std::string cert;  // PEM: the certificate, then its chain
  std::string key;   // PEM private key
  bool operator==(const Pair&) const = default;
};

// Versions and ciphers, shared by both sides.
struct Protocol {
  std::string ciphers{kDefaultCiphers};            // TLS 1.2 (OpenSSL cipher list)
  std::string ciphersuites{kDefaultCiphersuites};  // TLS 1.3
  bool tls13_only = false;                         // TLS 1.3 only (else 1.2 and 1.3)
  bool operator==(const Protocol&) const = default;
};

// What a handshake on the client listener noted for the session to count
// (attach()): set by the SNI and info callbacks, on the I/O thread.
struct HandshakeNotes {
  bool sni_unknown = false;          // a name was asked for that no certificate holds
  bool done = false;                 // the first handshake finished
  std::uint32_t renegotiations = 0;  // handshakes a client started after it (refused)
};

// One served certificate, for the expiry metric and /admin/state.
struct Certificate {
  std::string file;
  std::string subject;                 // first DNS name, else the subject's CN
  std::vector<std::string> dns_names;  // lower case; "*.example.com" matches one label
  std::int64_t not_after = 0;          // Unix seconds
};

// The protocol a handshake agreed by ALPN: true for h2.
bool negotiated_h2(SSL* ssl);

class ServerContexts {
 public:
  // Loads every pair (throws Error naming the file and what is wrong). Session
  // tickets are good for `ticket_lifetime`, and only under these contexts: each
  // set has its own ticket key. ALPN offers h2 before http/1.1 when `h2`.
  ServerContexts(const std::vector<Pair>& pairs, const Protocol& protocol,
                 std::chrono::seconds ticket_lifetime, bool h2 = false);
  ~ServerContexts();
  ServerContexts(const ServerContexts&) = delete;
  ServerContexts& operator=(const ServerContexts&) = delete;

  // The context a connection's stream is built with: the first pair's. The
  // SNI callback moves a handshake to another pair's when the name asks for it.
  boost::asio::ssl::context& default_context() const { return *contexts_.front(); }
  const std::vector<Certificate>& certificates() const { return certs_; }
  // The index of the pair whose names hold `name`, or -1.
  int find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<boost::asio::ssl::context>> contexts_;
  std::vector<Certificate> certs_;
};

// The upstreams' client context: verify the peer (against `ca_file` when given,
// else the system's store), present `client` when given (mTLS).
struct ClientOptions {
  std::string ca_file;  // empty: the system's store
  Pair client;          // empty paths: none
  Protocol protocol;
};
std::unique_ptr<boost::asio::ssl::context> client_context(const ClientOptions& options);
// Builds one and drops it: throws what client_context would (check-config).
void check_client_context(const ClientOptions& options);

// Where a client connection keeps the session its server gives it (a TLS 1.3
// ticket arrives after the handshake), to resume the next connection with.
// Owned by one thread; must outlive the connections prepared with it.
class SessionSlot {
 public:
  SessionSlot() = default;
  SessionSlot(SessionSlot&& o) noexcept : session_(std::exchange(o.session_, nullptr)) {}
  SessionSlot& operator=(SessionSlot&&) = delete;
  ~SessionSlot();
  void set(SSL_SESSION* s);  // takes it over
  SSL_SESSION* get() const { return session_; }

 private:
  SSL_SESSION* session_ = nullptr;
};

// Before a connection's handshake: the name it sends (SNI, unless host is an
// address) and checks the certificate against, and where its sessions go (the
// one there now is resumed).
void prepare_client(SSL* ssl, const std::string& host, SessionSlot& sessions);

// Why a handshake failed, from its error and the SSL object: one of the
// counted reasons (see the metrics reference), and a readable detail.
struct Failure {
  std::string_view reason;  // http_request, protocol, no_shared_cipher, verify, truncated, other
  std::string detail;
};
Failure classify(int error_value, bool ssl_category, SSL* ssl);

// Where a server connection's callbacks note what the session counts; notes
// must outlive the connection.
void attach(SSL* ssl, HandshakeNotes& notes);

// Before a connection is freed without a TLS close (Sluice closes the socket):
// its session stays resumable when its handshake was done.
void closing(SSL* ssl);

// The protocol version a connection agreed on ("TLSv1.3").
std::string_view version(SSL* ssl);

}  // namespace sluice::tls
