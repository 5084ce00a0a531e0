#include "tls/tls.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/ssl/context.hpp>
#include <cstring>
#include <ctime>

namespace sluice::tls {

namespace ssl = boost::asio::ssl;

namespace {

// Our pointer on OpenSSL's connections (Asio keeps its own in the app data slot).
int ssl_slot() {
  static const int slot = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return slot;
}

// OpenSSL's last queued error as text (the queue emptied), or `fallback`.
std::string openssl_error(std::string_view fallback) {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    const char* reason = ERR_reason_error_string(e);
    out = reason != nullptr ? reason : buf;
  }
  return out.empty() ? std::string(fallback) : out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_address(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::int64_t unix_seconds(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<std::int64_t>(timegm(&tm));
}

Certificate describe(X509* x, const std::string& file) {
  Certificate c;
  c.file = file;
  c.not_after = unix_seconds(X509_get0_notAfter(x));
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (names != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (n->type != GEN_DNS) continue;
      const auto* s = n->d.dNSName;
      c.dns_names.push_back(lower({reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                   static_cast<std::size_t>(ASN1_STRING_length(s))}));
    }
    GENERAL_NAMES_free(names);
  }
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof cn) < 0)
    cn[0] = '\0';
  // Without DNS names a client matches the CN (old certificates): so does SNI.
  if (c.dns_names.empty() && cn[0] != '\0') c.dns_names.push_back(lower(cn));
  c.subject = c.dns_names.empty() ? std::string(cn) : c.dns_names.front();
  return c;
}

bool name_matches(std::string_view pattern, std::string_view name) {
  if (pattern == name) return true;
  // "*.example.com" matches exactly one label before ".example.com".
  if (pattern.size() > 2 && pattern.starts_with("*.")) {
    auto suffix = pattern.substr(1);
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) return false;
    auto label = name.substr(0, name.size() - suffix.size());
    return label.find('.') == std::string_view::npos;
  }
  return false;
}

void apply_protocol(SSL_CTX* ctx, const Protocol& p, std::string_view who) {
  SSL_CTX_set_min_proto_version(ctx, p.tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION);
  // No renegotiation (a client-started one gets a no_renegotiation alert), no
  // compression; a peer that closes without close_notify ends its stream (the
  // HTTP framing says whether anything was cut).
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
  // A connection idle between requests keeps no 16 KiB read and write buffers.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_set_cipher_list(ctx, p.ciphers.c_str()) != 1)
    throw Error(Error::Part::ciphers,
                std::string(who) + ": cipher list \"" + p.ciphers +
                    "\" has no cipher OpenSSL knows: " + openssl_error("no cipher"));
  if (SSL_CTX_set_ciphersuites(ctx, p.ciphersuites.c_str()) != 1)
    throw Error(Error::Part::ciphersuites,
                std::string(who) + ": TLS 1.3 ciphersuites \"" + p.ciphersuites +
                    "\" are not valid: " + openssl_error("no ciphersuite"));
}

// The server's preference, first to last: h2 (when offered), then http/1.1.
constexpr unsigned char kWithH2[] = "\x02h2\x08http/1.1";
constexpr unsigned char kHttp11[] = "\x08http/1.1";

int on_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
            unsigned int inlen, void* arg) {
  const bool h2 = arg != nullptr;
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, h2 ? kWithH2 : kHttp11,
                            h2 ? sizeof kWithH2 - 1 : sizeof kHttp11 - 1, in,
                            inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;  // nothing in common: no ALPN, HTTP/1.1 all the same
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

void on_info(const SSL* s, int where, int) {
  if ((where & SSL_CB_HANDSHAKE_START) == 0) return;
  auto* notes = static_cast<HandshakeNotes*>(SSL_get_ex_data(s, ssl_slot()));
  if (notes != nullptr && notes->done) ++notes->renegotiations;
}

}  // namespace

bool negotiated_h2(SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  SSL_get0_alpn_selected(ssl, &p, &n);
  return n == 2 && p[0] == 'h' && p[1] == '2';
}

ServerContexts::ServerContexts(const std::vector<Pair>& pairs, const Protocol& protocol,
                               std::chrono::seconds ticket_lifetime, bool h2) {
  if (pairs.empty()) throw Error(Error::Part::cert, "no certificate given");
  for (const auto& pair : pairs) {
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* native = ctx->native_handle();
    ERR_clear_error();
    apply_protocol(native, protocol, pair.cert);
    if (SSL_CTX_use_certificate_chain_file(native, pair.cert.c_str()) != 1)
      throw Error(Error::Part::cert, pair.cert + ": cannot use as a certificate chain: " +
                                         openssl_error("not a PEM certificate"));
    if (SSL_CTX_use_PrivateKey_file(native, pair.key.c_str(), SSL_FILETYPE_PEM) != 1)
      throw Error(Error::Part::key,
                  pair.key + ": cannot use as a private key: " + openssl_error("not a PEM key"));
    if (SSL_CTX_check_private_key(native) != 1)
      throw Error(Error::Part::key, pair.key + ": does not match " + pair.cert + ": " +
                                        openssl_error("key and certificate differ"));
    // No session cache shared by the threads: tickets carry resumption.
    SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(native, 1);
    SSL_CTX_set_timeout(native, static_cast<long>(ticket_lifetime.count()));
    // Any non-null argument says h2 is offered (the callback reads no more of it).
    SSL_CTX_set_alpn_select_cb(native, on_alpn, h2 ? this : nullptr);
    SSL_CTX_set_info_callback(native, on_info);
    certs_.push_back(describe(SSL_CTX_get0_certificate(native), pair.cert));
    contexts_.push_back(std::move(ctx));
  }
  // SNI: the default context's callback moves the handshake to the pair that
  // holds the name; an unknown name keeps the default (and is noted).
  SSL_CTX* first = contexts_.front()->native_handle();
  SSL_CTX_set_tlsext_servername_arg(first, this);
  SSL_CTX_set_tlsext_servername_callback(
      first, +[](SSL* s, int*, void* arg) -> int {
        const char* name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
        if (name == nullptr) return SSL_TLSEXT_ERR_OK;
        auto* self = static_cast<ServerContexts*>(arg);
        int i = self->find(name);
        if (i < 0) {
          if (auto* notes = static_cast<HandshakeNotes*>(SSL_get_ex_data(s, ssl_slot())))
            notes->sni_unknown = true;
          return SSL_TLSEXT_ERR_OK;
        }
        if (i > 0)
          SSL_set_SSL_CTX(s, self->contexts_[static_cast<std::size_t>(i)]->native_handle());
        return SSL_TLSEXT_ERR_OK;
      });
}

ServerContexts::~ServerContexts() = default;

int ServerContexts::find(std::string_view name) const {
  auto wanted = lower(name);
  for (std::size_t i = 0; i < certs_.size(); ++i)
    for (const auto& pattern : certs_[i].dns_names)
      if (name_matches(pattern, wanted)) return static_cast<int>(i);
  return -1;
}

std::unique_ptr<ssl::context> client_context(const ClientOptions& o) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  apply_protocol(native, o.protocol, "upstream TLS");
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, o.ca_file.c_str(), nullptr) != 1)
      throw Error(Error::Part::ca, o.ca_file + ": cannot load as CA certificates: " +
                                       openssl_error("not PEM certificates"));
  } else if (SSL_CTX_set_default_verify_paths(native) != 1) {
    throw Error(Error::Part::ca,
                "the system's CA store cannot be loaded: " + openssl_error("no CA store"));
  }
  if (!o.client.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(native, o.client.cert.c_str()) != 1)
      throw Error(Error::Part::cert, o.client.cert + ": cannot use as a client certificate: " +
                                         openssl_error("not a PEM certificate"));
    if (SSL_CTX_use_PrivateKey_file(native, o.client.key.c_str(), SSL_FILETYPE_PEM) != 1)
      throw Error(Error::Part::key, o.client.key + ": cannot use as a private key: " +
                                        openssl_error("not a PEM key"));
    if (SSL_CTX_check_private_key(native) != 1)
      throw Error(Error::Part::key, o.client.key + ": does not match " + o.client.cert + ": " +
                                        openssl_error("key and certificate differ"));
  }
  // Sessions are kept per host by the pools (prepare_client's SessionSlot).
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_sess_set_new_cb(
      native, +[](SSL* ssl, SSL_SESSION* session) -> int {
        auto* slot = static_cast<SessionSlot*>(SSL_get_ex_data(ssl, ssl_slot()));
        if (slot == nullptr) return 0;
        slot->set(session);
        return 1;  // the slot owns it now
      });
  static constexpr unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(native, kAlpn, sizeof kAlpn - 1);
  return ctx;
}

SessionSlot::~SessionSlot() {
  if (session_ != nullptr) SSL_SESSION_free(session_);
}

void SessionSlot::set(SSL_SESSION* s) {
  if (session_ != nullptr) SSL_SESSION_free(session_);
  session_ = s;
}

void check_client_context(const ClientOptions& options) { client_context(options); }

void prepare_client(SSL* s, const std::string& host, SessionSlot& sessions) {
  if (is_address(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host.c_str());
  } else {
    SSL_set_tlsext_host_name(s, host.c_str());
    SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(s, host.c_str());
  }
  SSL_set_ex_data(s, ssl_slot(), &sessions);
  if (sessions.get() != nullptr) SSL_set_session(s, sessions.get());
}

Failure classify(int value, bool ssl_category, SSL* s) {
  if (s != nullptr) {
    long verify = SSL_get_verify_result(s);
    if (verify != X509_V_OK)
      return {"verify",
              std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify)};
  }
  if (!ssl_category) return {"truncated", "connection closed during the handshake"};
  int reason = ERR_GET_REASON(static_cast<unsigned long>(value));
  char buf[256];
  ERR_error_string_n(static_cast<unsigned long>(value), buf, sizeof buf);
  const char* text = ERR_reason_error_string(static_cast<unsigned long>(value));
  std::string detail = text != nullptr ? text : buf;
  switch (reason) {
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
      return {"http_request", detail};
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return {"protocol", detail};
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_CIPHERS_AVAILABLE:
    case SSL_R_NO_SHARED_GROUPS:
    case SSL_R_NO_SUITABLE_KEY_SHARE:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
    case SSL_R_NO_SHARED_SIGNATURE_ALGORITHMS:
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
      return {"no_shared_cipher", detail};
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      return {"verify", detail};
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
      return {"truncated", detail};
    default:
      return {"other", detail};
  }
}

void closing(SSL* s) {
  // Freed without a close_notify exchanged, OpenSSL would mark the session
  // not resumable; a connection closed after its handshake is not a bad one.
  if (SSL_is_init_finished(s) == 1) SSL_set_shutdown(s, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
}

void attach(SSL* s, HandshakeNotes& notes) { SSL_set_ex_data(s, ssl_slot(), &notes); }

std::string_view version(SSL* s) { return s != nullptr ? SSL_get_version(s) : ""; }

}  // namespace sluice::tls
