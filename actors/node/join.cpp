#include "actors/node/join.hpp"

#include "actors/node/node.hpp"

#include "actors/interfaces.hpp"
#include "actors/node/network.hpp"
#include "actors/node/node_data.hpp"
#include "messages/handshake.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

namespace eg::actors {

namespace {

/// The key, in the joining node's store, of the cluster it joined: the
/// answer, and who gave it.
constexpr const char* joined_key = "joined-cluster";

struct kept_join {
  std::string cluster;  ///< the cluster file it ran with (to_toml)
  std::string from;     ///< HOST:PORT that answered
  std::string id;       ///< its cluster id
};

/// The cluster kept in the store, of `cluster_id` ("": of any id).
std::optional<kept_join> load_kept(const storage::store& db, const std::string& cluster_id) {
  auto text = db.get(storage::family::runs, joined_key);
  if (!text)
    return std::nullopt;
  try {
    auto j = nlohmann::json::parse(*text);
    auto id = j.at("cluster_id").get<std::string>();
    if (!cluster_id.empty() && id != cluster_id)
      return std::nullopt;
    return kept_join{j.at("cluster").get<std::string>(), j.at("from").get<std::string>(), id};
  } catch (const nlohmann::json::exception& e) {
    // (written by another version: asked again)
    spdlog::warn("the stored join record is unreadable ({}): asking again", e.what());
    return std::nullopt;
  }
}

/// The local address this machine reaches host:port from ("" when it has
/// no route): a UDP socket's connect() picks it without sending anything.
std::string local_address_towards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return {};
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET_ADDRSTRLEN] = {};
      if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
        out = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return out;
}

/// Whether a TCP port can be bound on `host` now.
bool port_free(const std::string& host, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

/// A free port on `host` whose next port is free too (the weights lane's).
uint16_t free_port_pair(const std::string& host) {
  for (int tries = 0; tries < 200; ++tries) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      break;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    socklen_t len = sizeof a;
    uint16_t port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    close(fd);
    if (port != 0 && port < 65535 && port_free(host, static_cast<uint16_t>(port + 1)))
      return port;
  }
  throw config::config_error("no free port on " + host + " for this node; give one with --port");
}

/// Asks the node at host:port to let this node join: the cluster file to
/// run with, or nullopt with `why` (unreachable, or "refused: ...").
std::optional<std::string> ask_to_join(cluster_asker& asker, const std::string& host,
                                       uint16_t port, const std::string& secret,
                                       const std::string& description, std::string& why) {
  std::optional<std::string> out;
  asker.ask("", host, port, secret, why,
            [&](caf::scoped_actor& self, const node_actor& node, const std::string& credentials) {
              self->request(node, std::chrono::seconds(10), member_atom::value, credentials,
                            description)
                .receive([&](std::string& cluster) { out = std::move(cluster); },
                         [&](caf::error& err) { why = asker.refusal_of(err); });
            });
  return out;
}

std::string address_of(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

/// The id of the cluster to join when none was given: the one the node at
/// host:port greets with (the id is no secret; the secret or the TLS
/// certificate still decides whether this node may join), else, where that
/// node does not answer, the one this node joined before (kept in its
/// store). Asked until one answers; nullopt when a signal ended the wait.
std::optional<std::string> learn_cluster_id(const join_request& r, const std::string& host,
                                            uint16_t port, const std::string& storage_dir) {
  std::optional<kept_join> kept;
  if (!r.fresh) {
    std::filesystem::create_directories(storage_dir);
    auto db = storage::store::open((std::filesystem::path(storage_dir) / r.name).string());
    kept = load_kept(*db, "");
  }
  using clock = std::chrono::steady_clock;
  auto next_note = clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::string why;
    try {
      auto id = messages::greeting_cluster_id(host, port, 3000);
      spdlog::info("node {}: the node at {} belongs to cluster '{}'", r.name,
                   address_of(host, port), id);
      return id;
    } catch (const messages::handshake_error& e) {
      // Something answers there, but not a node port of this version.
      throw config::config_error("--join " + r.address + ": " + e.what());
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (kept) {
      spdlog::info("node {}: {} does not answer ({}); asking to join cluster '{}' as before",
                   r.name, r.address, why, kept->id);
      return kept->id;
    }
    if (clock::now() >= next_note) {
      spdlog::info("node {}: still waiting for {} to answer ({})", r.name, r.address, why);
      next_note = clock::now() + std::chrono::seconds(10);
    }
    if (signalled_within(std::chrono::seconds(1), r.watch_signals)) {
      spdlog::info("signal received while asking to join: stopping");
      return std::nullopt;
    }
  }
}

} // namespace

std::pair<std::string, uint16_t> parse_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw config::config_error("--join " + text + ": expected HOST:PORT of a node of the cluster");
  int port = 0;
  try {
    size_t used = 0;
    port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1)
      port = 0;
  } catch (const std::logic_error&) {  // std::stoi: not a number, or out of range
    port = 0;
  }
  if (port <= 0 || port > 65535)
    throw config::config_error("--join " + text + ": the port is not a number in 1..65535");
  return {text.substr(0, colon), static_cast<uint16_t>(port)};
}

namespace {

/// The options checked before anything is asked.
void check_request(const join_request& r) {
  if (r.name.empty() || r.name == joiner_name || r.name == "console")
    throw config::config_error("--name: a joining node needs a name of its own (not '" + r.name +
                               "')");
  if (r.platforms < 1)
    throw config::config_error("--platforms: at least 1");
  if (!r.data_dir.empty() && !std::filesystem::is_directory(r.data_dir))
    throw config::config_error("--data " + r.data_dir + ": no such directory");
}

/// Who this node is, as it describes itself: its address as given, else as
/// it was (restarted: the cluster `kept` in its store), else found here;
/// `ask` gets the other nodes of a kept cluster, to ask when the dialled
/// one does not answer.
config::node_config describe_self(const join_request& r, std::optional<kept_join>& kept,
                                  const std::string& dial_host, uint16_t dial_port,
                                  std::vector<std::pair<std::string, uint16_t>>& ask) {
  config::node_config me;
  me.name = r.name;
  me.host.clear();  // (not the default 127.0.0.1: found below unless given or kept)
  me.joined = true;
  me.data_dir = r.data_dir;
  me.lane_port = r.lane_port;
  me.metrics_port = r.metrics_port;
  for (int k = 0; k < r.platforms; ++k) {
    config::platform_config p;
    p.name = r.name + std::to_string(k);
    p.threads = r.threads;
    me.platforms.push_back(p);
  }
  if (kept) {
    try {
      auto before = config::parse(kept->cluster, "the cluster kept in this node's store");
      for (auto& n : before.nodes) {
        if (n.name == r.name) {
          me.host = n.host;
          me.port = n.port;
        } else if (!(n.host == dial_host && n.port == dial_port)) {
          ask.emplace_back(n.host, n.port);
        }
      }
    } catch (const config::config_error& e) {
      spdlog::warn("node {}: {}; asking as a new node", r.name, e.what());
      kept.reset();
      me.host.clear();
      me.port = 0;
    }
  }
  if (!r.host.empty())
    me.host = r.host;
  if (me.host.empty()) {
    me.host = local_address_towards(dial_host, dial_port);
    if (me.host.empty())
      throw config::config_error("--join " + r.address + ": no route to that host from here");
  }
  if (r.port != 0)
    me.port = r.port;
  else if (me.port == 0)
    me.port = me.host != dial_host ? dial_port : free_port_pair(me.host);
  return me;
}

/// The cluster file a node answered (`from`), with this node's overrides
/// over it and its store where it looked for it, checked, and kept there.
config::cluster_config take_answer(const join_request& r, const std::string& answer,
                                   const std::string& from, const std::string& cluster_id,
                                   const std::string& storage_dir) {
  config::cluster_config cfg;
  try {
    cfg = config::parse(answer, "the cluster's settings from " + from);
    for (auto& o : r.overrides)
      config::apply_override(cfg, o);
    cfg.storage_dir = storage_dir;
    config::validate(cfg);
    cfg.node(r.name);
  } catch (const config::config_error& e) {
    throw config::config_error("joining through " + from + ": " + e.what());
  }
  std::filesystem::create_directories(storage_dir);
  auto db = storage::store::open((std::filesystem::path(storage_dir) / r.name).string());
  db->put(storage::family::runs, joined_key,
          nlohmann::json{{"cluster_id", cluster_id}, {"cluster", answer}, {"from", from}}.dump());
  spdlog::info("node {}: joined the cluster '{}' through {} ({} nodes)", r.name, cfg.id, from,
               cfg.nodes.size());
  return cfg;
}

} // namespace

std::optional<config::cluster_config> join_cluster(const join_request& r) {
  const auto [dial_host, dial_port] = parse_address(r.address);
  check_request(r);
  if (r.watch_signals) {
    // Before any thread starts (the store's, the actor system's): they all
    // inherit the mask, so SIGINT and SIGTERM reach sigtimedwait only (here,
    // then the node's signal watch) and never end the process unsaved.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  // What this node knows before it asks: the cluster id and secret, and
  // from its own overrides the store's directory and the TLS files.
  auto local = config::default_config();
  local.id = r.cluster_id;
  local.secret = r.secret;
  for (auto& o : r.overrides)
    config::apply_override(local, o);
  const auto storage_dir = local.storage_dir;
  if (local.id.empty()) {
    auto id = learn_cluster_id(r, dial_host, dial_port, storage_dir);
    if (!id)
      return std::nullopt;
    local.id = *id;
  }

  std::optional<kept_join> kept;
  if (!r.fresh) {
    std::filesystem::create_directories(storage_dir);
    auto db = storage::store::open((std::filesystem::path(storage_dir) / r.name).string());
    kept = load_kept(*db, local.id);
  }
  std::vector<std::pair<std::string, uint16_t>> ask{{dial_host, dial_port}};
  const auto me = describe_self(r, kept, dial_host, dial_port, ask);
  const auto description = config::member_toml(me);

  cluster_asker asker(local, r.name, joiner_name);  // (TLS: this node's certificate)
  std::string names;
  for (auto& p : me.platforms)
    names += (names.empty() ? "" : ", ") + p.name;
  spdlog::info("node {}: asking {} to join its cluster as {}:{} with platform{} {}", r.name,
               r.address, me.host, me.port, me.platforms.size() == 1 ? "" : "s", names);
  using clock = std::chrono::steady_clock;
  auto next_note = clock::now() + std::chrono::seconds(10);
  const auto give_up_on_up = clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::string waits;
    for (auto& [host, port] : ask) {
      std::string why;
      const auto from = address_of(host, port);
      if (auto answer = ask_to_join(asker, host, port, local.secret, description, why))
        return take_answer(r, *answer, from, local.id, storage_dir);
      if (why.rfind("refused the handshake", 0) == 0)  // its front door: another cluster, secret
        throw config::config_error("node " + from + " " + why);
      // Refused because a node of that name is up: the previous run of this
      // node, not yet seen to be gone (a crash within cluster.peer_timeout),
      // asked again for a minute. Any other refusal is final.
      if (why.rfind("refused: ", 0) == 0 &&
          (why.find("is up") == std::string::npos || clock::now() >= give_up_on_up))
        throw config::config_error("node " + from + " " + why);
      waits += (waits.empty() ? "" : "; ") + from + ": " + why;
    }
    if (clock::now() >= next_note) {
      spdlog::info("node {}: still asking to join ({})", r.name, waits);
      next_note = clock::now() + std::chrono::seconds(10);
    }
    if (signalled_within(std::chrono::seconds(1), r.watch_signals)) {
      spdlog::info("signal received while asking to join: stopping");
      return std::nullopt;
    }
  }
}

config::cluster_config with_stored_members(const config::cluster_config& cfg,
                                           const std::string& node, storage::store& db,
                                           bool fresh) {
  auto text = db.get(storage::family::runs, members_key);
  if (fresh || !text || text->empty())
    return cfg;
  auto out = cfg;
  try {
    for (auto& m : config::parse_members(*text, "the members kept in node " + node + "'s store")) {
      m.joined = true;
      auto same = std::find_if(out.nodes.begin(), out.nodes.end(),
                               [&](auto& n) { return n.name == m.name; });
      if (same == out.nodes.end())
        out.nodes.push_back(std::move(m));
      else if (same->joined)
        *same = std::move(m);  // (the cluster file now lists it: the file's entry stays)
    }
    config::validate(out);
  } catch (const config::config_error& e) {
    spdlog::warn("node {}: the nodes that joined the cluster, as its store keeps them, are left "
                 "out: {}",
                 node, e.what());
    return cfg;
  }
  std::string names;
  for (auto& n : out.nodes)
    if (n.joined)
      names += (names.empty() ? "" : ", ") + n.name;
  if (!names.empty())
    spdlog::info("node {}: nodes that joined the cluster before: {}", node, names);
  return out;
}

} // namespace eg::actors
