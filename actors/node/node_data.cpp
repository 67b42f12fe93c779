#include "actors/node/node_data.hpp"
#include "common/error.hpp"

#include "algorithms/edgegossip/aggregator.hpp"
#include "storage/store.hpp"

#include <zlib.h>

#include "actors/balancer/inspection.hpp"
#include "actors/interfaces.hpp"
#include "actors/node/network.hpp"
#include "actors/wire.hpp"
#include "data/load.hpp"
#include "messages/door.hpp"
#include "storage/store.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

namespace eg::actors {

std::vector<double> resolve_shares(const std::vector<config::platform_config>& ps) {
  double given = 0;
  size_t unset = 0;
  for (auto& p : ps) {
    given += p.share;
    unset += p.share > 0 ? 0 : 1;
  }
  std::vector<double> shares;
  for (auto& p : ps)
    shares.push_back(p.share > 0 ? p.share
                                 : std::max(0.0, 1.0 - given) / static_cast<double>(unset));
  return shares;
}

bool reads_own_data(const config::node_config& me, const std::string& override_dir) {
  if (!override_dir.empty() || !me.data_dir.empty())
    return true;
  return std::any_of(me.platforms.begin(), me.platforms.end(),
                     [](auto& p) { return !p.data_dir.empty(); });
}

namespace {

/// One directory a node reads: its own (platform "") or a platform's.
struct part {
  std::string platform;
  data::source src;
  std::string name() const {
    return platform.empty() ? "'" + src.dir + "'" : "platform " + platform + "'s '" + src.dir + "'";
  }
};

std::vector<part> parts_of(const config::cluster_config& cfg, const config::node_config& me,
                           const std::string& override_dir, bool own) {
  std::vector<part> parts;
  if (!own) {
    parts.push_back({"", {cfg.data.dir, cfg.data.format, cfg.data.test_dir, cfg.data.validation}});
    return parts;
  }
  const std::string node_dir = !override_dir.empty() ? override_dir : me.data_dir;
  const std::string node_format = me.data_format.empty() ? cfg.data.format : me.data_format;
  std::string without;  // a platform with no directory of its own
  for (auto& p : me.platforms)
    if (p.data_dir.empty() && without.empty())
      without = p.name;
  if (!without.empty()) {
    if (node_dir.empty())
      throw data::data_error("platform " + without + " of node " + me.name +
                             " has no data directory while other platforms of the node have "
                             "theirs: give it one (nodes.platforms.data), or give node " +
                             me.name + " one (nodes.data or --data) for its platforms without");
    parts.push_back({"", {node_dir, node_format, me.test_dir, cfg.data.validation}});
  } else if (!node_dir.empty()) {
    spdlog::warn("node {}: its data directory '{}' is not read: every platform of the node has "
                 "a directory of its own",
                 me.name, node_dir);
  }
  for (auto& p : me.platforms)
    if (!p.data_dir.empty())
      parts.push_back({p.name,
                       {p.data_dir, p.data_format.empty() ? node_format : p.data_format,
                        p.test_dir, cfg.data.validation}});
  return parts;
}

/// The classes of every part, in a list: the first part's, then the
/// others' new ones in their order.
std::vector<std::string> union_of(const std::vector<data::node_data>& read) {
  std::vector<std::string> all;
  for (auto& r : read)
    for (auto& c : r.train.classes)
      if (std::find(all.begin(), all.end(), c) == all.end())
        all.push_back(c);
  return all;
}

} // namespace

loaded_data load_node_data(const config::cluster_config& cfg, const config::node_config& me,
                           const std::string& override_dir,
                           const std::vector<std::string>& classes) {
  loaded_data out;
  out.own = reads_own_data(me, override_dir);
  const auto parts = parts_of(cfg, me, override_dir, out.own);
  data::read_options o;
  o.classes = classes;
  o.resize = cfg.data.resize;
  o.on_bad_sample = cfg.data.on_bad_sample;
  o.label_column = cfg.data.label_column;
  // Decoded image folders are kept beside the node's store and reused while
  // the files are unchanged.
  o.cache_dir = (std::filesystem::path(cfg.storage_dir) / (me.name + "-data-cache")).string();
  std::vector<data::node_data> read;
  int64_t skipped = 0;
  for (auto& p : parts) {
    data::node_data r;
    try {
      r = data::load(p.src, o, cfg.data.train_samples, cfg.data.test_samples, cfg.seed);
    } catch (const data::data_error& e) {
      if (p.platform.empty())
        throw;
      throw data::data_error("platform " + p.platform + " of node " + me.name + ": " + e.what());
    }
    for (auto& w : r.warnings)
      spdlog::warn("node {}: data: {}", me.name, w);
    skipped += r.skipped;
    if (r.train.size() == 0)
      throw data::data_error(p.name() + " holds no training samples");
    // Every directory of the node is read at the first one's image size.
    if (read.empty() && r.train.images())
      o.shape = r.train.shape;
    read.push_back(std::move(r));
    out.sources += p.src.dir + "|" + p.src.format + "|" + p.src.test_dir + ";";
  }
  if (skipped > 0)
    spdlog::warn("node {}: {} samples could not be read and were skipped "
                 "(data.on_bad_sample = \"fail\" refuses them instead)",
                 me.name, skipped);
  if (classes.empty() && read.size() > 1) {
    const auto all = union_of(read);
    for (size_t i = 0; i < read.size(); ++i) {
      read[i].train.relabel(all, parts[i].name());
      if (read[i].test)
        read[i].test->relabel(all, parts[i].name() + " (test)");
    }
  }
  std::vector<data::dataset> trains, tests;
  std::vector<std::string> names, test_names, test_from;
  int64_t at = 0;
  for (size_t i = 0; i < read.size(); ++i) {
    auto& r = read[i];
    const auto n = r.train.size();
    if (parts[i].platform.empty())
      out.node_part = {at, at + n};
    else
      out.platform_parts[parts[i].platform] = {at, at + n};
    at += n;
    names.push_back(parts[i].name());
    trains.push_back(std::move(r.train));
    if (r.test && r.test->size() > 0) {
      test_names.push_back(parts[i].name() + " (test)");
      tests.push_back(std::move(*r.test));
    }
    test_from.push_back(read.size() > 1 ? (parts[i].platform.empty() ? "the node's: "
                                                                     : parts[i].platform + ": ") +
                                              r.test_from
                                        : r.test_from);
  }
  auto train = trains.size() == 1 ? std::move(trains.front()) : data::concat(trains, names);
  std::optional<data::dataset> test;
  if (!tests.empty())
    test = tests.size() == 1 ? std::move(tests.front()) : data::concat(tests, test_names);
  // The node's own normalisation until the balancer sends the cluster's
  // (combined from every node's sums; the same where the nodes share one
  // data set).
  const auto sums = train.local_moments();
  const auto norm = sums.finish();
  out.stats = data::to_text(sums);
  train.norm = norm;
  if (test)
    test->norm = norm;
  if (cfg.data.augment && !train.images())
    spdlog::warn("node {}: data.augment applies to images; the data has {}", me.name,
                 train.shape.to_string());
  std::string from;
  for (auto& f : test_from)
    from += (from.empty() ? "" : "; ") + f;
  out.train = std::move(train);
  out.test = std::move(test);
  out.test_from = out.test ? from : "none (" + from + ")";
  return out;
}

learning::shards partition_shards(const config::cluster_config& cfg,
                                  const config::node_config& me,
                                  const std::vector<config::platform_config>& all,
                                  const loaded_data& data) {
  const auto labels = data.train.label_vector();
  auto split = [&](const std::vector<int64_t>& l, const std::vector<double>& shares) {
    return cfg.data.partition == "dirichlet"
             ? learning::partition_dirichlet(l, shares, cfg.data.alpha,
                                             data.train.num_classes(), cfg.seed)
             : learning::partition_iid(l, shares, cfg.seed);
  };
  if (!data.own) {
    // The cluster file's platforms partition the data; a node that joined
    // later leaves that partition as it is (the others' shards, checkpoints
    // and rankings stay valid): each of its platforms trains on a sample
    // of the average shard's size, drawn from its own seed.
    auto file = cfg.file_platforms();
    auto out = split(labels, resolve_shares(file));
    const auto average = file.empty() ? labels.size() : labels.size() / file.size();
    for (size_t i = file.size(); i < all.size(); ++i) {
      std::vector<int64_t> every(labels.size());
      std::iota(every.begin(), every.end(), int64_t{0});
      std::mt19937_64 rng(cfg.seed * 1000003 + std::hash<std::string>{}(all[i].name));
      std::shuffle(every.begin(), every.end(), rng);
      every.resize(std::min(average, every.size()));
      std::sort(every.begin(), every.end());
      out.push_back(std::move(every));
    }
    return out;
  }
  learning::shards out(all.size());
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].name == name)
        return i;
    return all.size();
  };
  // Platforms with a directory of their own train on exactly it.
  std::vector<config::platform_config> rest;
  for (auto& p : me.platforms) {
    auto own = data.platform_parts.find(p.name);
    const auto i = index_of(p.name);
    if (own == data.platform_parts.end()) {
      rest.push_back(p);
      continue;
    }
    if (i == all.size())
      continue;
    out[i].resize(static_cast<size_t>(own->second.second - own->second.first));
    std::iota(out[i].begin(), out[i].end(), own->second.first);
  }
  if (rest.empty())
    return out;
  // The others split the node's directory by their shares.
  auto shares = resolve_shares(rest);
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  for (auto& x : shares)
    x = total > 0 ? x / total : 1.0 / static_cast<double>(shares.size());
  const auto [first, last] = data.node_part;
  std::vector<int64_t> part(labels.begin() + first, labels.begin() + last);
  const auto local = split(part, shares);
  for (size_t k = 0; k < rest.size(); ++k) {
    const auto i = index_of(rest[k].name);
    if (i == all.size())
      continue;
    out[i] = local[k];
    for (auto& x : out[i])
      x += first;
  }
  return out;
}

namespace {

constexpr const char* classes_key = "cluster-classes";

/// The class list node `peer` answers with (empty: it knows none yet),
/// and the cluster's samples' shape; nullopt with `why` when it cannot be
/// asked or refuses.
std::optional<cluster_classes_answer> ask_node(cluster_asker& asker,
                                               const config::node_config& peer,
                                               const std::string& secret, std::string& why) {
  std::optional<cluster_classes_answer> out;
  asker.ask(peer.name, peer.host, peer.port, secret, why,
            [&](caf::scoped_actor& self, const node_actor& node, const std::string& credentials) {
              self->request(node, std::chrono::seconds(5), classes_atom::value, credentials)
                .receive(
                  [&](std::vector<std::string>& classes, std::string& shape) {
                    out = cluster_classes_answer{std::move(classes), std::move(shape), peer.name};
                  },
                  [&](caf::error& err) { why = asker.refusal_of(err); });
            });
  return out;
}


std::optional<cluster_classes_answer> saved_classes(const storage::store& db,
                                                    const std::string& cluster_id) {
  auto v = db.get(storage::family::runs, classes_key);
  if (!v)
    return std::nullopt;
  try {
    auto j = nlohmann::json::parse(*v);
    if (j.at("cluster").get<std::string>() != cluster_id)
      return std::nullopt;
    cluster_classes_answer out;
    out.from = j.at("from").get<std::string>();
    out.classes = j.at("classes").get<std::vector<std::string>>();
    out.shape = j.value("shape", std::string{});  // (kept by an older version without it)
    if (out.classes.size() < 2)
      return std::nullopt;
    return out;
  } catch (const nlohmann::json::exception& e) {
    // A record this version cannot read: the classes are asked for again.
    spdlog::warn("the cluster's stored classes are unreadable ({}): asking again", e.what());
    return std::nullopt;
  }
}

} // namespace

bool signalled_within(std::chrono::milliseconds d, bool watch) {
  if (!watch) {
    std::this_thread::sleep_for(d);
    return false;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec t{static_cast<time_t>(d.count() / 1000), static_cast<long>(d.count() % 1000) * 1'000'000};
  return sigtimedwait(&set, nullptr, &t) > 0;
}

std::optional<cluster_classes_answer> ask_cluster_classes(const config::cluster_config& cfg,
                                                          const std::string& node,
                                                          storage::store& db, bool fresh,
                                                          bool watch_signals) {
  const auto balancer = cfg.balancer().name;
  if (!fresh)
    if (auto saved = saved_classes(db, cfg.id)) {
      spdlog::info("node {}: the cluster's {} classes as node {} gave them (kept in its store)",
                   node, saved->classes.size(), saved->from);
      return saved;
    }
  cluster_asker asker(cfg, node, node);
  // The balancer node's data gives the list; any node told it answers too.
  std::vector<std::string> order{balancer};
  for (auto& n : cfg.nodes)
    if (n.name != node && n.name != balancer)
      order.push_back(n.name);
  spdlog::info("node {}: data.classes is unset: asking node {} for the classes of its data, "
               "which are the cluster's",
               node, balancer);
  using clock = std::chrono::steady_clock;
  auto next_note = clock::now() + std::chrono::seconds(10);
  std::map<std::string, size_t> refusals;
  for (;;) {
    std::string waits;
    for (auto& peer : order) {
      std::string why;
      auto got = ask_node(asker, cfg.node(peer), cfg.secret, why);
      if (got && got->classes.size() >= 2) {
        spdlog::info("node {}: the cluster's {} classes from node {}{}", node,
                     got->classes.size(), peer,
                     got->shape.empty() ? std::string{} : " (samples of " + got->shape + ")");
        try {
          db.put(storage::family::runs, classes_key,
                 nlohmann::json{{"cluster", cfg.id}, {"from", peer}, {"classes", got->classes},
                                {"shape", got->shape}}
                   .dump());
        } catch (const std::exception& e) {
          spdlog::warn("node {}: the cluster's classes not kept in the store: {}", node, eg::describe(e));
        }
        return got;
      }
      if (got)
        why = "does not know them yet";
      if (why.rfind("refused", 0) == 0) {
        auto n = refusals[peer]++;
        if (n == 0 || n % 30 == 0)
          spdlog::error("node {}: node {} {}", node, peer, why);
      }
      waits += (waits.empty() ? "" : "; ") + peer + ": " + why;
    }
    if (clock::now() >= next_note) {
      spdlog::info("node {}: still waiting for the cluster's classes ({})", node, waits);
      next_note = clock::now() + std::chrono::seconds(10);
    }
    if (signalled_within(std::chrono::seconds(1), watch_signals)) {
      spdlog::info("signal received while waiting for the cluster's classes: stopping");
      return std::nullopt;
    }
  }
}

void tell_cluster_node_cannot_start(const config::cluster_config& cfg, const std::string& node,
                                    const std::string& why,
                                    std::chrono::milliseconds patience) {
  const auto balancer = cfg.balancer().name;
  if (cfg.nodes.size() < 2 || balancer == node)
    return;
  std::vector<std::string> platforms;
  for (auto& p : cfg.node(node).platforms)
    platforms.push_back(p.name);
  std::vector<std::string> order{balancer};
  for (auto& n : cfg.nodes)
    if (n.name != node && n.name != balancer)
      order.push_back(n.name);
  try {
    cluster_asker asker(cfg, node, node);
    const auto until = std::chrono::steady_clock::now() + patience;
    std::string waits;
    do {
      waits.clear();
      for (auto& peer : order) {
        std::string problem;
        bool taken = false;
        const auto& n = cfg.node(peer);
        asker.ask(peer, n.host, n.port, cfg.secret, problem,
                  [&](caf::scoped_actor& self, const node_actor& remote,
                      const std::string& credentials) {
                    self->request(remote, std::chrono::seconds(3), withdraw_atom::value,
                                  credentials, node, platforms, why)
                      .receive([&](bool ok) { taken = ok; },
                               [&](caf::error& err) { problem = asker.refusal_of(err); });
                  });
        if (taken) {
          spdlog::info("node {}: told node {} that it cannot start: the run goes on without "
                       "its platforms",
                       node, peer);
          return;
        }
        waits += (waits.empty() ? "" : "; ") + peer + ": "
                 + (problem.empty() ? "knows no balancer yet" : problem);
      }
    } while (std::chrono::steady_clock::now() < until
             && (std::this_thread::sleep_for(std::chrono::seconds(1)), true));
    spdlog::warn("node {}: could not tell the cluster that it cannot start ({}): its nodes may "
                 "wait for its platforms as cluster.quorum says",
                 node, waits);
  } catch (const std::exception& e) {
    spdlog::warn("node {}: could not tell the cluster that it cannot start: {}", node,
                 eg::describe(e));
  }
}

std::optional<loaded_data> load_with_cluster_classes(const config::cluster_config& cfg,
                                                     const config::node_config& me,
                                                     const std::string& override_dir,
                                                     storage::store& db, bool fresh,
                                                     bool watch_signals,
                                                     std::vector<std::string>& answers,
                                                     std::string& shape_answer) {
  const bool hosts_balancer = cfg.balancer().name == me.name;
  auto classes = cfg.data.classes;
  std::string classes_from, cluster_shape;
  if (classes.empty() && cfg.nodes.size() > 1 && !hosts_balancer &&
      reads_own_data(me, override_dir)) {
    auto asked = ask_cluster_classes(cfg, me.name, db, fresh, watch_signals);
    if (!asked)
      return std::nullopt;
    classes = std::move(asked->classes);
    cluster_shape = asked->shape;
    classes_from = asked->from;
  }
  std::optional<loaded_data> loaded;
  try {
    loaded = load_node_data(cfg, me, override_dir, classes);
  } catch (const data::data_error& e) {
    if (classes_from.empty())
      throw;
    std::string list;
    for (auto& c : classes)
      list += (list.empty() ? "" : ", ") + c;
    throw data::data_error(std::string(e.what()) + " (the cluster's classes are node " +
                           classes_from + "'s data's: " + list +
                           "; set data.classes in the cluster file to name every class)");
  }
  const auto ours = loaded->train.shape.to_string();
  // Refused early: the balancer would refuse its platforms at join.
  if (!cluster_shape.empty() && ours != cluster_shape)
    throw data::data_error("node " + me.name + "'s data is " + data::signature(loaded->train.describe()) +
                           ", the cluster's (node " + classes_from + "'s data) has samples of " +
                           cluster_shape + ": one model trains on every node's data, so its "
                           "samples must have one shape (convert this node's images, or give "
                           "it other data)");
  answers = hosts_balancer && cfg.data.classes.empty() ? loaded->train.classes : classes;
  shape_answer = hosts_balancer ? ours : cluster_shape;
  return loaded;
}

namespace {

/// The store key of a platform's aggregated points: they are reused while
/// the shard, the data (`data`: the directories read and the training data's
/// sums) and the aggregator's settings stay the same.
std::string aggregates_key(const std::string& platform, const config::cluster_config& cfg,
                           const std::vector<int64_t>& shard, const std::string& data) {
  auto settings = cfg.edgegossip.aggregator + "/" + std::to_string(cfg.edgegossip.aggregation_ratio)
                  + "/" + std::to_string(cfg.seed) + "/" + data;
  auto crc = crc32(0L, reinterpret_cast<const Bytef*>(settings.data()),
                   static_cast<uInt>(settings.size()));
  crc = crc32(crc, reinterpret_cast<const Bytef*>(shard.data()),
              static_cast<uInt>(shard.size() * sizeof(int64_t)));
  return platform + "/" + std::to_string(shard.size()) + "-" + std::to_string(crc);
}

} // namespace

std::map<std::string, std::shared_ptr<const learning::aggregated_points>>
aggregate_local(const config::cluster_config& cfg, const std::vector<config::platform_config>& all,
                const learning::shards& shards, const learning::dataset& train,
                const std::string& data, const std::vector<std::string>& local,
                storage::store& db) {
  std::map<std::string, std::shared_ptr<const learning::aggregated_points>> out;
  std::vector<std::pair<size_t, std::future<learning::aggregated_points>>> jobs;
  auto opt = learning::aggregator_from_name(cfg.edgegossip.aggregator,
                                            cfg.edgegossip.aggregation_ratio, cfg.seed);
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::find(local.begin(), local.end(), all[i].name) == local.end())
      continue;
    auto key = aggregates_key(all[i].name, cfg, shards[i], data);
    if (auto saved = db.get(storage::family::aggregates, key)) {
      try {
        out[all[i].name] = std::make_shared<const learning::aggregated_points>(
          learning::deserialize_aggregated(*saved));
        spdlog::info("[{}] {} aggregated points reused from the store", all[i].name,
                     out[all[i].name]->size());
        continue;
      } catch (const std::exception& e) {
        spdlog::warn("[{}] stored aggregated points unusable ({}); generating again",
                     all[i].name, eg::describe(e));
      }
    }
    jobs.emplace_back(i, std::async(std::launch::async, [&train, &shards, i, opt] {
                        return learning::aggregate(train, shards[i], opt);
                      }));
  }
  for (auto& [i, job] : jobs) {
    const auto& name = all[i].name;
    auto a = job.get();
    spdlog::info("[{}] {} aggregated points ({}): reduction {:.2f} s, division {:.2f} s, "
                 "means {:.2f} s",
                 name, a.size(), cfg.edgegossip.aggregator, a.reduce_seconds, a.divide_seconds,
                 a.mean_seconds);
    try {
      db.put(storage::family::aggregates, aggregates_key(name, cfg, shards[i], data),
             learning::serialize(a));
    } catch (const storage::storage_error& e) {
      // A store that cannot write is reported by the store actor.
      spdlog::warn("[{}] aggregated points not stored: {}", name, e.what());
    }
    out[name] = std::make_shared<const learning::aggregated_points>(std::move(a));
  }
  return out;
}

} // namespace eg::actors
