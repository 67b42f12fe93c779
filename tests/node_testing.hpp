#pragma once
// Several nodes in one test process, without sockets: each node's process is
// simulated by an actor system of its own on CAF's deterministic scheduler
// (test_coordinator: a message is delivered only when the test runs the
// system, time moves only with advance()) and CAF's test multiplexer as the
// middleman's network backend (no socket: a connection is a pair of byte
// buffers between two multiplexers, prepared by the test for each
// host:port a node will dial, as CAF's own io tests do, see
// caf/test/io_dsl.hpp). Everything else is the real thing: the node actor,
// its platforms, the balancer, CAF's BASP over the buffers, the wire
// encoding of actors/wire.hpp.

#include "actors/node/network.hpp"
#include "actors/wire.hpp"
#include "config/config.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/network/operation.hpp>
#include <caf/io/network/test_multiplexer.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace eg::test {

/// One node's process: an actor system configured as a node's is
/// (actors::configure_network: the middleman, the project's message types,
/// heartbeats as cluster.heartbeat_interval says), but on the testing
/// scheduler and the test multiplexer, with the node's wire identity.
class simulated_process {
public:
  simulated_process(const config::cluster_config& cluster, std::string node)
      : name(std::move(node)), sys(configure(cfg, cluster, name)),
        sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())),
        mpx(dynamic_cast<caf::io::network::test_multiplexer&>(sys.middleman().backend())) {
    // As CAF's test fixtures do: the clock does not start at 0.
    sched.clock().current_time += std::chrono::hours(1);
    actors::set_wire_identity(sys, {cluster.id, name});
    // The middleman's actor and broker start as the system does.
    while (step())
      ;
  }
  ~simulated_process() {
    // A timer still pending holds its receiver past the system's shutdown
    // (the BASP broker's heartbeat tick holds the broker), and with it what
    // that receiver holds, which can keep a detached actor alive: the
    // shutdown would wait for its thread forever. The timers go first.
    sched.clock().cancel_all();
    actors::set_wire_identity(sys, {});
  }
  simulated_process(const simulated_process&) = delete;
  simulated_process& operator=(const simulated_process&) = delete;

  /// One step of work: a message to an actor, a broker's job, bytes waiting
  /// on a connection, a connection to accept. False when there is none.
  bool step() {
    return sched.try_run_once() || mpx.try_exec_runnable() || mpx.read_data()
           || mpx.try_accept_connection();
  }

  /// Publishes `node` as run_node does (actors::publish), on a port the
  /// network prepared with listen(). It blocks on the middleman's actor,
  /// which runs inline here (it is idle: the constructor started it).
  uint16_t publish(const actors::node_actor& node, const std::string& host, uint16_t port) {
    sched.inline_next_enqueue();
    return actors::publish(sys, node, host, port);
  }

  std::string name;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  caf::io::network::test_multiplexer& mpx;

private:
  static caf::actor_system_config& configure(caf::actor_system_config& cfg,
                                             const config::cluster_config& cluster,
                                             const std::string& node) {
    actors::configure_network(cfg, cluster, node);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    cfg.set("middleman.network-backend", caf::atom("testing"));
    cfg.set("middleman.manual-multiplexing", true);
    cfg.set("middleman.attach-utility-actors", true);
    cfg.set("middleman.workers", size_t{0});
    return cfg;
  }
};

/// The simulated processes and the connections between them.
class simulated_network {
public:
  using connection_handle = caf::io::connection_handle;
  using accept_handle = caf::io::accept_handle;

  /// One connection: the listening side's handle and the dialling side's.
  struct connection {
    simulated_process* server;
    connection_handle server_hdl;
    simulated_process* client;
    connection_handle client_hdl;
    bool open = true;
  };

  void add(simulated_process& p) { processes_.push_back(&p); }
  /// A process that crashed: it no longer runs (its messages stay where
  /// they are), and its clock stands still.
  void remove(simulated_process& p) {
    processes_.erase(std::remove(processes_.begin(), processes_.end(), &p), processes_.end());
    for (auto i = acceptors_.begin(); i != acceptors_.end();)
      i = i->first.first == &p ? acceptors_.erase(i) : std::next(i);
  }

  /// `server` listens on `port`: publish() finds the port open.
  void listen(simulated_process& server, uint16_t port) {
    server.mpx.provide_acceptor(port, acceptor(server, port));
  }

  /// The next dial of `client` to host:port reaches `server`'s acceptor on
  /// that port (one dial each: a redial needs another one). As io_dsl's
  /// prepare_connection, with the acceptor the server listens with.
  void prepare_connection(simulated_process& server, simulated_process& client,
                          const std::string& host, uint16_t port) {
    auto server_hdl = connection_handle::from_int(++last_handle_);
    auto client_hdl = connection_handle::from_int(++last_handle_);
    server.mpx.prepare_connection(acceptor(server, port), server_hdl, client.mpx, host, port,
                                  client_hdl);
    connections_.push_back({&server, server_hdl, &client, client_hdl, true});
  }

  /// Every open connection of `p` fails on both ends, as when its process
  /// dies or its cable is pulled: each side's BASP broker sees the
  /// connection closed and every monitor of an actor on the other side gets
  /// its down message.
  void cut(simulated_process& p) {
    for (auto& c : connections_) {
      if (!c.open || (c.server != &p && c.client != &p))
        continue;
      c.open = false;
      fail(*c.server, c.server_hdl);
      fail(*c.client, c.client_hdl);
    }
  }

  /// Runs every process until none has anything left to do; time stands
  /// still (no timeout fires). Throws when the processes keep each other
  /// busy for good.
  size_t run(size_t limit = 1'000'000) {
    size_t steps = 0;
    while (std::any_of(processes_.begin(), processes_.end(),
                       [](simulated_process* p) { return p->step(); }))
      if (++steps > limit)
        throw std::runtime_error("the simulated processes never come to rest");
    return steps;
  }

  /// Moves every process's clock on by `total`, in steps of `step`, running
  /// them after each step (what is due then fires: delayed messages,
  /// request timeouts).
  void advance(caf::timespan total,
               caf::timespan step = std::chrono::duration_cast<caf::timespan>(
                 std::chrono::milliseconds(100))) {
    run();
    for (caf::timespan done{0}; done < total; done += step) {
      for (auto* p : processes_)
        p->sched.advance_time(std::min(step, total - done));
      run();
    }
  }

  const std::vector<connection>& connections() const { return connections_; }

private:
  accept_handle acceptor(simulated_process& server, uint16_t port) {
    auto key = std::make_pair(&server, port);
    auto i = acceptors_.find(key);
    if (i == acceptors_.end())
      i = acceptors_.emplace(key, accept_handle::from_int(++last_handle_)).first;
    return i->second;
  }

  static void fail(simulated_process& p, connection_handle hdl) {
    auto& scribe = p.mpx.impl_ptr(hdl);
    if (scribe)
      scribe->io_failure(&p.mpx, caf::io::network::operation::read);
  }

  int64_t last_handle_ = 0;
  std::vector<simulated_process*> processes_;
  std::vector<connection> connections_;
  std::map<std::pair<simulated_process*, uint16_t>, accept_handle> acceptors_;
};

/// What the default logger writes while it lives (the nodes log with
/// spdlog).
class captured_log {
public:
  captured_log() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~captured_log() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;

  std::string text() {
    spdlog::default_logger()->flush();
    return text_.str();
  }
  /// Whether a line holds `what`.
  bool has(const std::string& what) { return text().find(what) != std::string::npos; }
  /// How many times `what` was written.
  size_t count(const std::string& what) {
    auto all = text();
    size_t n = 0;
    for (auto at = all.find(what); at != std::string::npos; at = all.find(what, at + 1))
      ++n;
    return n;
  }

private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

} // namespace eg::test
