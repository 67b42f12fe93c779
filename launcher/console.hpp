#pragma once
// `edgegossip console HOST:PORT`: attaches to any node of a running cluster
// over CAF remoting and shows the whole cluster (actors/balancer/inspection.hpp),
// refreshed live in the terminal, with commands at a prompt; or prints one
// snapshot (--once) or runs one command (--command) for scripts.

#include "config/config.hpp"

#include <string>

namespace eg::launcher {

struct console_options {
  std::string address;   ///< HOST:PORT of any node of the cluster
  std::string secret;    ///< the cluster secret ("" when the cluster has none)
  std::string cluster_id = "edgegossip";  ///< cluster.id: the node's front door checks it
  bool once = false;     ///< print one snapshot and exit
  bool json = false;     ///< with --once / --command: the JSON as the node sent it
  std::string command;   ///< run this one command (pause, resume, checkpoint, history NAME)
  double interval = 1.0; ///< seconds between refreshes
  /// The cluster's TLS files (cluster.tls; "{node}" stands for "console"):
  /// the console then connects over TLS with that certificate.
  config::tls_config tls;
};

/// Exit codes: 0 done; 2 the address cannot be reached or refused the
/// secret (a message on stderr says which); 1 other failures.
int run_console(const console_options& opts);

} // namespace eg::launcher
