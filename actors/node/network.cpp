#include "actors/node/network.hpp"

#include "actors/balancer/inspection.hpp"
#include "actors/wire.hpp"

#include "messages/codec.hpp"
#include "messages/socket.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <chrono>
#include <filesystem>
#include <set>

namespace eg::actors {
namespace {

caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

} // namespace

void check_tls_files(const config::tls_config& tls) {
  for (auto [key, path] : {std::pair{"certificate", &tls.certificate},
                           std::pair{"key", &tls.key}, std::pair{"ca", &tls.ca}})
    if (!std::filesystem::is_regular_file(*path))
      throw network_error(std::string("cluster.tls.") + key + ": no such file '" + *path + "'");
  try {
    messages::tls_context check(tls.certificate, tls.key, tls.ca);  // what the lane loads
  } catch (const messages::socket_error& e) {
    throw network_error(std::string("cluster.tls: ") + e.what());
  }
}

config::tls_config tls_of(const config::tls_config& files, const std::string& node) {
  auto tls = files;
  for (auto* path : {&tls.certificate, &tls.key})
    for (auto at = path->find("{node}"); at != std::string::npos; at = path->find("{node}", at))
      path->replace(at, 6, node);
  return tls;
}

void configure_network(caf::actor_system_config& cfg, const config::cluster_config& cluster,
                       const std::string& node) {
  cfg.load<caf::io::middleman>();
  announce_types(cfg);
  cfg.set("middleman.heartbeat-interval", seconds(cluster.heartbeat_interval));
  cfg.set("middleman.connection-timeout", seconds(cluster.peer_timeout));
  if (cluster.tls.enabled())
    configure_tls(cfg, tls_of(cluster.tls, node));
}

void configure_tls(caf::actor_system_config& cfg, const config::tls_config& tls) {
  check_tls_files(tls);
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = tls.certificate;
  cfg.openssl_key = tls.key;
  cfg.openssl_cafile = tls.ca;
}

uint16_t publish(caf::actor_system& sys, const node_actor& node, const std::string& host,
                 uint16_t port) {
  auto where = host + ":" + std::to_string(port);
  auto got = sys.has_openssl_manager() ? caf::openssl::publish(node, port, host.c_str(), true)
                                       : sys.middleman().publish(node, port, host.c_str(), true);
  if (!got)
    throw network_error("cannot listen on " + where + ": " + sys.render(got.error()));
  return *got;
}

std::string probe_tls(const std::string& host, uint16_t port, const config::tls_config& tls,
                      int timeout_ms) {
  try {
    messages::tls_context ctx(tls.certificate, tls.key, tls.ca);
    messages::stream s(messages::connect_tcp(host, port, timeout_ms));
    s.start_tls(ctx, false,
                messages::stream::clock::now() + std::chrono::milliseconds(timeout_ms));
    s.shutdown();
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string probe_tcp(const std::string& host, uint16_t port, int timeout_ms) {
  try {
    messages::socket_fd s = messages::connect_tcp(host, port, timeout_ms);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

admitted_names::admitted_names(const config::cluster_config& cluster, const std::string& node)
    : names_{"console", joiner_name} {
  for (auto& n : cluster.nodes)
    if (n.name != node)
      names_.insert(n.name);
}

void admitted_names::add(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_.insert(name);
}

bool admitted_names::operator()(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return names_.count(name) > 0;
}

messages::door_options door_options_of(const config::cluster_config& cluster,
                                       const std::string& node,
                                       std::shared_ptr<admitted_names> admitted) {
  messages::door_options o;
  o.identity.cluster_id = cluster.id;
  o.identity.node = node;
  o.identity.secret = cluster.secret;
  if (!admitted)
    admitted = std::make_shared<admitted_names>(cluster, node);
  o.identity.peer_allowed = [admitted](const std::string& n) { return (*admitted)(n); };
  for (auto& n : cluster.nodes)
    if (n.name == node)
      o.host = n.host;
  o.max_message_bytes = messages::max_message_bytes;
  o.check_lengths = !cluster.tls.enabled();
  return o;
}

struct cluster_asker::impl {
  caf::actor_system_config config;  // (the system keeps a reference to it)
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<messages::door_routes> routes;
};

cluster_asker::cluster_asker(const config::cluster_config& cluster, const std::string& tls_name,
                             const std::string& door_name)
    : impl_(std::make_unique<impl>()) {
  configure_network(impl_->config, cluster, tls_name);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->config);
  set_wire_identity(*impl_->sys, {cluster.id, door_name});
  impl_->routes = std::make_unique<messages::door_routes>(door_options_of(cluster, door_name));
}

cluster_asker::~cluster_asker() {
  impl_->routes->stop();
  set_wire_identity(*impl_->sys, {});
}

bool cluster_asker::ask(const std::string& name, const std::string& host, uint16_t port,
                        const std::string& secret, std::string& why,
                        const std::function<void(caf::scoped_actor&, const node_actor&,
                                                 const std::string&)>& request) {
  auto& sys = *impl_->sys;
  auto& routes = *impl_->routes;
  uint16_t local = 0;
  try {
    local = routes.route(name, host, port);
  } catch (const messages::door_error& e) {
    why = e.what();
    return false;
  }
  auto node = sys.has_openssl_manager()
                ? caf::openssl::remote_actor<node_actor>(sys, "127.0.0.1", local)
                : sys.middleman().remote_actor<node_actor>("127.0.0.1", local);
  if (!node) {
    why = routes.last_failure(host, port);
    if (why.empty())
      why = sys.render(node.error());
    return false;
  }
  caf::scoped_actor self{sys};
  std::string challenge;
  self->request(*node, std::chrono::seconds(10), challenge_atom::value)
    .receive([&](std::string& c) { challenge = std::move(c); },
             [&](caf::error& err) { why = sys.render(err); });
  if (challenge.empty())
    return false;
  request(self, *node, inspection::console_credentials(secret, challenge));
  return true;
}

std::string cluster_asker::refusal_of(const caf::error& err) {
  std::string refused;
  return is(err, ec::refused, &refused) ? "refused: " + refused : impl_->sys->render(err);
}

caf::io::middleman_actor connector(caf::actor_system& sys) {
  if (sys.has_openssl_manager())
    return sys.openssl_manager().actor_handle();
  return sys.middleman().actor_handle();
}

} // namespace eg::actors
