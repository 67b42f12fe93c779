#include "actors/balancer/inspection.hpp"

#include "config/config.hpp"
#include "messages/secret.hpp"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>

namespace eg::inspection {


std::string console_credentials(const std::string& secret, const std::string& challenge) {
  auto nonce = messages::make_nonce();
  auto proof = messages::proof(secret, "console", "", "console", challenge, nonce);
  return challenge + " " + nonce + (proof.empty() ? "" : " " + proof);
}

bool credentials_valid(const std::string& credentials, const std::string& secret,
                       const std::function<bool(const std::string&)>& redeem) {
  std::istringstream in(credentials);
  std::string challenge, nonce, proof, extra;
  in >> challenge >> nonce >> proof >> extra;
  if (challenge.empty() || nonce.empty() || !extra.empty() || !redeem(challenge))
    return false;
  return secret.empty()
         || messages::same_digest(proof, messages::proof(secret, "console", "", "console",
                                                         challenge, nonce));
}

void event_log::add(double at, std::string kind, std::string text) {
  events_.push_back(event{at, std::move(kind), std::move(text)});
  while (events_.size() > capacity_)
    events_.pop_front();
}

std::vector<link> topology_of(const std::vector<messages::epoch_report>& reports) {
  std::map<std::pair<std::string, std::string>, link> edges;
  for (auto& r : reports)
    for (auto& t : r.received_from) {
      auto& e = edges[{t.peer, r.platform}];
      e.from = t.peer;
      e.to = r.platform;
      e.messages += t.messages;
      e.bytes += t.bytes;
    }
  std::vector<link> out;
  for (auto& [_, e] : edges)
    out.push_back(e);
  return out;
}

void add_commits(platform_row& row, const std::vector<messages::epoch_report>& reports,
                 const messages::epoch_report& current) {
  double seconds = 0, stale = 0;
  uint64_t commits = 0;
  auto add = [&](const messages::epoch_report& r) {
    commits += r.commits;
    stale += r.staleness * static_cast<double>(r.commits);
    seconds += r.wall_seconds;
  };
  for (auto& r : reports)
    if (r.platform == row.name && r.epoch != current.epoch)
      add(r);
  add(current);
  row.commits = commits;
  row.commit_rate = seconds > 0 ? static_cast<double>(commits) / seconds : 0.0;
  row.staleness = commits ? stale / static_cast<double>(commits) : 0.0;
}

void add_completed_epochs(platform_row& row, const std::vector<messages::epoch_report>& reports) {
  uint64_t iterations = 0;
  const messages::epoch_report* latest = nullptr;
  for (auto& r : reports) {
    if (r.platform != row.name)
      continue;
    row.bytes_in += r.bytes_received;
    row.bytes_out += r.bytes_sent;
    row.messages_in += r.messages_received;
    row.messages_out += r.messages_sent;
    iterations += r.iterations;
    if (!latest || r.epoch >= latest->epoch)
      latest = &r;
  }
  row.exchange_rate
    = iterations ? static_cast<double>(row.messages_out) / static_cast<double>(iterations) : 0.0;
  if (latest)
    row.test_accuracy = latest->test_accuracy;
}

// -- the balancer's view ------------------------------------------------------------

double console_state::now() const {
  return std::chrono::duration<double>(clock::now() - born).count();
}

void console_state::note(std::string kind, std::string text) {
  events.add(now(), std::move(kind), std::move(text));
}

void console_state::joined(const std::string& name, const std::string& node, bool rejoined) {
  note("join",
       fmt::format("platform {} {} from node {}", name, rejoined ? "rejoined" : "joined", node));
  if (rejoined)
    restoring.insert(name);
}

void console_state::down(const std::string& name, const std::string& node,
                         const std::string& reason) {
  restoring.erase(name);
  note("down", fmt::format("platform {} on node {} is down ({})", name, node, reason));
}

void console_state::refused(const std::string& name, const std::string& node,
                            const std::string& why) {
  note("refused", fmt::format("platform {} of node {} refused: {}; the run goes on without it",
                              name, node, why));
}

void console_state::reported(const messages::epoch_report& r) {
  checkpoints[r.platform] = {static_cast<int64_t>(r.epoch) + 1, now()};
  restoring.erase(r.platform);
}

void console_state::checkpointed(const std::string& name) {
  checkpoints[name].second = now();
}

void console_state::server_at(const std::string& node) {
  if (node.empty() || node == server)
    return;
  if (!server.empty())
    note("server", "the parameter server runs on node " + node);
  server = node;
}

bool console_state::store_failed(const std::string& node, const std::string& why) {
  if (!store_failures.emplace(node, why).second)
    return false;
  note("store", fmt::format("node {}: the store cannot write ({}); its checkpoints are not "
                            "being saved",
                            node, why));
  return true;
}

std::string console_state::command(messages::verb what, const std::vector<std::string>& platforms,
                                   actors::epoch_barrier& epochs, clock::time_point when) {
  if (what == messages::verb::pause && !paused) {
    paused = true;
    paused_at = when;
  } else if (what == messages::verb::resume && paused) {
    paused = false;
    epochs.resumed(paused_at, when);
  }
  std::string names;
  for (auto& name : platforms)
    names += (names.empty() ? "" : ", ") + name;
  const std::string verb = messages::to_string(what);
  const auto n = platforms.size();
  auto text = fmt::format("{} sent to {} platform{}{}", verb, n, n == 1 ? "" : "s",
                          n ? " (" + names + ")" : std::string{});
  note(verb, text + " by the console");
  return text;
}

void console_state::planned(const actors::epoch_plan& plan) {
  note("plan", fmt::format("epoch {} plan:{}{}", plan.epoch + 1, plan.line,
                           plan.adopt.empty() ? "" : " (survivors take failed shards)"));
}

void console_state::cut(uint32_t epoch, double limit, const std::string& names) {
  note("deadline", fmt::format("epoch {} deadline {:.1f} s: cut{}", epoch + 1, limit, names));
}

void console_state::epoch_done(const actors::epoch_barrier& epochs, uint32_t epoch) {
  auto i = epochs.evaluated().find(epoch);
  const auto e = i == epochs.evaluated().end() ? storage::cluster_epoch{} : i->second;
  note("epoch", fmt::format("epoch {}/{}: averaged model accuracy {}, {} platforms up",
                            epoch + 1, epochs.last_epoch() + 1,
                            epochs.averages(epoch) ? actors::accuracy_text(e)
                                                   : std::string{"not made (train.average_every)"},
                            e.platforms_up));
  std::string who;
  for (auto& [name, _] : epochs.reports(epoch))
    who += " " + name;
  note("checkpoint", fmt::format("checkpoints after epoch {}:{}", epoch + 1, who));
}

void cluster_layout::joined(node row) {
  for (auto& n : nodes)
    if (n.name == row.name) {
      n = std::move(row);
      return;
    }
  nodes.push_back(std::move(row));
}

cluster_layout cluster_layout::of(const config::cluster_config& cluster) {
  cluster_layout l;
  l.id = cluster.id;
  l.epochs = cluster.train.epochs;
  if (cluster.split.enabled()) {
    // A split run: its stages take the platforms' rows; no balancer.
    l.strategy = "split " + cluster.split.model;
    l.schedule = cluster.split.mode + ", " + std::to_string(cluster.stages.size()) + " stages";
    for (auto& n : cluster.nodes) {
      node row{n.name, n.host, n.port, {}};
      for (size_t k = 0; k < cluster.stages.size(); ++k)
        if (cluster.stages[k].node == n.name)
          row.platforms.push_back("@stage" + std::to_string(k));
      l.nodes.push_back(std::move(row));
    }
    return l;
  }
  l.strategy = cluster.strategy.name;
  if (cluster.strategy.edgegossip() && cluster.strategy.gossip != "gosgd")
    l.strategy += " over " + cluster.strategy.gossip;
  l.schedule = cluster.strategy.asynchronous() ? "async" : "sync";
  l.balancer = cluster.balancer().name;
  if (cluster.strategy.parameter_server())
    l.server = cluster.server().name;
  for (auto& n : cluster.nodes) {
    node row{n.name, n.host, n.port, {}};
    for (auto& p : n.platforms)
      row.platforms.push_back(p.name);
    l.nodes.push_back(std::move(row));
  }
  return l;
}

void cluster_layout::fill(cluster_header& h) const {
  h.id = id;
  h.strategy = strategy;
  h.schedule = schedule;
  h.epochs = epochs;
  h.balancer = balancer;
  h.server = server;
}

snapshot console_snapshot(const cluster_layout& layout, const actors::epoch_barrier& epochs,
                          const console_state& console, const run_status& run,
                          const std::map<std::string, messages::prediction>& predictions,
                          const std::string& via) {
  snapshot s;
  auto& h = s.cluster;
  layout.fill(h);
  h.run = run.run;
  h.state = !run.started ? "waiting" : run.finished ? "finished" : console.paused ? "paused"
                                                                              : "training";
  h.elapsed_seconds = run.started ? run.elapsed_seconds : 0.0;
  h.epochs = epochs.last_epoch() + 1;
  // The newest epoch whose models were averaged (train.average_every).
  auto newest = epochs.evaluated().rbegin();
  while (newest != epochs.evaluated().rend() && !epochs.averages(newest->first))
    ++newest;
  if (newest != epochs.evaluated().rend()) {
    h.evaluated_epoch = newest->first;
    const auto& e = newest->second;
    h.averaged_accuracy = e.averaged_accuracy;
    for (size_t i = 0; i < e.tests.size() && (e.tests.size() > 1 || e.tests[0].node != "local");
         ++i)
      h.accuracy_by_node += fmt::format("{}{} {:.4f} of {}", i ? ", " : "", e.tests[i].node,
                                        e.tests[i].accuracy(), e.tests[i].samples);
  }
  h.via = via;
  if (!h.server.empty() && !console.server.empty())
    h.server = console.server;
  const auto& reports = epochs.all_reports();
  for (auto& n : layout.nodes)
    for (auto& name : n.platforms) {
      platform_row row;
      row.name = name;
      row.node = n.name;
      auto* p = epochs.find(name);
      if (!p && epochs.refused().count(name)) {
        row.state = "refused";  // at join: its data or settings are not the cluster's
        s.platforms.push_back(std::move(row));
        continue;
      }
      if (!p) {
        row.state = "waiting";  // not joined yet
        s.platforms.push_back(std::move(row));
        continue;
      }
      row.node = p->node;
      row.state = !p->up ? "down" : console.restoring.count(name) ? "restoring" : "up";
      (p->up ? h.platforms_up : h.platforms_down) += 1;
      row.paused = p->up && console.paused;
      row.epoch = p->progress.epoch;
      h.epoch = std::max(h.epoch, row.epoch);
      row.iterations = p->progress.iterations;
      row.samples = p->progress.samples;
      row.progress = p->progress.planned_samples
                       ? static_cast<double>(p->progress.samples) / p->progress.planned_samples
                       : 0.0;
      row.ratio = p->progress.ratio;
      row.train_loss = p->progress.train_loss;
      if (auto t = predictions.find(name); t != predictions.end())
        row.throughput = t->second.throughput;
      add_completed_epochs(row, reports);
      add_commits(row, reports, p->progress);
      h.server_version = std::max(h.server_version, p->progress.server_version);
      if (auto c = console.checkpoints.find(name); c != console.checkpoints.end()) {
        row.checkpoint_epochs = c->second.first;
        row.checkpoint_at = c->second.second;
      }
      s.platforms.push_back(std::move(row));
    }
  for (auto& n : layout.nodes) {
    node_row row{n.name, n.host, n.port, "unknown", n.name == h.balancer, n.platforms, {}};
    bool any_up = false, any_down = false;
    for (auto& name : n.platforms) {
      if (auto* p = epochs.find(name))
        (p->up ? any_up : any_down) = true;
    }
    row.state = row.balancer || any_up ? "up" : any_down ? "down" : "unknown";
    if (auto f = console.store_failures.find(n.name); f != console.store_failures.end())
      row.store = f->second;
    s.nodes.push_back(std::move(row));
  }
  s.topology = topology_of(reports);
  s.events = console.events.recent();
  return s;
}

history history_of(const std::string& platform,
                   const std::vector<messages::epoch_report>& reports) {
  history h{platform, {}};
  for (auto& r : reports)
    if (r.platform == platform)
      h.epochs.push_back(r);
  std::stable_sort(h.epochs.begin(), h.epochs.end(),
                   [](auto& a, auto& b) { return a.epoch < b.epoch; });
  return h;
}

messages::control parse_command(const std::string& text) {
  std::istringstream in(text);
  std::string verb, argument, extra;
  in >> verb >> argument >> extra;
  messages::control c;
  if (verb == "snapshot" || verb == "pause" || verb == "resume" || verb == "checkpoint") {
    if (!argument.empty())
      throw inspection_error("'" + verb + "' takes no argument");
  } else if (verb == "history") {
    if (argument.empty())
      throw inspection_error("'history' needs a platform name");
    if (!extra.empty())
      throw inspection_error("'history' takes one platform name");
  } else {
    throw inspection_error("unknown command '" + verb
                           + "' (snapshot, history NAME, pause, resume, checkpoint)");
  }
  c.verb = messages::parse_verb(verb);
  c.argument = argument;
  return c;
}

} // namespace eg::inspection
