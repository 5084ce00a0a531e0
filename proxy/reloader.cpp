#include "proxy/reloader.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "proxy/file_state.hpp"
#include "proxy/runtime.hpp"

namespace sluice::proxy {

using Json = nlohmann::json;

Reloader::Reloader(Runtime& rt, AccessLog& audit)
    : rt_(rt), audit_(audit), live_(rt.generations.back().get()), current_(rt.config) {
  config_file_key_ = file_state(current_.config_file).key;
  routes_file_key_ = file_state(current_.routes_file).key;
  certificates_key_ = certificates_key();
  certificates_built_ = std::chrono::steady_clock::now();  // the runtime's, built just before
}

std::string Reloader::certificates_key() {
  std::string key;
  for (const auto& p : rt_.config.tls.pairs)
    key += file_state(p.cert).key + "|" + file_state(p.key).key + ";";
  return key;
}

bool Reloader::certificates_changed() {
  if (!rt_.config.tls.on()) return false;
  auto key = certificates_key();
  if (key == certificates_key_) return false;
  certificates_key_ = key;
  return true;
}

std::shared_ptr<const tls::ServerContexts> Reloader::build_certificates() {
  certificates_built_ = std::chrono::steady_clock::now();
  return server_contexts(rt_.config.tls, rt_.config.h2);
}

void Reloader::publish_certificates(std::shared_ptr<const tls::ServerContexts> next) {
  rt_.server_tls = next;
  for (auto& w : rt_.workers) net::post(w->ioc(), [w = w.get(), next] { w->set_server_tls(next); });
}

bool Reloader::reload_certificates(std::string_view why) {
  if (!rt_.config.tls.on()) return true;
  certificates_key_ = certificates_key();
  Json audit_line;
  audit_line["audit"] = "certificates";
  audit_line["why"] = why;
  std::shared_ptr<const tls::ServerContexts> next;
  try {
    next = build_certificates();
  } catch (const tls::Error& e) {
    ++cert_reloads_[0];
    std::fprintf(stderr, "sluice: tls: certificates not reloaded, those in use stay: %s\n",
                 e.what());
    audit_line["ok"] = false;
    audit_line["error"] = e.what();
    audit_.write_line(audit_line.dump());
    audit_.flush();
    return false;
  }
  publish_certificates(next);
  ++cert_reloads_[1];
  Json served = Json::array();
  for (const auto& c : next->certificates())
    served.push_back({{"file", c.file}, {"subject", c.subject}, {"not_after", c.not_after}});
  audit_line["ok"] = true;
  audit_line["certificates"] = served;
  audit_.write_line(audit_line.dump());
  audit_.flush();
  std::fprintf(stderr, "sluice: tls: certificates reloaded (%s): %s\n", std::string(why).c_str(),
               served.dump().c_str());
  return true;
}

void Reloader::rotate_tickets_if_due(std::chrono::steady_clock::time_point now) {
  if (!rt_.config.tls.on() || now - certificates_built_ < rt_.config.tls.ticket_rotate) return;
  // The same certificates, new contexts: OpenSSL gives each its own ticket key.
  try {
    publish_certificates(build_certificates());
  } catch (const tls::Error& e) {
    std::fprintf(stderr,
                 "sluice: tls: session ticket key not rotated (the files do not load): %s\n",
                 e.what());
  }
}

bool Reloader::files_changed() {
  auto config_key = file_state(current_.config_file).key;
  auto routes_key = file_state(current_.routes_file).key;
  if (config_key == config_file_key_ && routes_key == routes_file_key_) return false;
  config_file_key_ = config_key;
  routes_file_key_ = routes_key;
  return true;
}

bool Reloader::reload(std::string_view why) {
  auto config_key = file_state(current_.config_file).key;
  auto routes_file = current_.routes_file;
  auto routes_key = file_state(routes_file).key;
  bool ok = reload_files(why);
  config_file_key_ = config_key;
  routes_file_key_ =
      current_.routes_file == routes_file ? routes_key : file_state(current_.routes_file).key;
  return ok;
}

bool Reloader::reload_files(std::string_view why) {
  config::Config next;
  Json audit_line;
  audit_line["audit"] = "reload";
  audit_line["why"] = why;
  try {
    next = config::load(config::sluice_environment(environ));
  } catch (const std::exception& e) {
    ++reloads_[0];
    std::fprintf(stderr, "sluice: reload refused, the running configuration stays: %s\n", e.what());
    audit_line["ok"] = false;
    audit_line["error"] = e.what();
    audit_.write_line(audit_line.dump());
    audit_.flush();
    return false;
  }
  // The variable table says what changes now and what waits for a restart
  // (listeners, threads, pools, limits): those keep the values they started with.
  auto reloaded = config::reload(current_, next);
  Json changed = Json::array(), needs_restart = Json::array();
  for (auto key : reloaded.live) changed.push_back(std::string(key));
  for (auto key : reloaded.restart) {
    needs_restart.push_back(std::string(key));
    std::fprintf(stderr, "sluice: reload: %.*s changed; it takes effect on restart\n",
                 static_cast<int>(key.size()), key.data());
  }
  // Routes name upstreams by position: a changed upstream list needs a restart.
  if (next.upstreams != current_.upstreams) {
    ++reloads_[0];
    std::fprintf(stderr,
                 "sluice: reload refused: SLUICE_UPSTREAMS changed; restart to change upstreams\n");
    audit_line["ok"] = false;
    audit_line["error"] = "SLUICE_UPSTREAMS changed; restart to change upstreams";
    audit_.write_line(audit_line.dump());
    audit_.flush();
    return false;
  }
  // Kept until the next reload: what is in force, what later reloads compare against.
  current_ = std::move(reloaded.config);
  rt_.generations.push_back(std::make_unique<Live>(make_live(current_)));
  live_ = rt_.generations.back().get();
  for (auto& w : rt_.workers)
    net::post(w->ioc(), [w = w.get(), live = live_] { w->set_live(live); });
  for (auto& gate : rt_.gates) gate->set_policy(current_.admission.closure);
  for (auto& b : rt_.bulkheads) b->set_lanes(live_->lanes);
  ++reloads_[1];
  audit_line["ok"] = true;
  audit_line["changed"] = changed;
  audit_line["needs_restart"] = needs_restart;
  audit_.write_line(audit_line.dump());
  audit_.flush();
  std::fprintf(stderr, "sluice: reloaded (%s): %s\n", std::string(why).c_str(),
               changed.dump().c_str());
  return true;
}

}  // namespace sluice::proxy
