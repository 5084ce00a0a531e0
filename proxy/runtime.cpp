#include "proxy/runtime.hpp"

#include <boost/asio/ssl/context.hpp>
#include <charconv>
#include <random>

namespace sluice::proxy {

Live make_live(const config::Config& c) {
  return Live{c.routes, admission::Gate(c.admission.mode, c.admission.factors), c.admission.retry,
              c.admission.lanes, c.admission.close_statuses};
}

Runtime::Runtime(const config::Config& c) : config(c) {
  generations.push_back(std::make_unique<Live>(make_live(c)));
  for (std::size_t u = 0; u < c.upstreams.size(); ++u)
    gates.push_back(std::make_unique<UpstreamGate>(c.admission.closure));
  if (c.admission.heavy_max_in_flight)
    heavy_cap =
        std::make_unique<HeavyCap>(static_cast<std::int64_t>(*c.admission.heavy_max_in_flight));
  if (c.admission.ingest_budget)
    ingest = std::make_unique<admission::IngestBudget>(*c.admission.ingest_budget,
                                                       c.admission.ingest_shares);
  tenant_table = std::make_unique<tenants::Table>(c.tenants.table);
  // The fleet's windows are wall-clock seconds: the wall clock at this epoch.
  tenant_table->set_wall_offset(std::chrono::duration_cast<admission::Micros>(
      std::chrono::system_clock::now().time_since_epoch() - (Clock::now() - epoch)));
  admission::EstimatePolicy ep = c.admission.estimate;
  ep.max = static_cast<double>(c.upstream_max_connections);
  for (std::size_t u = 0; u < c.upstreams.size(); ++u)
    bulkheads.push_back(std::make_unique<admission::Bulkhead>(
        c.admission.lanes, admission::Estimate(ep), heavy_cap.get()));
  for (auto& b : bulkheads) b->set_waker(&kept_slot_waker);
  std::random_device rd;
  auto random64 = [&rd] { return (std::uint64_t{rd()} << 32) ^ rd(); };
  instance = random64();
  const auto& hex = c.admission.lease_key;  // validated: 32 hex digits, or empty
  admission::LeaseKey key{};
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (hex.size() == 2 * key.size()) {
      std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, key[i], 16);
    } else {
      key[i] = static_cast<std::uint8_t>(rd());
    }
  }
  lease_key = admission::instance_key(key, instance);

  // TLS: loaded by config::load already, so a failure here is a file changed
  // since (reported as the variable's error).
  try {
    if (c.tls.on()) {
      server_tls = server_contexts(c.tls, c.h2);
    }
    bool any = std::any_of(c.upstreams.begin(), c.upstreams.end(),
                           [](const config::Upstream& u) { return u.tls; });
    if (any)
      upstream_tls =
          tls::client_context({c.upstream_tls.ca_file, c.upstream_tls.client, tls::Protocol{}});
  } catch (const tls::Error& e) {
    throw config::ConfigError(
        e.part() == tls::Error::Part::key ? "SLUICE_TLS_KEY" : "SLUICE_TLS_CERT", e.what());
  }
}

Runtime::~Runtime() = default;

std::shared_ptr<const tls::ServerContexts> server_contexts(const config::Tls& t, bool h2) {
  // Tickets are good for two periods, so it is the rotation that ends them
  // (each set of contexts has its own key): at most one period, while it works.
  auto lifetime = 2 * std::chrono::duration_cast<std::chrono::seconds>(t.ticket_rotate);
  return std::make_shared<const tls::ServerContexts>(t.pairs, t.protocol, lifetime, h2);
}

std::vector<admission::BulkheadView> Runtime::bulkhead_views() const {
  auto now = micros(Clock::now());
  std::vector<admission::BulkheadView> views;
  views.reserve(bulkheads.size());
  for (const auto& b : bulkheads) views.push_back(b->view(now));
  return views;
}

}  // namespace sluice::proxy
