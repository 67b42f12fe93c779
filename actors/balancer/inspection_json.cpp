#include "actors/balancer/inspection.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

// What the console sees as JSON: snapshots, histories and answers written
// and read back (the console reads what a node answers).

namespace eg::inspection {

using json = nlohmann::json;

// -- JSON ------------------------------------------------------------------------

namespace {

template <class T>
void read(const json& j, const char* key, T& out) {
  j.at(key).get_to(out);
}

/// nlohmann writes a NaN or infinite number (a diverged loss) as null.
void read(const json& j, const char* key, double& out) {
  auto& v = j.at(key);
  out = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

json traffic_json(const messages::traffic& t) {
  return {{"values", t.values}, {"indices", t.indices}, {"weights", t.weights},
          {"headers", t.headers}, {"packing_saved", t.packing_saved}};
}

messages::traffic traffic_from(const json& j) {
  messages::traffic t;
  read(j, "values", t.values);
  read(j, "indices", t.indices);
  read(j, "weights", t.weights);
  read(j, "headers", t.headers);
  if (j.contains("packing_saved"))
    read(j, "packing_saved", t.packing_saved);
  return t;
}

json report_json(const messages::epoch_report& r) {
  json from = json::array();
  for (auto& t : r.received_from)
    from.push_back({{"peer", t.peer}, {"messages", t.messages}, {"bytes", t.bytes}});
  return {{"platform", r.platform},
          {"node", r.node},
          {"epoch", r.epoch},
          {"ratio", r.ratio},
          {"wall_seconds", r.wall_seconds},
          {"compute_seconds", r.compute_seconds},
          {"samples", r.samples},
          {"planned_samples", r.planned_samples},
          {"iterations", r.iterations},
          {"train_loss", r.train_loss},
          {"test_loss", r.test_loss},
          {"test_accuracy", r.test_accuracy},
          {"gossip_weight", r.gossip_weight},
          {"bytes_sent", r.bytes_sent},
          {"bytes_received", r.bytes_received},
          {"messages_sent", r.messages_sent},
          {"messages_received", r.messages_received},
          {"messages_refused", r.messages_refused},
          {"rollbacks", r.rollbacks},
          {"received_from", from},
          {"predicted_seconds", r.predicted_seconds},
          {"commits", r.commits},
          {"staleness", r.staleness},
          {"server_version", r.server_version},
          {"sent", traffic_json(r.sent)},
          {"received", traffic_json(r.received)}};
}

messages::epoch_report report_from(const json& j) {
  messages::epoch_report r;
  read(j, "platform", r.platform);
  read(j, "node", r.node);
  read(j, "epoch", r.epoch);
  read(j, "ratio", r.ratio);
  read(j, "wall_seconds", r.wall_seconds);
  read(j, "compute_seconds", r.compute_seconds);
  read(j, "samples", r.samples);
  read(j, "planned_samples", r.planned_samples);
  read(j, "iterations", r.iterations);
  read(j, "train_loss", r.train_loss);
  read(j, "test_loss", r.test_loss);
  read(j, "test_accuracy", r.test_accuracy);
  read(j, "gossip_weight", r.gossip_weight);
  read(j, "bytes_sent", r.bytes_sent);
  read(j, "bytes_received", r.bytes_received);
  read(j, "messages_sent", r.messages_sent);
  read(j, "messages_received", r.messages_received);
  read(j, "messages_refused", r.messages_refused);
  if (j.contains("rollbacks"))  // (a node of an earlier release sends none)
    read(j, "rollbacks", r.rollbacks);
  for (auto& t : j.at("received_from"))
    r.received_from.push_back(messages::peer_traffic{t.at("peer").get<std::string>(),
                                                     t.at("messages").get<uint64_t>(),
                                                     t.at("bytes").get<uint64_t>()});
  read(j, "predicted_seconds", r.predicted_seconds);
  if (j.contains("commits")) {
    read(j, "commits", r.commits);
    read(j, "staleness", r.staleness);
    read(j, "server_version", r.server_version);
  }
  if (j.contains("sent"))
    r.sent = traffic_from(j.at("sent"));
  if (j.contains("received"))
    r.received = traffic_from(j.at("received"));
  return r;
}

template <class F>
auto parsed(const std::string& text, const char* what, F&& f) {
  try {
    return f(json::parse(text));
  } catch (const json::exception& e) {
    throw inspection_error(std::string{"not a "} + what + ": " + e.what());
  }
}

} // namespace

std::string to_json(const snapshot& s) {
  auto& c = s.cluster;
  json j;
  j["cluster"] = {{"id", c.id},
                  {"strategy", c.strategy},
                  {"schedule", c.schedule},
                  {"run", c.run},
                  {"state", c.state},
                  {"elapsed_seconds", c.elapsed_seconds},
                  {"epoch", c.epoch},
                  {"epochs", c.epochs},
                  {"evaluated_epoch", c.evaluated_epoch},
                  {"averaged_accuracy", c.averaged_accuracy},
                  {"accuracy_by_node", c.accuracy_by_node},
                  {"platforms_up", c.platforms_up},
                  {"platforms_down", c.platforms_down},
                  {"balancer", c.balancer},
                  {"balancer_reachable", c.balancer_reachable},
                  {"server", c.server},
                  {"server_version", c.server_version},
                  {"via", c.via}};
  j["platforms"] = json::array();
  for (auto& p : s.platforms)
    j["platforms"].push_back({{"name", p.name},
                              {"node", p.node},
                              {"state", p.state},
                              {"paused", p.paused},
                              {"epoch", p.epoch},
                              {"progress", p.progress},
                              {"iterations", p.iterations},
                              {"samples", p.samples},
                              {"throughput", p.throughput},
                              {"ratio", p.ratio},
                              {"train_loss", p.train_loss},
                              {"test_accuracy", p.test_accuracy},
                              {"bytes_in", p.bytes_in},
                              {"bytes_out", p.bytes_out},
                              {"messages_in", p.messages_in},
                              {"messages_out", p.messages_out},
                              {"exchange_rate", p.exchange_rate},
                              {"checkpoint_epochs", p.checkpoint_epochs},
                              {"checkpoint_at", p.checkpoint_at},
                              {"commits", p.commits},
                              {"commit_rate", p.commit_rate},
                              {"staleness", p.staleness}});
  j["nodes"] = json::array();
  for (auto& n : s.nodes)
    j["nodes"].push_back({{"name", n.name},
                          {"host", n.host},
                          {"port", n.port},
                          {"state", n.state},
                          {"balancer", n.balancer},
                          {"platforms", n.platforms},
                          {"store", n.store}});
  j["topology"] = json::array();
  for (auto& l : s.topology)
    j["topology"].push_back(
      {{"from", l.from}, {"to", l.to}, {"messages", l.messages}, {"bytes", l.bytes}});
  j["events"] = json::array();
  for (auto& e : s.events)
    j["events"].push_back({{"at", e.at}, {"kind", e.kind}, {"text", e.text}});
  return j.dump();
}

std::string to_json(const history& h) {
  json epochs = json::array();
  for (auto& r : h.epochs)
    epochs.push_back(report_json(r));
  return json{{"platform", h.platform}, {"epochs", epochs}}.dump();
}

std::string to_json(const answer& a) {
  return json{{"ok", a.ok}, {"text", a.text}}.dump();
}

snapshot snapshot_from_json(const std::string& text) {
  return parsed(text, "snapshot", [](const json& j) {
    snapshot s;
    auto& c = j.at("cluster");
    auto& h = s.cluster;
    read(c, "id", h.id);
    read(c, "strategy", h.strategy);
    read(c, "schedule", h.schedule);
    read(c, "run", h.run);
    read(c, "state", h.state);
    read(c, "elapsed_seconds", h.elapsed_seconds);
    read(c, "epoch", h.epoch);
    read(c, "epochs", h.epochs);
    read(c, "evaluated_epoch", h.evaluated_epoch);
    read(c, "averaged_accuracy", h.averaged_accuracy);
    if (c.contains("accuracy_by_node"))  // absent from a node that predates it
      read(c, "accuracy_by_node", h.accuracy_by_node);
    read(c, "platforms_up", h.platforms_up);
    read(c, "platforms_down", h.platforms_down);
    read(c, "balancer", h.balancer);
    read(c, "balancer_reachable", h.balancer_reachable);
    if (c.contains("server")) {  // absent from a node that predates the server
      read(c, "server", h.server);
      read(c, "server_version", h.server_version);
    }
    read(c, "via", h.via);
    for (auto& p : j.at("platforms")) {
      platform_row r;
      read(p, "name", r.name);
      read(p, "node", r.node);
      read(p, "state", r.state);
      read(p, "paused", r.paused);
      read(p, "epoch", r.epoch);
      read(p, "progress", r.progress);
      read(p, "iterations", r.iterations);
      read(p, "samples", r.samples);
      read(p, "throughput", r.throughput);
      read(p, "ratio", r.ratio);
      read(p, "train_loss", r.train_loss);
      read(p, "test_accuracy", r.test_accuracy);
      read(p, "bytes_in", r.bytes_in);
      read(p, "bytes_out", r.bytes_out);
      read(p, "messages_in", r.messages_in);
      read(p, "messages_out", r.messages_out);
      read(p, "exchange_rate", r.exchange_rate);
      read(p, "checkpoint_epochs", r.checkpoint_epochs);
      read(p, "checkpoint_at", r.checkpoint_at);
      if (p.contains("commits")) {
        read(p, "commits", r.commits);
        read(p, "commit_rate", r.commit_rate);
        read(p, "staleness", r.staleness);
      }
      s.platforms.push_back(std::move(r));
    }
    for (auto& n : j.at("nodes")) {
      node_row r;
      read(n, "name", r.name);
      read(n, "host", r.host);
      read(n, "port", r.port);
      read(n, "state", r.state);
      read(n, "balancer", r.balancer);
      read(n, "platforms", r.platforms);
      r.store = n.value("store", std::string{});
      s.nodes.push_back(std::move(r));
    }
    for (auto& l : j.at("topology"))
      s.topology.push_back(link{l.at("from").get<std::string>(), l.at("to").get<std::string>(),
                                l.at("messages").get<uint64_t>(), l.at("bytes").get<uint64_t>()});
    for (auto& e : j.at("events"))
      s.events.push_back(event{e.at("at").get<double>(), e.at("kind").get<std::string>(),
                               e.at("text").get<std::string>()});
    return s;
  });
}

history history_from_json(const std::string& text) {
  return parsed(text, "history", [](const json& j) {
    history h;
    read(j, "platform", h.platform);
    for (auto& r : j.at("epochs"))
      h.epochs.push_back(report_from(r));
    return h;
  });
}

answer answer_from_json(const std::string& text) {
  return parsed(text, "command answer", [](const json& j) {
    return answer{j.at("ok").get<bool>(), j.at("text").get<std::string>()};
  });
}

} // namespace eg::inspection
