// Cluster files are TOML. Every key is optional: a missing key keeps its
// default (default_config()), except that [[nodes]], when present, replaces
// the default nodes entirely.
//
//   [cluster]   id, seed, balancer, secret, quorum, majority, transport, cpu_limiter,
//               heartbeat_interval, peer_timeout, gossip_queue, gossip_max_wait,
//               on_store_failure
//   [cluster.tls] certificate, key, ca
//   [data]      name, dir, format, test_dir, validation, classes, resize, on_bad_sample,
//               label_column, augment, partition, alpha, train_samples, test_samples
//   [train]     model, lr, momentum, batch, epochs, max_iterations, evaluate_every,
//               average_every, lr_schedule, lr_warmup, max_rollbacks,
//               rollback_lr_factor
//   [strategy]  name, gossip, schedule, topology, out_peers, exchange_probability, density,
//               consensus_step, sparse_values, drift_memory, drift_gain, overlap, gossip_every,
//               server, commit_steps, staleness, check_period, min_interval, target_loss
//   [edgegossip] aggregator, aggregation_ratio, selection, merge, p_threshold, f_threshold,
//                deadline, count_network, first_epoch_share
//   [split]     mode, model, in_flight, schedule, lr_warmup, lr_warmup_rule, sg_hidden, sg_lr, sg_conditioned, sg_conv_layers,
//               resend_after, runaway_guard, max_rollbacks, rollback_lr_factor,
//               stuck_after
//   [storage]   dir
//   [output]    dir
//   [[nodes]]   name, host, port, lane_port, metrics_port, cpu_limit, data, data_format,
//               test_dir, joined (written by a node that joined with --join),
//               cpu_schedule = [{at = 30.0, cores = 0.25}, ...]
//   [[nodes.platforms]]
//               name, threads, share, slowdown, device, data, data_format, test_dir,
//               interference = [{at = 10.0, slowdown = 3.0}, ...]
//   [[nodes.corunners]]
//               kind, workers, at, until
//   [[stages]]  node, layers, slowdown   (a split model's stages, first to last)
//
// configs/local.toml explains every key. Unknown keys and wrong types are
// errors naming the key (and the line); validate() checks values.
//
// Every key is declared once below, with the rule its value must follow; the
// parser, validate(), apply_override() and to_toml() all walk those lists.

#include "config/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <cstdio>
#include <sstream>
#include <type_traits>

namespace eg::config {

registry<strategy_traits>& strategies() {
  static registry<strategy_traits> r{"strategy"};
  return r;
}
registry<std::string>& topologies() {
  static registry<std::string> r{"topology"};
  return r;
}
registry<std::string>& models() {
  static registry<std::string> r{"model"};
  return r;
}

const std::vector<const char*>& names_of(schedule) {
  static const std::vector<const char*> n{"sync", "async"};
  return n;
}
const std::vector<const char*>& names_of(transport) {
  static const std::vector<const char*> n{"lane", "middleman"};
  return n;
}
const std::vector<const char*>& names_of(store_failure_action) {
  static const std::vector<const char*> n{"continue", "stop"};
  return n;
}
const std::vector<const char*>& names_of(selection) {
  static const std::vector<const char*> n{"loss", "random"};
  return n;
}
const std::vector<const char*>& names_of(merge_rule) {
  static const std::vector<const char*> n{"gossip", "rate"};
  return n;
}

namespace {

// --- rules ------------------------------------------------------------------------

struct int_rule {
  int64_t lo;
  int64_t hi;
  const char* says;  // "a positive integer"
};

struct real_rule {
  bool (*ok)(double);
  const char* says;  // "a number in (0, 1]"
};

struct text_rule {
  // Empty: any text. A choice ending in ':' and a capitalised placeholder
  // takes any non-empty text in its place ("torchscript:PATH" takes
  // "torchscript:model.pt").
  std::vector<const char*> choices;
  bool may_be_empty;
  /// More choices: the names of a registry (config/registry.hpp).
  std::vector<std::string> (*registered)() = nullptr;
};

// A list of tables (nodes, platforms, interference steps).
struct table_list {};

// One of an enumeration's names (names_of).
struct enum_rule {};

// true or false.
struct bool_rule {};
const bool_rule any_bool{};

// An array of distinct, non-empty strings (class names).
struct name_list {};

const int_rule non_negative_int{0, INT64_MAX, "a non-negative integer"};
const int_rule positive_int{1, INT64_MAX, "a positive integer"};
const int_rule positive_u32{1, UINT32_MAX, "a positive integer"};
const int_rule positive_int32{1, INT_MAX, "a positive integer"};
const int_rule port_number{0, 65535, "an integer in [0, 65535]"};
const int_rule overlap_number{-1, INT64_MAX,
                              "an integer >= -1 (-1: 1, or 0 under EdgeGossip)"};
const int_rule lane_port_number{-1, 65535, "an integer in [-1, 65535] (-1: the node's port + 1)"};
// 1 is in range but refused in validate(): one convolution cannot have a
// hidden layer.
const int_rule sg_conv_layers{0, 3, "0 (an MLP), 2 or 3"};
const real_rule positive{[](double x) { return std::isfinite(x) && x > 0; }, "a positive number"};
const real_rule non_negative{[](double x) { return std::isfinite(x) && x >= 0; },
                             "a non-negative number"};
const real_rule fraction{[](double x) { return x >= 0 && x <= 1; }, "a number in [0, 1]"};
const real_rule momentum{[](double x) { return x >= 0 && x < 1; }, "a number in [0, 1)"};
const real_rule open_fraction{[](double x) { return x > 0 && x < 1; }, "a number in (0, 1)"};
const real_rule probability{[](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]"};
const real_rule slowdown{[](double x) { return std::isfinite(x) && x >= 1; }, "a number >= 1"};
// A CPU limit: 0.01 core is a quota of 1 ms per 100 ms period (the kernel's
// least) and cpulimit's 1 %. No upper bound: the file is checked on every
// machine of the cluster, and a limit above a machine's cores limits nothing.
const real_rule cpu_cores{[](double x) { return x == 0 || (std::isfinite(x) && x >= 0.01); },
                          "0 (no limit) or a number of cores >= 0.01"};
const real_rule deadline_factor{[](double x) { return x == 0 || (std::isfinite(x) && x >= 1); },
                                "0 (off) or a factor >= 1"};
const text_rule any_text{{}, true};
const text_rule non_empty{{}, false};
const text_rule strategy_rule{{}, false, [] { return strategies().names(); }};
const text_rule gossip_rule{{"gosgd", "sgp", "sparse-push", "scsp"}, false};
const text_rule topology_rule{{}, false, [] { return topologies().names(); }};
const text_rule model_rule{{"torchscript:PATH"}, false, [] { return models().names(); }};

// --- the keys -----------------------------------------------------------------------
// visit(key, field, rule) for every key; C is the config type, const or not.

template <class C, class Visit>
void scalar_keys(C& c, Visit&& visit) {
  visit("cluster.id", c.id, non_empty);
  visit("cluster.seed", c.seed, non_negative_int);  // TOML integers are 64-bit signed
  visit("cluster.balancer", c.balancer_node, any_text);
  visit("cluster.secret", c.secret, any_text);
  visit("cluster.quorum", c.quorum, non_negative_int);
  visit("cluster.majority", c.majority, non_negative_int);
  visit("cluster.transport", c.transport, enum_rule{});
  visit("cluster.cpu_limiter", c.cpu_limiter, text_rule{{"auto", "cgroup", "cpulimit"}, false});
  visit("cluster.heartbeat_interval", c.heartbeat_interval, positive);
  visit("cluster.peer_timeout", c.peer_timeout, positive);
  visit("cluster.gossip_queue", c.gossip_queue, positive_int);
  visit("cluster.gossip_max_wait", c.gossip_max_wait, positive);
  visit("cluster.on_store_failure", c.on_store_failure, enum_rule{});
  visit("cluster.tls.certificate", c.tls.certificate, any_text);
  visit("cluster.tls.key", c.tls.key, any_text);
  visit("cluster.tls.ca", c.tls.ca, any_text);
  visit("data.name", c.data.name, non_empty);
  visit("data.dir", c.data.dir, non_empty);
  visit("data.partition", c.data.partition, text_rule{{"iid", "dirichlet"}, false});
  visit("data.alpha", c.data.alpha, positive);
  visit("data.train_samples", c.data.train_samples, non_negative_int);
  visit("data.test_samples", c.data.test_samples, non_negative_int);
  visit("data.format", c.data.format,
        text_rule{{"auto", "idx", "cifar", "image-folder", "csv", "npy", "torch"}, false});
  visit("data.test_dir", c.data.test_dir, any_text);
  visit("data.validation", c.data.validation, fraction);
  visit("data.classes", c.data.classes, name_list{});
  visit("data.resize", c.data.resize, any_bool);
  visit("data.on_bad_sample", c.data.on_bad_sample, text_rule{{"skip", "fail"}, false});
  visit("data.label_column", c.data.label_column, any_text);
  visit("data.augment", c.data.augment, any_bool);
  visit("train.model", c.train.model, model_rule);
  visit("train.lr", c.train.lr, positive);
  visit("train.momentum", c.train.momentum, momentum);
  visit("train.batch", c.train.batch, positive_int);
  visit("train.epochs", c.train.epochs, positive_u32);
  visit("train.max_iterations", c.train.max_iterations, non_negative_int);
  visit("train.evaluate_every", c.train.evaluate_every, non_negative_int);
  visit("train.average_every", c.train.average_every, non_negative_int);
  visit("train.lr_schedule", c.train.lr_schedule, text_rule{{"constant", "cosine"}, false});
  visit("train.lr_warmup", c.train.lr_warmup, non_negative);
  visit("train.max_rollbacks", c.train.max_rollbacks, non_negative_int);
  visit("train.rollback_lr_factor", c.train.rollback_lr_factor, open_fraction);
  visit("strategy.name", c.strategy.name, strategy_rule);
  visit("strategy.gossip", c.strategy.gossip, gossip_rule);
  visit("strategy.schedule", c.strategy.schedule, enum_rule{});
  visit("strategy.topology", c.strategy.topology, topology_rule);
  visit("strategy.out_peers", c.strategy.out_peers, positive_int);
  visit("strategy.exchange_probability", c.strategy.exchange_probability, probability);
  visit("strategy.density", c.strategy.density, probability);
  visit("strategy.consensus_step", c.strategy.consensus_step, probability);
  visit("strategy.sparse_values", c.strategy.sparse_values,
        text_rule{{"float16", "float32", "float8", "sign"}, false});
  visit("strategy.drift_memory", c.strategy.drift_memory, momentum);
  visit("strategy.drift_gain", c.strategy.drift_gain, non_negative);
  visit("strategy.overlap", c.strategy.overlap, overlap_number);
  visit("strategy.gossip_every", c.strategy.gossip_every, positive_int);
  visit("strategy.server", c.strategy.server, any_text);
  visit("strategy.commit_steps", c.strategy.commit_steps, positive_int);
  visit("strategy.staleness", c.strategy.staleness, non_negative_int);
  visit("strategy.check_period", c.strategy.check_period, non_negative);
  visit("strategy.min_interval", c.strategy.min_interval, non_negative);
  visit("strategy.target_loss", c.strategy.target_loss, positive);
  visit("edgegossip.aggregator", c.edgegossip.aggregator,
        text_rule{{"svd-kmeans", "isvd-lsh", "hash-kmeans"}, false});
  visit("edgegossip.aggregation_ratio", c.edgegossip.aggregation_ratio, positive_int);
  visit("edgegossip.selection", c.edgegossip.selection, enum_rule{});
  visit("edgegossip.merge", c.edgegossip.merge, enum_rule{});
  visit("edgegossip.p_threshold", c.edgegossip.p_threshold, non_negative);
  visit("edgegossip.f_threshold", c.edgegossip.f_threshold, fraction);
  visit("edgegossip.deadline", c.edgegossip.deadline, deadline_factor);
  visit("edgegossip.count_network", c.edgegossip.count_network, any_bool);
  visit("edgegossip.first_epoch_share", c.edgegossip.first_epoch_share, probability);
  visit("split.mode", c.split.mode,
        text_rule{{"off", "backprop", "synthetic", "delayed", "corrected", "stashed",
                   "predicted"},
                  false});
  visit("split.model", c.split.model, text_rule{{"lenet5", "conv8", "vgg11"}, false});
  visit("split.in_flight", c.split.in_flight, positive_int);
  visit("split.schedule", c.split.schedule, text_rule{{"arrival", "1f1b"}, false});
  visit("split.lr_warmup", c.split.lr_warmup, non_negative_int);
  visit("split.lr_warmup_rule", c.split.lr_warmup_rule, text_rule{{"linear", "delay"}, false});
  visit("split.sg_hidden", c.split.sg_hidden, positive_int);
  visit("split.sg_lr", c.split.sg_lr, positive);
  visit("split.sg_conditioned", c.split.sg_conditioned, any_bool);
  visit("split.sg_conv_layers", c.split.sg_conv_layers, sg_conv_layers);
  visit("split.resend_after", c.split.resend_after, positive);
  visit("split.runaway_guard", c.split.runaway_guard, any_bool);
  visit("split.max_rollbacks", c.split.max_rollbacks, non_negative_int);
  visit("split.rollback_lr_factor", c.split.rollback_lr_factor, open_fraction);
  visit("split.stuck_after", c.split.stuck_after, non_negative_int);
  visit("storage.dir", c.storage_dir, non_empty);
  visit("output.dir", c.output_dir, non_empty);
}

// keys_of(x, visit) for a node, a platform or an interference step, const or not.
template <class T, class U>
using if_is = std::enable_if_t<std::is_same_v<std::remove_const_t<T>, U>, int>;

template <class S, class Visit, if_is<S, interference_step> = 0>
void keys_of(S& s, Visit&& visit) {
  visit("at", s.at_seconds, non_negative);
  visit("slowdown", s.slowdown, slowdown);
}

template <class S, class Visit, if_is<S, cpu_step> = 0>
void keys_of(S& s, Visit&& visit) {
  visit("at", s.at_seconds, non_negative);
  visit("cores", s.cores, cpu_cores);
}

template <class P, class Visit, if_is<P, platform_config> = 0>
void keys_of(P& p, Visit&& visit) {
  visit("name", p.name, non_empty);
  visit("threads", p.threads, positive_int32);
  visit("share", p.share, fraction);
  visit("slowdown", p.slowdown, slowdown);
  visit("interference", p.interference, table_list{});
  visit("device", p.device, text_rule{{"cpu", "cuda", "cuda:N"}, false});
  visit("data", p.data_dir, any_text);
  visit("data_format", p.data_format, any_text);
  visit("test_dir", p.test_dir, any_text);
}

template <class R, class Visit, if_is<R, corunner_config> = 0>
void keys_of(R& r, Visit&& visit) {
  visit("kind", r.kind, text_rule{{"cpu", "disk", "network"}, false});
  visit("workers", r.workers, positive_int32);
  visit("at", r.at_seconds, non_negative);
  visit("until", r.until_seconds, non_negative);
}

template <class S, class Visit, if_is<S, stage_config> = 0>
void keys_of(S& s, Visit&& visit) {
  visit("node", s.node, non_empty);
  visit("layers", s.layers, positive_int);
  visit("slowdown", s.slowdown, slowdown);
}

template <class N, class Visit, if_is<N, node_config> = 0>
void keys_of(N& n, Visit&& visit) {
  visit("name", n.name, non_empty);
  visit("host", n.host, non_empty);
  visit("port", n.port, port_number);
  visit("lane_port", n.lane_port, lane_port_number);
  visit("metrics_port", n.metrics_port, port_number);
  visit("cpu_limit", n.cpu_limit, cpu_cores);
  visit("data", n.data_dir, any_text);
  visit("data_format", n.data_format, any_text);
  visit("test_dir", n.test_dir, any_text);
  visit("cpu_schedule", n.cpu_schedule, table_list{});
  visit("platforms", n.platforms, table_list{});
  visit("corunners", n.corunners, table_list{});
  visit("joined", n.joined, any_bool);
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

// --- messages -----------------------------------------------------------------------

std::string show(const std::string& s) { return "'" + s + "'"; }

std::string show(double x) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
std::string show(I v) {
  return std::to_string(v);
}

// a < b across signedness.
template <class A, class B>
bool less(A a, B b) {
  if constexpr (std::is_signed_v<A> && !std::is_signed_v<B>)
    return a < 0 || static_cast<uint64_t>(a) < static_cast<uint64_t>(b);
  else if constexpr (!std::is_signed_v<A> && std::is_signed_v<B>)
    return b > 0 && static_cast<uint64_t>(a) < static_cast<uint64_t>(b);
  else
    return a < b;
}

// What is wrong with a value, as "<key> must be ...", or "" when it follows the rule.
template <class I>
std::string complaint(const std::string& key, I v, const int_rule& r) {
  if (less(v, r.lo)) return key + " must be " + r.says + ", got " + show(v);
  if (less(r.hi, v)) return key + " must be at most " + show(r.hi) + ", got " + show(v);
  return {};
}

std::string complaint(const std::string& key, double v, const real_rule& r) {
  return r.ok(v) ? std::string() : key + " must be " + r.says + ", got " + show(v);
}

std::string complaint(const std::string& key, const std::string& v, const text_rule& r) {
  if (v.empty() && !r.may_be_empty) return key + " must not be empty";
  std::vector<std::string> choices;
  if (r.registered) choices = r.registered();
  choices.insert(choices.end(), r.choices.begin(), r.choices.end());
  auto matches = [&](const std::string& c) {
    const auto colon = c.find(':');
    const bool placeholder =
      colon != std::string::npos && colon + 1 < c.size() &&
      std::all_of(c.begin() + colon + 1, c.end(), [](char x) { return x >= 'A' && x <= 'Z'; });
    if (placeholder)
      return v.size() > colon + 1 && v.compare(0, colon + 1, c, 0, colon + 1) == 0;
    return v == c;
  };
  if (!r.registered && choices.empty()) return {};
  if (std::any_of(choices.begin(), choices.end(), matches)) return {};
  if (choices.empty()) return key + " names nothing registered in this build, got " + show(v);
  std::string options;
  for (size_t i = 0; i < choices.size(); ++i)
    options += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + show(choices[i]);
  return key + " must be " + options + ", got " + show(v);
}

std::string complaint(const std::string&, bool, bool_rule) { return {}; }

std::string complaint(const std::string& key, const std::vector<std::string>& v, name_list) {
  std::set<std::string> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].empty()) return key + "[" + std::to_string(i) + "] must not be empty";
    if (!seen.insert(v[i]).second) return key + " names '" + v[i] + "' twice";
  }
  if (v.size() == 1) return key + " must name at least 2 classes (or none: from the data)";
  return {};
}

template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
std::string complaint(const std::string&, E, enum_rule) {
  return {};  // an enumeration holds one of its values
}

template <class E>
std::string not_one_of(const std::string& key, const std::string& v) {
  const auto& names = names_of(E{});
  std::string options;
  for (size_t i = 0; i < names.size(); ++i)
    options += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + show(names[i]);
  return key + " must be " + options + ", got " + show(v);
}

std::string describe(const toml::node& n) {
  std::ostringstream os;
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: os << "string "; break;
    case toml::node_type::integer: os << "integer "; break;
    case toml::node_type::floating_point: os << "float "; break;
    case toml::node_type::boolean: os << "boolean "; break;
    default: os << "date/time "; break;
  }
  n.visit([&](const auto& v) {
    if constexpr (toml::is_value<decltype(v)>) os << v;
  });
  return os.str();
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = 3;  // suggest only near misses
  for (const auto& k : known)
    if (size_t d = edit_distance(key, k); d < best_distance) best = k, best_distance = d;
  return "unknown key " + show(key) + (best.empty() ? "" : " (did you mean " + show(best) + "?)");
}

std::string join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

// --- reading --------------------------------------------------------------------------

// Where values come from: a file (with lines) or a command-line override.
struct source {
  std::string origin;
  bool lines;

  std::string at(const toml::node& n) const {
    auto line = n.source().begin.line;
    return lines && line > 0 ? origin + ":" + std::to_string(line) + ": " : origin + ": ";
  }
  [[noreturn]] void fail(const toml::node& n, const std::string& what) const {
    throw config_error(at(n) + what);
  }
};

void read_value(const toml::node& n, const std::string& key, const source& src, std::string& out,
                const text_rule& rule) {
  auto v = n.as_string();
  if (!v) src.fail(n, key + " must be a string, got " + describe(n));
  if (auto c = complaint(key, v->get(), rule); !c.empty()) src.fail(n, c);
  out = v->get();
}

void read_value(const toml::node& n, const std::string& key, const source& src, bool& out,
                bool_rule) {
  auto v = n.as_boolean();
  if (!v) src.fail(n, key + " must be true or false, got " + describe(n));
  out = v->get();
}

template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
void read_value(const toml::node& n, const std::string& key, const source& src, E& out,
                enum_rule) {
  auto v = n.as_string();
  if (!v) src.fail(n, key + " must be a string, got " + describe(n));
  const auto& names = names_of(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (v->get() == names[i]) {
      out = static_cast<E>(i);
      return;
    }
  src.fail(n, not_one_of<E>(key, v->get()));
}

template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
void read_value(const toml::node& n, const std::string& key, const source& src, I& out,
                const int_rule& rule) {
  auto v = n.as_integer();
  if (!v) src.fail(n, key + " must be an integer, got " + describe(n));
  if (auto c = complaint(key, v->get(), rule); !c.empty()) src.fail(n, c);
  out = static_cast<I>(v->get());
}

void read_value(const toml::node& n, const std::string& key, const source& src, double& out,
                const real_rule& rule) {
  std::optional<double> v;  // integers are fine where a number is expected
  if (auto f = n.as_floating_point()) v = f->get();
  if (auto i = n.as_integer()) v = static_cast<double>(i->get());
  if (!v) src.fail(n, key + " must be a number, got " + describe(n));
  if (auto c = complaint(key, *v, rule); !c.empty()) src.fail(n, c);
  out = *v;
}

template <class T>
void read_value(const toml::node& n, const std::string& key, const source& src,
                std::vector<T>& out, table_list);

void read_value(const toml::node& n, const std::string& key, const source& src,
                std::vector<std::string>& out, name_list rule) {
  auto list = n.as_array();
  if (!list) src.fail(n, key + " must be an array of strings, got " + describe(n));
  std::vector<std::string> names;
  for (size_t i = 0; i < list->size(); ++i) {
    auto v = (*list)[i].as_string();
    if (!v)
      src.fail((*list)[i], key + "[" + std::to_string(i) + "] must be a string, got " +
                             describe((*list)[i]));
    names.push_back(v->get());
  }
  if (auto c = complaint(key, names, rule); !c.empty()) src.fail(n, c);
  out = std::move(names);
}

// Reads the keys of `t` into the fields `keys(visit)` declares.
template <class Keys>
void read_table(const toml::table& t, const std::string& path, const source& src, Keys&& keys) {
  for (auto&& [k, n] : t) {
    const std::string name(k.str());
    bool known = false;
    std::vector<std::string> candidates;
    keys([&](const char* field_name, auto& field, const auto& rule) {
      candidates.push_back(join(path, field_name));
      if (!known && name == field_name) {
        read_value(n, join(path, name), src, field, rule);
        known = true;
      }
    });
    if (!known) src.fail(n, unknown_key(join(path, name), candidates));
  }
}

template <class T>
void read_value(const toml::node& n, const std::string& key, const source& src,
                std::vector<T>& out, table_list) {
  auto list = n.as_array();
  if (!list) src.fail(n, key + " must be an array of tables, got " + describe(n));
  std::vector<T> items;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    auto table = (*list)[i].as_table();
    if (!table) src.fail((*list)[i], item_key + " must be a table, got " + describe((*list)[i]));
    T item{};
    read_table(*table, item_key, src, [&](auto&& visit) { keys_of(item, visit); });
    items.push_back(std::move(item));
  }
  out = std::move(items);
}

// Applies a scalar key given in full ("train.epochs").
void read_scalar(cluster_config& cfg, const std::string& key, const toml::node& n,
                 const source& src) {
  bool known = false;
  std::vector<std::string> candidates;
  scalar_keys(cfg, [&](const char* k, auto& field, const auto& rule) {
    candidates.push_back(k);
    if (!known && key == k) {
      read_value(n, key, src, field, rule);
      known = true;
    }
  });
  if (!known) src.fail(n, unknown_key(key, candidates));
}

void read_document(cluster_config& cfg, const toml::table& root, const source& src) {
  std::set<std::string> sections;
  scalar_keys(cfg, [&](const char* k, auto&, const auto&) { sections.insert(section_of(k)); });
  for (auto&& [k, n] : root) {
    const std::string name(k.str());
    if (name == "nodes") {
      read_value(n, "nodes", src, cfg.nodes, table_list{});
    } else if (name == "stages") {
      read_value(n, "stages", src, cfg.stages, table_list{});
    } else if (sections.count(name)) {
      auto table = n.as_table();
      if (!table) src.fail(n, name + " must be a table, got " + describe(n));
      for (auto&& [field, value] : *table) {
        const std::string key = name + "." + std::string(field.str());
        if (auto sub = value.as_table()) {  // [cluster.tls]
          for (auto&& [f, v] : *sub)
            read_scalar(cfg, key + "." + std::string(f.str()), v, src);
        } else {
          read_scalar(cfg, key, value, src);
        }
      }
    } else {
      std::vector<std::string> known(sections.begin(), sections.end());
      known.push_back("nodes");
      known.push_back("stages");
      src.fail(n, unknown_key(name, known));
    }
  }
}

// --- checking --------------------------------------------------------------------------

template <class T, class Rule>
void check(const std::string& key, const T& value, const Rule& rule) {
  if (auto c = complaint(key, value, rule); !c.empty()) throw config_error(c);
}

template <class T>
void check(const std::string& key, const std::vector<T>& items, table_list) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    keys_of(items[i], [&](const char* name, const auto& field, const auto& rule) {
      check(join(item_key, name), field, rule);
    });
  }
}

// --- writing ----------------------------------------------------------------------------
// Hand-written rather than toml++'s printer: keys in the order of the file
// layout, and numbers in their shortest exact form (0.9, not 0.90000000000000002).

std::string toml_value(const std::string& v) {
  std::ostringstream os;
  os << toml::toml_formatter{toml::value<std::string>(v), toml::format_flags::none};
  return os.str();
}

std::string toml_value(bool v) { return v ? "true" : "false"; }

std::string toml_value(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? ", " : "") + toml_value(names[i]);
  return out + "]";
}

template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
std::string toml_value(I v) {
  return std::to_string(v);
}

template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
std::string toml_value(E v) {
  return toml_value(std::string{to_string(v)});
}

std::string toml_value(double v) {
  std::string text = show(v);
  if (text.find_first_of(".eEni") == std::string::npos) text += ".0";  // stays a float
  return text;
}

// Interference and CPU steps are short: an inline array of inline tables.
template <class Step, std::enable_if_t<std::is_same_v<Step, interference_step> ||
                                           std::is_same_v<Step, cpu_step>,
                                       int> = 0>
std::string toml_value(const std::vector<Step>& steps) {
  std::string out = "[";
  for (size_t i = 0; i < steps.size(); ++i) {
    out += i == 0 ? "{" : ", {";
    std::string sep;
    keys_of(steps[i], [&](const char* name, const auto& field, const auto&) {
      out += sep + name + " = " + toml_value(field);
      sep = ", ";
    });
    out += "}";
  }
  return out + "]";
}

template <class T>
inline constexpr bool is_sections = std::is_same_v<T, std::vector<node_config>> ||
                                    std::is_same_v<T, std::vector<platform_config>> ||
                                    std::is_same_v<T, std::vector<corunner_config>>;

// The keys of `item`, then its lists of tables as [[path.name]] sections.
template <class T>
void write_table(std::ostream& os, const T& item, const std::string& path) {
  keys_of(item, [&](const char* name, const auto& field, const auto&) {
    if constexpr (!is_sections<std::decay_t<decltype(field)>>)
      os << name << " = " << toml_value(field) << "\n";
  });
  keys_of(item, [&](const char* name, const auto& field, const auto&) {
    if constexpr (is_sections<std::decay_t<decltype(field)>>)
      for (const auto& sub : field) {
        os << "\n[[" << join(path, name) << "]]\n";
        write_table(os, sub, join(path, name));
      }
  });
}

std::string trim(const std::string& s) {
  auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string names_of(const std::vector<node_config>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ", ") + n.name;
  return out;
}

} // namespace

const node_config& find_node(const std::vector<node_config>& nodes, const std::string& name,
                             const std::string& cluster_id) {
  for (const auto& n : nodes)
    if (n.name == name) return n;
  throw config_error("no node named " + show(name) + " in cluster " + show(cluster_id) +
                     " (nodes: " + names_of(nodes) + ")");
}

uint16_t lane_port_of(const node_config& n) {
  if (n.lane_port >= 0)
    return static_cast<uint16_t>(n.lane_port);
  return n.port == 0 || n.port == 65535 ? 0 : static_cast<uint16_t>(n.port + 1);
}

std::vector<std::string> node_names(const std::vector<node_config>& nodes) {
  std::vector<std::string> out;
  for (auto& n : nodes)
    out.push_back(n.name);
  return out;
}

const node_config& cluster_config::node(const std::string& name) const {
  return find_node(nodes, name, id);
}

const node_config& cluster_config::server() const {
  return strategy.server.empty() ? balancer() : node(strategy.server);
}

const node_config& cluster_config::balancer() const {
  if (!balancer_node.empty()) return node(balancer_node);
  if (nodes.empty()) throw config_error("cluster " + show(id) + " has no nodes");
  return nodes.front();
}

std::vector<std::string> cluster_config::node_names() const {
  return config::node_names(nodes);
}

std::vector<platform_config> cluster_config::file_platforms() const {
  std::vector<platform_config> all;
  for (const auto& n : nodes)
    if (!n.joined) all.insert(all.end(), n.platforms.begin(), n.platforms.end());
  return all;
}

std::vector<platform_config> cluster_config::platforms() const {
  std::vector<platform_config> all;
  for (const auto& n : nodes) all.insert(all.end(), n.platforms.begin(), n.platforms.end());
  return all;
}

cluster_config default_config() {
  cluster_config c;
  node_config local;
  local.name = "local";
  local.host = "127.0.0.1";
  local.port = 0;
  for (int i = 0; i < 4; ++i) {
    platform_config p;
    p.name = "p" + std::to_string(i);
    p.threads = 1;
    p.share = 0.25;
    local.platforms.push_back(p);
  }
  c.nodes.push_back(local);
  return c;
}

namespace {

// A TOML document; its syntax errors as config_error naming origin and line.
toml::table read_toml(const std::string& toml_text, const std::string& origin) {
  try {
    return toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    throw config_error(origin + ":" + std::to_string(e.source().begin.line) + ": " +
                       std::string(e.description()));
  }
}

} // namespace

cluster_config parse(const std::string& toml_text, const std::string& origin) {
  const auto root = read_toml(toml_text, origin);
  cluster_config cfg = default_config();
  read_document(cfg, root, source{origin, true});
  return cfg;
}

std::vector<node_config> parse_members(const std::string& toml_text, const std::string& origin) {
  const auto root = read_toml(toml_text, origin);
  const source src{origin, true};
  std::vector<node_config> out;
  for (auto&& [k, n] : root) {
    if (k.str() != "nodes") src.fail(n, unknown_key(std::string(k.str()), {"nodes"}));
    read_value(n, "nodes", src, out, table_list{});
  }
  check("nodes", out, table_list{});
  return out;
}

std::string member_toml(const node_config& node) {
  std::ostringstream os;
  os << "[[nodes]]\n";
  write_table(os, node, "nodes");
  return os.str();
}

cluster_config load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error("cannot read config file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw config_error("cannot read config file '" + path + "'");
  return parse(text.str(), path);
}

void apply_override(cluster_config& cfg, const std::string& assignment) {
  const source src{"override " + show(assignment), false};
  auto eq = assignment.find('=');
  if (eq == std::string::npos) throw config_error(src.origin + ": expected key=value");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string value = trim(assignment.substr(eq + 1));

  // The value is TOML; anything that does not parse as a TOML value is taken
  // as a bare string, so that `strategy.name=gosgd` works unquoted.
  toml::table holder;
  try {
    holder = toml::parse("value = " + value);
  } catch (const toml::parse_error&) {
  }
  if (holder.size() != 1 || !holder.contains("value")) {
    holder.clear();
    holder.insert("value", value);
  }
  read_scalar(cfg, key, *holder.get("value"), src);
}

namespace {

/// Every port a node listens on (its own, its weights lane's, its metrics')
/// is its alone on its host, so that a firewall can be opened for each in
/// advance.
void check_ports(const cluster_config& cfg) {
  std::map<std::pair<std::string, uint16_t>, std::string> taken;
  const bool lanes = cfg.nodes.size() > 1 && cfg.transport == transport::lane;
  for (size_t i = 0; i < cfg.nodes.size(); ++i) {
    const auto& n = cfg.nodes[i];
    const std::string key = "nodes[" + std::to_string(i) + "]";
    if (lanes && n.lane_port < 0 && n.port == 65535)
      throw config_error(key + ".lane_port: node " + show(n.name) + " listens on port 65535, so "
                         "its weights lane cannot take the next one; set lane_port");
    std::vector<std::pair<uint16_t, std::string>> mine{
      {n.port, key + ".port (node " + show(n.name) + "'s port)"}};
    if (lanes)
      mine.push_back({lane_port_of(n), key + ".lane_port (node " + show(n.name) +
                                         "'s weights lane" +
                                         (n.lane_port < 0 ? ", its port + 1 by default" : "") +
                                         ")"});
    mine.push_back({n.metrics_port, key + ".metrics_port (node " + show(n.name) + "'s metrics)"});
    for (auto& [port, what] : mine) {
      if (port == 0)
        continue;
      auto [it, fresh] = taken.emplace(std::make_pair(n.host, port), what);
      if (!fresh)
        throw config_error(what + " and " + it->second + " both use " + n.host + ":" +
                           std::to_string(port) + "; give one of them another port");
    }
  }
}

/// The cluster's own settings: timeouts, TLS files, quorum and majority,
/// the nodes named for the balancer and the server, the strategy's options
/// that only some strategies take.
void check_cluster_settings(const cluster_config& cfg) {
  if (cfg.peer_timeout < 2 * cfg.heartbeat_interval)
    throw config_error("cluster.peer_timeout is " + show(cfg.peer_timeout) +
                       " s: it must be at least twice cluster.heartbeat_interval (" +
                       show(cfg.heartbeat_interval) + " s), or a late heartbeat reads as death");
  {
    const int set = !cfg.tls.certificate.empty() + !cfg.tls.key.empty() + !cfg.tls.ca.empty();
    if (set != 0 && set != 3)
      throw config_error("cluster.tls needs all of certificate, key and ca (or none of them); "
                         "given: " + std::string(cfg.tls.certificate.empty() ? "" : "certificate ") +
                         (cfg.tls.key.empty() ? "" : "key ") + (cfg.tls.ca.empty() ? "" : "ca"));
  }
  if (cfg.quorum > static_cast<int64_t>(cfg.platforms().size()))
    throw config_error("cluster.quorum is " + std::to_string(cfg.quorum) + " but the cluster has " +
                       std::to_string(cfg.platforms().size()) + " platforms");
  if (cfg.majority > static_cast<int64_t>(cfg.nodes.size()))
    throw config_error("cluster.majority is " + std::to_string(cfg.majority) +
                       " but the cluster has " + std::to_string(cfg.nodes.size()) + " nodes");
  if (!cfg.balancer_node.empty() &&
      std::none_of(cfg.nodes.begin(), cfg.nodes.end(),
                   [&](const node_config& n) { return n.name == cfg.balancer_node; }))
    throw config_error("cluster.balancer names no node: " + show(cfg.balancer_node) +
                       " (nodes: " + names_of(cfg.nodes) + ")");
  if (!cfg.strategy.server.empty()
      && std::none_of(cfg.nodes.begin(), cfg.nodes.end(),
                      [&](const node_config& n) { return n.name == cfg.strategy.server; }))
    throw config_error("strategy.server names no node: " + show(cfg.strategy.server) +
                       " (nodes: " + names_of(cfg.nodes) + ")");
  if (cfg.strategy.gossip != "gosgd" && !cfg.strategy.edgegossip())
    throw config_error("strategy.gossip is " + show(cfg.strategy.gossip) + ", but only EdgeGossip "
                       "takes a gossip (strategy.name is " + show(cfg.strategy.name) +
                       "; for push-sum alone, strategy.name = " + show(cfg.strategy.gossip) + ")");
  if (cfg.strategy.gossip_every != 1 && !cfg.strategy.push_sum())
    throw config_error("strategy.gossip_every is " + std::to_string(cfg.strategy.gossip_every)
                       + ", but only the push-sum family (sgp, sparse-push, scsp) gossips in "
                       "rounds; strategy.name is " + show(cfg.strategy.name) +
                       (cfg.strategy.edgegossip() ? " over " + show(cfg.strategy.gossip) : ""));
  if (cfg.strategy.parameter_server() && cfg.strategy.check_period > 0
      && cfg.strategy.min_interval > cfg.strategy.check_period)
    throw config_error("strategy.min_interval (" + std::to_string(cfg.strategy.min_interval)
                       + " s) is longer than strategy.check_period ("
                       + std::to_string(cfg.strategy.check_period) + " s)");
}

} // namespace

void validate(const cluster_config& cfg) {
  scalar_keys(cfg, [](const char* key, const auto& field, const auto& rule) {
    check(key, field, rule);
  });
  if (cfg.nodes.empty()) throw config_error("nodes: the cluster needs at least one node");
  check("nodes", cfg.nodes, table_list{});
  for (size_t i = 1; i < cfg.nodes.size(); ++i)
    if (cfg.nodes[i - 1].joined && !cfg.nodes[i].joined)
      throw config_error("nodes[" + std::to_string(i) + "]: node " + show(cfg.nodes[i].name) +
                         " of the cluster file comes after node " + show(cfg.nodes[i - 1].name) +
                         ", which joined (joined = true): nodes that joined come last");
  if (cfg.nodes.front().joined)
    throw config_error("nodes[0]: node " + show(cfg.nodes[0].name) +
                       " joined (joined = true): a cluster starts from nodes of its file");

  check("stages", cfg.stages, table_list{});
  if (cfg.split.enabled() && cfg.stages.empty())
    throw config_error("stages: split.mode = " + show(cfg.split.mode) +
                       " needs the model's stages, first to last: [[stages]] with node and "
                       "layers");
  if (cfg.split.sg_conv_layers == 1)
    throw config_error("split.sg_conv_layers must be 0 (an MLP), 2 or 3, not 1");
  if (!cfg.split.enabled() && !cfg.stages.empty())
    throw config_error("stages: [[stages]] are given but split.mode is \"off\"; set "
                       "split.mode = \"backprop\" or \"synthetic\" to split the model");
  for (size_t k = 0; k < cfg.stages.size(); ++k) {
    const auto& name = cfg.stages[k].node;
    if (std::none_of(cfg.nodes.begin(), cfg.nodes.end(), [&](auto& n) { return n.name == name; }))
      throw config_error("stages[" + std::to_string(k) + "].node " + show(name) +
                         " is no node of the cluster (nodes: " + names_of(cfg.nodes) + ")");
  }
  std::map<std::string, std::string> platform_node;  // platform name -> its node
  double shares = 0;
  const platform_config* equal_part = nullptr;  // a platform taking a part of what is left
  std::string equal_part_key;
  for (size_t i = 0; i < cfg.nodes.size(); ++i) {
    const node_config& n = cfg.nodes[i];
    const std::string node_key = "nodes[" + std::to_string(i) + "]";
    for (size_t j = 0; j < i; ++j) {
      const node_config& other = cfg.nodes[j];
      if (other.name == n.name)
        throw config_error(node_key + ".name " + show(n.name) + " is already used by nodes[" +
                           std::to_string(j) + "]");
      if (n.port != 0 && other.port == n.port && other.host == n.host)
        throw config_error(node_key + ".port: nodes " + show(other.name) + " and " +
                           show(n.name) + " both listen on " + n.host + ":" +
                           std::to_string(n.port));
    }
    if (n.platforms.empty() && !cfg.split.enabled())
      throw config_error(node_key + ".platforms: node " + show(n.name) +
                         " needs at least one platform");
    if (!n.platforms.empty() && cfg.split.enabled())
      throw config_error(node_key + ".platforms: a split run (split.mode = " +
                         show(cfg.split.mode) + ") trains one model across [[stages]], and "
                         "node " + show(n.name) + "'s platforms would not train in it: remove "
                         "them, or set split.mode = \"off\"");
    for (size_t k = 1; k < n.cpu_schedule.size(); ++k)
      if (!(n.cpu_schedule[k].at_seconds > n.cpu_schedule[k - 1].at_seconds))
        throw config_error(node_key + ".cpu_schedule[" + std::to_string(k) +
                           "].at must be later than the step before it (" +
                           show(n.cpu_schedule[k].at_seconds) + " after " +
                           show(n.cpu_schedule[k - 1].at_seconds) + ")");
    for (size_t j = 0; j < n.platforms.size(); ++j) {
      const platform_config& p = n.platforms[j];
      const std::string platform_key = node_key + ".platforms[" + std::to_string(j) + "]";
      // Store keys are "NAME/EPOCH"; "@..." names the parameter server's
      // records.
      if (p.name.empty() || p.name.find('/') != std::string::npos || p.name.front() == '@')
        throw config_error(platform_key + ".name " + show(p.name) +
                           " cannot be a platform's name: it must not be empty, contain '/' "
                           "or start with '@'");
      if (auto [it, fresh] = platform_node.emplace(p.name, n.name); !fresh)
        throw config_error(platform_key + ".name " + show(p.name) +
                           " is already used on node " + show(it->second));
      for (size_t k = 1; k < p.interference.size(); ++k)
        if (!(p.interference[k].at_seconds > p.interference[k - 1].at_seconds))
          throw config_error(platform_key + ".interference[" + std::to_string(k) +
                             "].at must be later than the step before it (" +
                             show(p.interference[k].at_seconds) + " after " +
                             show(p.interference[k - 1].at_seconds) + ")");
      if (n.joined) continue;  // (not in the partition of the cluster's data: no share)
      shares += p.share;
      if (p.share == 0 && !equal_part) equal_part = &p, equal_part_key = platform_key + ".share";
    }
  }
  check_ports(cfg);
  constexpr double slack = 1e-9;  // shares like 1/3 written in decimal
  if (shares > 1 + slack)
    throw config_error("nodes.platforms.share: the shares given sum to " + show(shares) +
                       ", more than 1");
  if (equal_part && shares >= 1 - slack)
    throw config_error(equal_part_key + ": platform " + show(equal_part->name) +
                       " has no share (an equal part of what is left) but the shares given "
                       "already sum to " + show(shares));

  check_cluster_settings(cfg);
}

std::string to_toml(const cluster_config& cfg) {
  std::ostringstream os;
  os << "# edgegossip cluster configuration (keys explained in configs/local.toml)\n";
  std::string section;
  scalar_keys(cfg, [&](const char* key, const auto& field, const auto&) {
    const std::string k = key;
    if (section_of(k) != section) {
      section = section_of(k);
      os << "\n[" << section << "]\n";
    }
    os << k.substr(section.size() + 1) << " = " << toml_value(field) << "\n";
  });
  for (const node_config& n : cfg.nodes) {
    os << "\n[[nodes]]\n";
    write_table(os, n, "nodes");
  }
  for (const stage_config& s : cfg.stages) {
    os << "\n[[stages]]\n";
    write_table(os, s, "stages");
  }
  return os.str();
}

std::string join_settings(const cluster_config& cfg) {
  std::string out;
  for (auto& [key, value] :
       {std::pair<const char*, std::string>{"train.model", cfg.train.model},
        {"strategy.name", cfg.strategy.name},
        {"strategy.gossip", cfg.strategy.gossip},
        {"strategy.schedule", to_string(cfg.strategy.schedule)},
        {"fingerprint", run_fingerprint(cfg)}})
    out += std::string(key) + "=" + value + "\n";
  return out;
}

namespace {

std::vector<std::pair<std::string, std::string>> setting_lines(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos)
      out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

} // namespace

std::string join_settings_differences(const std::string& cluster, const std::string& theirs) {
  if (cluster.empty() || theirs.empty())
    return {};
  const auto ours = setting_lines(cluster);
  std::map<std::string, std::string> other;
  for (auto& [k, v] : setting_lines(theirs))
    other[k] = v;
  std::string named, fingerprint;
  for (auto& [key, value] : ours) {
    auto o = other.find(key);
    const std::string there = o == other.end() ? "(not said)" : o->second;
    if (there == value)
      continue;
    if (key == "fingerprint")
      fingerprint = "its run settings are not the cluster's (run fingerprint " + there +
                    ", the cluster's " + value + "): the seed, the data set and its "
                    "partition, the optimizer, the strategy's settings or the platforms' shares "
                    "differ; compare its cluster file and --set options with the balancer "
                    "node's";
    else
      named += (named.empty() ? "" : "; ") + key + " is " + there + " there, " + value +
               " in the cluster";
  }
  return named.empty() ? fingerprint : named;
}

std::string run_fingerprint(const cluster_config& cfg) {
  std::ostringstream text;
  text.precision(17);
  text << cfg.id << '|' << cfg.seed << '|' << cfg.data.name << '|' << cfg.data.dir << '|'
       << cfg.data.partition << '|' << cfg.data.alpha << '|' << cfg.data.train_samples << '|'
       << cfg.data.test_samples << '|' << cfg.train.model << '|' << cfg.train.lr << '|'
       << cfg.train.momentum << '|' << cfg.train.batch << '|' << cfg.train.max_iterations << '|'
       << cfg.strategy.name << '|' << to_string(cfg.strategy.schedule) << '|'
       << cfg.strategy.topology << '|' << cfg.strategy.out_peers << '|'
       << cfg.strategy.exchange_probability << '|' << cfg.strategy.density << '|'
       << cfg.strategy.consensus_step << '|' << cfg.strategy.sparse_values << '|'
       << cfg.strategy.drift_memory << '|' << cfg.strategy.commit_steps << '|'
       << cfg.strategy.staleness << '|' << cfg.strategy.check_period << '|'
       << cfg.strategy.min_interval << '|' << cfg.strategy.target_loss << '|'
       << cfg.edgegossip.aggregator << '|'
       << cfg.edgegossip.aggregation_ratio << '|' << to_string(cfg.edgegossip.selection) << '|'
       << to_string(cfg.edgegossip.merge);
  if (cfg.strategy.gossip_every != 1)  // (absent at 1: older runs keep their fingerprint)
    text << "|every|" << cfg.strategy.gossip_every;
  if (cfg.train.lr_schedule != "constant")  // (likewise)
    text << "|lr_schedule|" << cfg.train.lr_schedule;
  if (cfg.train.lr_warmup != 0)  // (likewise)
    text << "|lr_warmup|" << cfg.train.lr_warmup;
  if (cfg.strategy.rule() == "scsp")  // (likewise)
    text << "|drift_gain|" << cfg.strategy.drift_gain;
  if (cfg.strategy.gossip != "gosgd")  // (likewise)
    text << "|gossip|" << cfg.strategy.gossip;
  // The data as configured (likewise absent at the defaults).
  if (cfg.data.format != "auto" || !cfg.data.classes.empty() || !cfg.data.test_dir.empty() ||
      cfg.data.validation != 0 || cfg.data.augment || !cfg.data.label_column.empty()) {
    text << "|data|" << cfg.data.format << '|' << cfg.data.test_dir << '|' << cfg.data.validation
         << '|' << cfg.data.augment << '|' << cfg.data.label_column;
    for (auto& c : cfg.data.classes)
      text << '|' << c;
  }

  for (auto& p : cfg.file_platforms())  // (nodes that join later do not change the run)
    text << '|' << p.name << '=' << p.share;
  if (cfg.split.enabled()) {
    text << "|split|" << cfg.split.mode << '|' << cfg.split.model << '|' << cfg.split.in_flight
         << '|' << cfg.split.sg_hidden << '|' << cfg.split.sg_lr << '|' << cfg.split.sg_conditioned
         << '|' << cfg.split.sg_conv_layers;
    if (cfg.split.schedule != "arrival")  // (runs in arrival order keep their fingerprint)
      text << "|schedule=" << cfg.split.schedule;
    if (cfg.split.lr_warmup > 0)  // (runs without one keep their fingerprint)
      text << "|lr_warmup=" << cfg.split.lr_warmup;
    if (cfg.split.lr_warmup > 0 && cfg.split.lr_warmup_rule != "linear")  // (likewise)
      text << '|' << cfg.split.lr_warmup_rule;
    for (auto& st : cfg.stages)
      text << '|' << st.node << '=' << st.layers;
  }
  // FNV-1a, 64 bits: stable across builds and machines.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text.str()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

cluster_config as_one_process(const cluster_config& cfg) {
  // A CPU limit applies to a whole process: in one, it would limit every
  // node's platforms together.
  if (cfg.nodes.size() > 1)
    for (size_t i = 0; i < cfg.nodes.size(); ++i)
      if (cfg.nodes[i].cpu_limit > 0 || !cfg.nodes[i].cpu_schedule.empty())
        throw config_error(
          "nodes[" + std::to_string(i) + "]." +
          (cfg.nodes[i].cpu_limit > 0 ? "cpu_limit" : "cpu_schedule") + ": node '" +
          cfg.nodes[i].name + "' has a CPU limit, which applies to a whole process; cpu limits "
          "need one process per node (`edgegossip launch` or `edgegossip node`), not all " +
          std::to_string(cfg.nodes.size()) + " nodes in one");
  cluster_config one = cfg;
  node_config local;
  local.name = "local";
  local.host = "127.0.0.1";
  local.port = 0;
  if (cfg.nodes.size() == 1) {
    local.cpu_limit = cfg.nodes[0].cpu_limit;
    local.cpu_schedule = cfg.nodes[0].cpu_schedule;
  }
  for (auto& n : cfg.nodes) {
    for (auto& p : n.platforms)
      local.platforms.push_back(p);
    for (auto& c : n.corunners)
      local.corunners.push_back(c);
  }
  for (auto& n : cfg.nodes)
    if (!n.data_dir.empty())
      throw config_error(
        "node " + n.name + " has data of its own (nodes.data): each node reads its own "
        "directory, so start the nodes with `edgegossip launch` or `edgegossip node`, not in "
        "one process");
  one.nodes = {local};
  one.balancer_node = "local";
  for (auto& stage : one.stages)
    stage.node = "local";
  return one;
}

} // namespace eg::config
