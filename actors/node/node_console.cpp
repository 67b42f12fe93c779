#include "actors/node/node_state.hpp"

#include "actors/balancer/inspection.hpp"
#include "config/defaults.hpp"

#include <spdlog/spdlog.h>

namespace eg::actors::node_detail {
namespace {

// -- inspection console ----------------------------------------------------------

/// What this node alone knows of the cluster, for when the balancer cannot be
/// asked: the nodes it is connected to, its own platforms' reports.
inspection::snapshot local_view(const node_state& st) {
  const auto& layout = st.args.settings.layout;
  inspection::snapshot s;
  auto& h = s.cluster;
  layout.fill(h);
  h.run = st.run;
  h.state = st.finished || !st.ended.empty() ? "finished" : "unknown";
  const bool split = inspection::is_split(h);
  h.balancer_reachable = false;
  h.via = st.args.name;
  auto up = [&](const std::string& node) {
    return node == st.args.name || st.peers.count(node) > 0;
  };
  for (auto& n : layout.nodes) {
    inspection::node_row row{n.name, n.host, n.port, up(n.name) ? "up" : "down",
                             n.name == h.balancer, n.platforms,
                             n.name == st.args.name ? st.store_failure : std::string{}};
    for (auto& name : n.platforms) {
      inspection::platform_row pr;
      pr.name = name;
      pr.node = n.name;
      pr.state = row.state;
      (up(n.name) ? h.platforms_up : h.platforms_down) += 1;
      inspection::add_completed_epochs(pr, st.reports);
      for (auto& r : st.reports)
        if (r.platform == name && r.epoch >= pr.epoch) {
          pr.epoch = r.epoch;
          pr.progress = 1;
          pr.iterations = r.iterations;
          pr.samples = r.samples;
          pr.ratio = r.ratio;
          pr.train_loss = r.train_loss;
          pr.checkpoint_epochs = r.epoch + 1;
        }
      h.epoch = std::max(h.epoch, pr.epoch);
      s.platforms.push_back(std::move(pr));
    }
    s.nodes.push_back(std::move(row));
  }
  s.topology = inspection::topology_of(st.reports);
  if (split) {
    // The first stage's epochs (reported as "@stage0") are the run's.
    for (auto& r : st.reports)
      if (r.platform == "@stage0" && static_cast<int64_t>(r.epoch) >= h.evaluated_epoch) {
        h.evaluated_epoch = r.epoch;
        h.averaged_accuracy = r.test_accuracy;
        h.epoch = r.epoch + 1 < h.epochs ? r.epoch + 1 : r.epoch;
      }
    for (auto& row : s.platforms)
      row.epoch = h.epoch;
    if (!st.finished)
      h.state = h.platforms_down > 0 ? "paused" : "training";
    if (h.platforms_down > 0)
      s.events.push_back({0, "down", "a stage's node is down: the pipeline waits for it"});
    return s;
  }
  s.events.push_back({0, "down", "the balancer on node " + h.balancer + " cannot be reached: "
                                   "node " + st.args.name + "'s own view"});
  return s;
}

/// Without the balancer: a control command straight to every platform this
/// node knows.
std::string control_platforms(self_ptr self, messages::verb what) {
  auto& st = self->state;
  size_t n = 0;
  for (auto& e : st.directory.of_role(messages::role::platform)) {
    self->request(caf::actor_cast<platform_actor>(e.handle), defaults::control_timeout,
                  control_atom::value, control{what, {}})
      .then([](bool) {}, [](caf::error&) {});
    ++n;
  }
  const std::string verb = messages::to_string(what);
  spdlog::info("[{}] console: {} sent to {} platforms (the balancer is unreachable)",
               st.args.name, verb, n);
  return inspection::to_json(inspection::answer{
    true, verb + " sent to " + std::to_string(n) + " platforms by node " + st.args.name
            + " (the balancer is unreachable)"});
}

/// What this node answers when the balancer cannot: its own view.
caf::result<std::string> inspect_alone(self_ptr self, const control& c) {
  auto& st = self->state;
  switch (c.verb) {
    case messages::verb::snapshot:
      return inspection::to_json(local_view(st));
    case messages::verb::history: {
      inspection::history h{c.argument, {}};
      for (auto& r : st.reports)
        if (r.platform == c.argument)
          h.epochs.push_back(r);
      if (h.epochs.empty())
        return make_error(ec::unknown_platform, "the balancer is unreachable and platform '"
                                                  + c.argument + "' is not on node "
                                                  + st.args.name);
      return inspection::to_json(h);
    }
    default:
      return control_platforms(self, c.verb);
  }
}

} // namespace

/// The console's request: checks its credentials (the secret, over a
/// challenge of this node) and parses the command at the door, then asks
/// the balancer (wherever it runs) and passes its answer on.
caf::result<std::string> inspect(self_ptr self, const std::string& credentials,
                                 const std::string& text) {
  auto& st = self->state;
  if (!inspection::credentials_valid(credentials, st.args.settings.secret,
                                     [&](const std::string& c) { return st.challenges.redeem(c); })) {
    spdlog::warn("[{}] console refused: wrong cluster secret, or a replayed or stale challenge",
                 st.args.name);
    return make_error(ec::refused, std::string{inspection::refused_text});
  }
  control c;
  try {
    c = inspection::parse_command(text);
  } catch (const std::exception& e) {
    return make_error(ec::bad_request, std::string{e.what()});
  }
  balancer_actor balancer;
  for (auto& e : st.directory.of_role(messages::role::balancer))
    balancer = caf::actor_cast<balancer_actor>(e.handle);
  if (!balancer)
    return inspect_alone(self, c);
  auto rp = self->make_response_promise<std::string>();
  self->request(balancer, defaults::console_forward_timeout, inspect_atom::value, c, st.args.name)
    .then([rp](std::string& answer) mutable { rp.deliver(std::move(answer)); },
          [self, rp, c](caf::error& err) mutable {
            if (is(err, ec::unknown_platform) || is(err, ec::bad_request)) {
              rp.deliver(std::move(err));  // the balancer's answer
              return;
            }
            auto alone = inspect_alone(self, c);
            if (alone.flag == caf::rt_value)
              rp.deliver(alone.value.get_as<std::string>(0));
            else
              rp.deliver(std::move(alone.err));
          });
  return rp;
}

} // namespace eg::actors::node_detail
