#pragma once
// How a node's actors reach other nodes: CAF's middleman over plain TCP, or
// over TLS with certificates on both sides (libcaf_openssl) when the cluster
// file sets [cluster.tls]; with heartbeats on every connection and a
// connection timeout, so that a peer that stops without closing its
// connections (a frozen process, a suspended laptop, a pulled cable) is
// declared down like one whose process ended: CAF closes the connection and
// every monitor of the peer's actors gets its down message.

#include "common/error.hpp"
#include "actors/interfaces.hpp"
#include "config/config.hpp"
#include "messages/door.hpp"

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace eg::actors {

class network_error : public failure<errc::network_failed> {
public:
  using failure::failure;
};

/// cluster.tls for one node: "{node}" in the certificate's and key's paths
/// becomes its name (one cluster file names every node's files; the
/// console's name is "console").
config::tls_config tls_of(const config::tls_config& tls, const std::string& node);

/// Loads the OpenSSL module into `cfg` with `tls` (one node's files, see
/// tls_of) after check_tls_files().
void configure_tls(caf::actor_system_config& cfg, const config::tls_config& tls);

/// Loads the middleman into `cfg` with cluster.heartbeat_interval and
/// cluster.peer_timeout; with cluster.tls, the OpenSSL module too with
/// tls_of(cluster, node), after checking that the certificate, key and CA
/// can be used (throws network_error naming the file and OpenSSL's reason
/// when not).
void configure_network(caf::actor_system_config& cfg, const config::cluster_config& cluster,
                       const std::string& node);

/// Checks the three TLS files as OpenSSL will use them (the certificate
/// chain, the key matching it, the CA); throws network_error naming the file.
void check_tls_files(const config::tls_config& tls);

/// Publishes the node at host:port (0: any free port), over TLS when the
/// system was configured with it. Returns the port, or throws network_error.
uint16_t publish(caf::actor_system& sys, const node_actor& node, const std::string& host,
                 uint16_t port);

/// Dials host:port and runs a TLS handshake with `tls` (one node's files),
/// then hangs up: "" when the peer presents a certificate the CA signed,
/// else what went wrong (unreachable, the verification error). Blocks up to
/// `timeout_ms`. Run before CAF dials a peer over TLS, so that a node with a
/// certificate of another CA is named in the log, and so that a failed TLS
/// handshake never happens inside CAF 0.17's middleman (whose connection
/// timeout then cuts a healthy connection).
std::string probe_tls(const std::string& host, uint16_t port, const config::tls_config& tls,
                      int timeout_ms);

/// Dials host:port and hangs up: "" when a TCP connection was made within
/// `timeout_ms`, else why not (refused, no answer in time, no route).
std::string probe_tcp(const std::string& host, uint16_t port, int timeout_ms);

/// The names a node's front door and its routes let in (each proving the
/// cluster secret): the cluster's nodes, the inspection console
/// ("console") and a node asking to join ("joiner", see
/// node_actor's member_atom); a node that joined is added while the node
/// runs. Shared by the node's thread and the doors' threads.
class admitted_names {
public:
  admitted_names(const config::cluster_config& cluster, const std::string& node);
  void add(const std::string& name);
  bool operator()(const std::string& name) const;

private:
  mutable std::mutex mutex_;
  std::set<std::string> names_;
};

/// The name a joining node's request comes through the doors under (it is
/// no member yet).
inline constexpr const char* joiner_name = "joiner";

/// The front door of `node`'s port (messages/door.hpp) as the cluster file
/// sets it: the cluster id and secret, `admitted`'s names let in (null: the
/// cluster file's), BASP lengths bounded to messages::max_message_bytes (as
/// the weights lane's frames), not read under TLS. The dialling side
/// (door_routes) takes the same options.
messages::door_options door_options_of(const config::cluster_config& cluster,
                                       const std::string& node,
                                       std::shared_ptr<admitted_names> admitted = nullptr);

/// A short-lived actor system that asks nodes of a running cluster before
/// this node runs (the cluster's class list, a join): CAF with the
/// cluster's network settings (under TLS, `tls_name`'s certificate), routes
/// through the nodes' front doors under the name `door_name`, the cluster's
/// wire identity; all undone at its end.
class cluster_asker {
public:
  cluster_asker(const config::cluster_config& cluster, const std::string& tls_name,
                const std::string& door_name);
  ~cluster_asker();
  cluster_asker(const cluster_asker&) = delete;
  cluster_asker& operator=(const cluster_asker&) = delete;

  /// Reaches the node at host:port (`node`: the name it must have, "" for
  /// any) and asks it for a challenge; `request` then sends the real
  /// question with the console's credentials answering it (a proof of
  /// `secret`) and waits for the answer, setting `why` when there is none
  /// (see refusal_of). False, with `why`, when the node cannot be reached or
  /// gives no challenge.
  bool ask(const std::string& node, const std::string& host, uint16_t port,
           const std::string& secret, std::string& why,
           const std::function<void(caf::scoped_actor&, const node_actor&,
                                    const std::string& credentials)>& request);
  /// What an error answer means to the asker: "refused: WHY" for the
  /// node's refusal (ec::refused), else the error's text.
  std::string refusal_of(const caf::error& err);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The actor that dials other nodes (connect_atom): the OpenSSL manager's
/// under TLS, else the middleman's.
caf::io::middleman_actor connector(caf::actor_system& sys);

} // namespace eg::actors
