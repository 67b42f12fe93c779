// links: eg_learning
#include "config/config.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>

using namespace eg::config;

namespace {

// The message of the config_error that `f` throws ("" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void check_same(const cluster_config& a, const cluster_config& b) {
  BOOST_TEST(a.id == b.id);
  BOOST_TEST(a.seed == b.seed);
  BOOST_TEST(a.balancer_node == b.balancer_node);
  BOOST_TEST(a.storage_dir == b.storage_dir);
  BOOST_TEST(a.output_dir == b.output_dir);
  BOOST_TEST(a.secret == b.secret);
  BOOST_TEST(a.transport == b.transport);
  BOOST_TEST(a.cpu_limiter == b.cpu_limiter);
  BOOST_TEST(a.data.name == b.data.name);
  BOOST_TEST(a.data.dir == b.data.dir);
  BOOST_TEST(a.data.partition == b.data.partition);
  BOOST_TEST(a.data.alpha == b.data.alpha);
  BOOST_TEST(a.data.train_samples == b.data.train_samples);
  BOOST_TEST(a.data.test_samples == b.data.test_samples);
  BOOST_TEST(a.train.model == b.train.model);
  BOOST_TEST(a.train.lr == b.train.lr);
  BOOST_TEST(a.train.momentum == b.train.momentum);
  BOOST_TEST(a.train.batch == b.train.batch);
  BOOST_TEST(a.train.epochs == b.train.epochs);
  BOOST_TEST(a.train.max_iterations == b.train.max_iterations);
  BOOST_TEST(a.train.evaluate_every == b.train.evaluate_every);
  BOOST_TEST(a.train.average_every == b.train.average_every);
  BOOST_TEST(a.train.lr_schedule == b.train.lr_schedule);
  BOOST_TEST(a.train.lr_warmup == b.train.lr_warmup);
  BOOST_TEST(a.strategy.name == b.strategy.name);
  BOOST_TEST(a.strategy.gossip == b.strategy.gossip);
  BOOST_TEST(a.strategy.schedule == b.strategy.schedule);
  BOOST_TEST(a.strategy.topology == b.strategy.topology);
  BOOST_TEST(a.strategy.exchange_probability == b.strategy.exchange_probability);
  BOOST_TEST(a.strategy.out_peers == b.strategy.out_peers);
  BOOST_TEST(a.strategy.drift_memory == b.strategy.drift_memory);
  BOOST_TEST(a.strategy.drift_gain == b.strategy.drift_gain);
  BOOST_TEST(a.edgegossip.aggregator == b.edgegossip.aggregator);
  BOOST_TEST(a.edgegossip.aggregation_ratio == b.edgegossip.aggregation_ratio);
  BOOST_TEST(a.edgegossip.selection == b.edgegossip.selection);
  BOOST_TEST(a.edgegossip.merge == b.edgegossip.merge);
  BOOST_TEST(a.edgegossip.p_threshold == b.edgegossip.p_threshold);
  BOOST_TEST(a.edgegossip.f_threshold == b.edgegossip.f_threshold);
  BOOST_TEST(a.edgegossip.deadline == b.edgegossip.deadline);
  BOOST_TEST(a.edgegossip.count_network == b.edgegossip.count_network);
  BOOST_TEST(a.edgegossip.first_epoch_share == b.edgegossip.first_epoch_share);
  BOOST_REQUIRE(a.nodes.size() == b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const node_config& x = a.nodes[i];
    const node_config& y = b.nodes[i];
    BOOST_TEST(x.name == y.name);
    BOOST_TEST(x.host == y.host);
    BOOST_TEST(x.port == y.port);
    BOOST_TEST(x.cpu_limit == y.cpu_limit);
    BOOST_REQUIRE(x.cpu_schedule.size() == y.cpu_schedule.size());
    for (size_t j = 0; j < x.cpu_schedule.size(); ++j) {
      BOOST_TEST(x.cpu_schedule[j].at_seconds == y.cpu_schedule[j].at_seconds);
      BOOST_TEST(x.cpu_schedule[j].cores == y.cpu_schedule[j].cores);
    }
    BOOST_REQUIRE(x.corunners.size() == y.corunners.size());
    for (size_t j = 0; j < x.corunners.size(); ++j) {
      BOOST_TEST(x.corunners[j].kind == y.corunners[j].kind);
      BOOST_TEST(x.corunners[j].workers == y.corunners[j].workers);
      BOOST_TEST(x.corunners[j].at_seconds == y.corunners[j].at_seconds);
      BOOST_TEST(x.corunners[j].until_seconds == y.corunners[j].until_seconds);
    }
    BOOST_REQUIRE(x.platforms.size() == y.platforms.size());
    for (size_t j = 0; j < x.platforms.size(); ++j) {
      const platform_config& p = x.platforms[j];
      const platform_config& q = y.platforms[j];
      BOOST_TEST(p.name == q.name);
      BOOST_TEST(p.threads == q.threads);
      BOOST_TEST(p.share == q.share);
      BOOST_TEST(p.slowdown == q.slowdown);
      BOOST_REQUIRE(p.interference.size() == q.interference.size());
      for (size_t k = 0; k < p.interference.size(); ++k) {
        BOOST_TEST(p.interference[k].at_seconds == q.interference[k].at_seconds);
        BOOST_TEST(p.interference[k].slowdown == q.interference[k].slowdown);
      }
    }
  }
}

// Three nodes with every field away from its default.
cluster_config unusual_config() {
  cluster_config c = default_config();
  c.id = "round-trip";
  c.seed = 9007199254740993ull;  // not representable as a double
  c.balancer_node = "b";
  c.storage_dir = "/var/lib/eg data";
  c.output_dir = "out/runs";
  c.secret = "it's \"secret\"\n\t\\ λ";
  c.cpu_limiter = "cpulimit";
  c.data.name = "fashion-mnist-small";
  c.data.dir = "/data/fm";
  c.data.partition = "dirichlet";
  c.data.alpha = 0.1;
  c.data.train_samples = 6000;
  c.data.test_samples = 1000;
  // The keys of one's own data, round-tripped too.
  c.data.format = "image-folder";
  c.data.test_dir = "/data/fm-test";
  c.data.validation = 0.1;
  c.data.classes = {"cat", "dog \"big\"", "λ"};
  c.data.resize = false;
  c.data.on_bad_sample = "fail";
  c.data.label_column = "species";
  c.data.augment = true;
  c.train = {"logreg", 1.0 / 7.0, 0.95, 32, 17, 250, 3, 4, "cosine"};
  c.strategy = {"edgegossip", "sparse-push", schedule::async, "exponential",
                1.0 / 3.0, 3};
  c.edgegossip = {"isvd-lsh", 20, selection::random, merge_rule::gossip, 0.01, 0.25};
  c.nodes.clear();
  c.nodes.push_back({"a", "10.0.0.1", 47101, {{"a0", 2, 0.5, 1.0, {}}, {"a1", 1, 0, 2.5, {}}}, {},
                     0.5, {}});
  c.nodes.push_back({"b", "10.0.0.2", 47101, {{"b0", 4, 0.125, 1.0, {{0, 1}, {10.5, 3}, {60, 1.25}}}}, {},
                     0, {{10, 0.25}, {30.5, 1.0 / 3.0}, {60, 0}}});
  c.nodes.push_back({"c", "10.0.0.2", 0, {{"c0", 1, 0, 1.0, {{5, 2}}}},
                     {{"cpu", 2, 5, 30}, {"disk", 1, 0, 0}}, 0.01, {{0, 64}}});
  c.nodes[0].lane_port = 47200;
  c.nodes[0].metrics_port = 9100;
  c.nodes[0].platforms[1].data_dir = "/data/a1";
  c.nodes[0].platforms[1].data_format = "csv";
  c.nodes[0].platforms[1].test_dir = "/data/a1 test";
  return c;
}

const std::string file = "cluster.toml";

} // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(defaults_are_valid) {
  cluster_config c = default_config();
  BOOST_CHECK_NO_THROW(validate(c));
  BOOST_TEST(c.id == "edgegossip");
  BOOST_REQUIRE(c.nodes.size() == 1u);
  BOOST_TEST(c.nodes[0].name == "local");
  BOOST_TEST(c.nodes[0].host == "127.0.0.1");
  BOOST_TEST(c.nodes[0].port == 0);
  BOOST_REQUIRE(c.nodes[0].platforms.size() == 4u);
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(c.nodes[0].platforms[i].name == "p" + std::to_string(i));
    BOOST_TEST(c.nodes[0].platforms[i].threads == 1);
    BOOST_TEST(c.nodes[0].platforms[i].share == 0.25);
  }
  BOOST_TEST(c.balancer().name == "local");
  BOOST_TEST(c.platforms().size() == 4u);
}

BOOST_AUTO_TEST_CASE(local_example_is_the_default) {
  cluster_config c = load(EG_SOURCE_DIR "/configs/local.toml");
  BOOST_CHECK_NO_THROW(validate(c));
  check_same(c, default_config());
}

BOOST_AUTO_TEST_CASE(three_nodes_example) {
  cluster_config c = load(EG_SOURCE_DIR "/configs/three-nodes.toml");
  BOOST_CHECK_NO_THROW(validate(c));
  BOOST_TEST(c.id == "three-nodes");
  BOOST_TEST(c.data.train_samples == 0);
  BOOST_TEST(c.train.epochs == 3u);
  BOOST_TEST(c.storage_dir == "edgegossip-data/three-nodes");
  BOOST_TEST(c.output_dir == "runs");
  BOOST_REQUIRE(c.nodes.size() == 3u);
  const char* names[] = {"a", "b", "c"};
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(c.nodes[i].name == names[i]);
    BOOST_TEST(c.nodes[i].host == "127.0.0.1");
    // Ports ten apart: each node's weights lane takes its port + 1.
    BOOST_TEST(c.nodes[i].port == 47101 + 10 * i);
    BOOST_TEST(lane_port_of(c.nodes[i]) == 47102 + 10 * i);
    BOOST_TEST(c.nodes[i].platforms.size() == 1u);
  }
  BOOST_TEST(c.node("b").port == 47111);
  BOOST_TEST(c.platforms().size() == 3u);
}

BOOST_AUTO_TEST_CASE(missing_file_is_named) {
  std::string e = error_of([] { load("/nonexistent/cluster.toml"); });
  BOOST_TEST(contains(e, "'/nonexistent/cluster.toml'"), e);
}

BOOST_AUTO_TEST_CASE(file_values_apply_over_the_defaults) {
  cluster_config c = parse(R"(
[train]
epochs = 3
lr = 1          # an integer is a fine number
[data]
partition = "dirichlet"
)", file);
  BOOST_TEST(c.train.epochs == 3u);
  BOOST_TEST(c.train.lr == 1.0);
  BOOST_TEST(c.data.partition == "dirichlet");
  BOOST_TEST(c.train.batch == default_config().train.batch);
  BOOST_TEST(c.nodes.size() == 1u);  // no [[nodes]]: the default node stays
}

BOOST_AUTO_TEST_CASE(nodes_replace_the_default_nodes) {
  cluster_config c = parse(R"(
[[nodes]]
name = "edge"
port = 5000
  [[nodes.platforms]]
  name = "x"
  interference = [{at = 10.0, slowdown = 3.0}, {at = 20, slowdown = 1}]
)", file);
  BOOST_REQUIRE(c.nodes.size() == 1u);
  BOOST_TEST(c.nodes[0].name == "edge");
  BOOST_TEST(c.nodes[0].host == "127.0.0.1");
  BOOST_TEST(c.nodes[0].port == 5000);
  BOOST_REQUIRE(c.nodes[0].platforms.size() == 1u);
  const platform_config& p = c.nodes[0].platforms[0];
  BOOST_TEST(p.name == "x");
  BOOST_TEST(p.threads == 1);
  BOOST_REQUIRE(p.interference.size() == 2u);
  BOOST_TEST(p.interference[0].at_seconds == 10.0);
  BOOST_TEST(p.interference[0].slowdown == 3.0);
  BOOST_TEST(p.interference[1].at_seconds == 20.0);
  BOOST_CHECK_NO_THROW(validate(c));
}

BOOST_AUTO_TEST_CASE(bad_values_name_key_and_line) {
  std::string e = error_of([] { parse("[cluster]\nid = \"x\"\n\n[train]\nepochs = -3\n", file); });
  BOOST_TEST(e == "cluster.toml:5: train.epochs must be a positive integer, got -3");
  e = error_of([] { parse("[train]\nepochs = 5000000000\n", file); });
  BOOST_TEST(e == "cluster.toml:2: train.epochs must be at most 4294967295, got 5000000000");
  e = error_of([] { parse("[strategy]\nschedule = \"later\"\n", file); });
  BOOST_TEST(e == "cluster.toml:2: strategy.schedule must be 'sync' or 'async', got 'later'");
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\nport = 70000\n", file); });
  BOOST_TEST(e == "cluster.toml:3: nodes[0].port must be at most 65535, got 70000");
  e = error_of([] { parse("[edgegossip]\ndeadline = 0.5\n", file); });
  BOOST_TEST(e == "cluster.toml:2: edgegossip.deadline must be 0 (off) or a factor >= 1, got 0.5");
  BOOST_TEST(parse("[edgegossip]\ndeadline = 0\n", file).edgegossip.deadline == 0.0);
  BOOST_TEST(!parse("[edgegossip]\ncount_network = false\n", file).edgegossip.count_network);
  BOOST_TEST(parse("", file).edgegossip.count_network);
  BOOST_TEST(parse("", file).edgegossip.first_epoch_share == 0.25);
  e = error_of([] { parse("[edgegossip]\nfirst_epoch_share = 0\n", file); });
  BOOST_TEST(e == "cluster.toml:2: edgegossip.first_epoch_share must be a number in (0, 1], got 0");
  BOOST_TEST(parse("[edgegossip]\nfirst_epoch_share = 1\n", file).edgegossip.first_epoch_share
             == 1.0);
  // The overlap wait: -1 (the default) is 1 for push-sum alone and for
  // EdgeGossip over SGP, 0 for EdgeGossip over sparse messages; a value set
  // is kept either way.
  BOOST_TEST(parse("", file).strategy.overlap == -1);
  BOOST_TEST(parse("[strategy]\nname = \"sparse-push\"\n", file).strategy.overlap_tau() == 1);
  BOOST_TEST(parse("[strategy]\nname = \"edgegossip\"\ngossip = \"sparse-push\"\n", file)
               .strategy.overlap_tau() == 0);
  BOOST_TEST(parse("[strategy]\nname = \"edgegossip\"\ngossip = \"sgp\"\n", file)
               .strategy.overlap_tau() == 1);
  BOOST_TEST(parse("[strategy]\nname = \"edgegossip\"\ngossip = \"scsp\"\n", file)
               .strategy.overlap_tau() == 0);
  // (the registry's `sparse` trait says which rules send sparse messages)
  BOOST_TEST(strategies().at("scsp").sparse);
  BOOST_TEST(!strategies().at("sgp").sparse);
  BOOST_TEST(!strategies().at("gosgd").sparse);
  BOOST_TEST(
    parse("[strategy]\nname = \"edgegossip\"\ngossip = \"sgp\"\noverlap = 2\n", file)
      .strategy.overlap_tau() == 2);
  BOOST_TEST(parse("[strategy]\nname = \"sgp\"\noverlap = 0\n", file).strategy.overlap_tau() == 0);
  e = error_of([] { parse("[strategy]\noverlap = -2\n", file); });
  BOOST_TEST(contains(e, "strategy.overlap must be an integer >= -1"), e);
}

BOOST_AUTO_TEST_CASE(wrong_types_name_key_and_expected_type) {
  std::string e = error_of([] { parse("[train]\nlr = \"fast\"\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:2: train.lr must be a number, got string"), e);
  e = error_of([] { parse("[train]\nbatch = 6.5\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:2: train.batch must be an integer, got float 6.5"), e);
  e = error_of([] { parse("[cluster]\nid = 4\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:2: cluster.id must be a string, got integer 4"), e);
  e = error_of([] { parse("train = 3\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:1: train must be a table"), e);
  e = error_of([] { parse("nodes = 3\n", file); });
  BOOST_TEST(contains(e, "nodes must be an array of tables"), e);
  e = error_of([] { parse("nodes = [1]\n", file); });
  BOOST_TEST(contains(e, "nodes[0] must be a table"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\nplatforms = [{name = \"p\", interference = 2}]\n", file); });
  BOOST_TEST(contains(e, "nodes[0].platforms[0].interference must be an array of tables"), e);
}

BOOST_AUTO_TEST_CASE(syntax_errors_report_the_line) {
  std::string e = error_of([] { parse("[train]\nepochs = 3\nlr = = 0.1\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:3: "), e);
  e = error_of([] { parse("[train]\nepochs = 3\n[train]\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:3: "), e);
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_errors) {
  std::string e = error_of([] { parse("[train]\nepoch = 3\n", file); });
  BOOST_TEST(e == "cluster.toml:2: unknown key 'train.epoch' (did you mean 'train.epochs'?)");
  e = error_of([] { parse("[trian]\nepochs = 3\n", file); });
  BOOST_TEST(contains(e, "unknown key 'trian' (did you mean 'train'?)"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\nprot = 1\n", file); });
  BOOST_TEST(contains(e, "unknown key 'nodes[0].prot' (did you mean 'nodes[0].port'?)"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\n[[nodes.platform]]\nname = \"p\"\n", file); });
  BOOST_TEST(contains(e, "unknown key 'nodes[0].platform' (did you mean 'nodes[0].platforms'?)"), e);
  e = error_of([] { parse("[cluster]\nflavour = \"x\"\n", file); });
  BOOST_TEST(e == "cluster.toml:2: unknown key 'cluster.flavour'");
}

BOOST_AUTO_TEST_CASE(overrides) {
  cluster_config c = default_config();
  apply_override(c, "train.epochs=3");
  BOOST_TEST(c.train.epochs == 3u);
  apply_override(c, "strategy.schedule=async");  // a bare string
  BOOST_TEST((c.strategy.schedule == schedule::async));
  apply_override(c, " strategy.name = \"gosgd\" ");  // a quoted one
  BOOST_TEST(c.strategy.name == "gosgd");
  apply_override(c, "data.alpha=2");
  BOOST_TEST(c.data.alpha == 2.0);
  apply_override(c, "train.lr=0.125");
  BOOST_TEST(c.train.lr == 0.125);
  apply_override(c, "cluster.secret=a=b");  // only the first '=' splits
  BOOST_TEST(c.secret == "a=b");
  apply_override(c, "cluster.balancer=");
  BOOST_TEST(c.balancer_node == "");

  std::string e = error_of([&] { apply_override(c, "train.epochs=three"); });
  BOOST_TEST(contains(e, "train.epochs must be an integer, got string 'three'"), e);
  e = error_of([&] { apply_override(c, "train.epochs=0"); });
  BOOST_TEST(contains(e, "train.epochs must be a positive integer, got 0"), e);
  e = error_of([&] { apply_override(c, "train.epoch=3"); });
  BOOST_TEST(contains(e, "unknown key 'train.epoch' (did you mean 'train.epochs'?)"), e);
  e = error_of([&] { apply_override(c, "train.epochs"); });
  BOOST_TEST(contains(e, "'train.epochs'"), e);
  BOOST_TEST(contains(e, "key=value"), e);
  BOOST_TEST(c.train.epochs == 3u);  // refused overrides change nothing
}

BOOST_AUTO_TEST_CASE(every_rule_names_its_key) {
  struct rule_case {
    std::function<void(cluster_config&)> change;
    std::string names;
  };
  const std::vector<rule_case> cases = {
      {[](cluster_config& c) { c.id = ""; }, "cluster.id must not be empty"},
      {[](cluster_config& c) { c.seed = ~0ull; }, "cluster.seed"},
      {[](cluster_config& c) { c.balancer_node = "nowhere"; }, "cluster.balancer"},
      {[](cluster_config& c) { c.majority = 99; }, "cluster.majority is 99 but the cluster has"},
      {[](cluster_config& c) { c.majority = -1; }, "cluster.majority"},
      {[](cluster_config& c) { c.data.name = ""; }, "data.name"},
      {[](cluster_config& c) { c.data.dir = ""; }, "data.dir"},
      {[](cluster_config& c) { c.data.partition = "random"; }, "data.partition"},
      {[](cluster_config& c) { c.data.alpha = 0; }, "data.alpha"},
      {[](cluster_config& c) { c.data.train_samples = -1; }, "data.train_samples"},
      {[](cluster_config& c) { c.data.test_samples = -5; }, "data.test_samples"},
      {[](cluster_config& c) { c.train.model = "resnet"; }, "train.model"},
      {[](cluster_config& c) { c.train.lr_schedule = "step"; }, "train.lr_schedule"},
      {[](cluster_config& c) { c.train.lr_warmup = -1; }, "train.lr_warmup"},
      {[](cluster_config& c) { c.train.lr = 0; }, "train.lr"},
      {[](cluster_config& c) { c.train.lr = std::nan(""); }, "train.lr"},
      {[](cluster_config& c) { c.train.momentum = 1; }, "train.momentum"},
      {[](cluster_config& c) { c.train.momentum = -0.1; }, "train.momentum"},
      {[](cluster_config& c) { c.strategy.drift_memory = 1; }, "strategy.drift_memory"},
      {[](cluster_config& c) { c.strategy.drift_gain = -1; }, "strategy.drift_gain"},
      {[](cluster_config& c) { c.train.batch = 0; }, "train.batch"},
      {[](cluster_config& c) { c.train.epochs = 0; }, "train.epochs must be a positive integer, got 0"},
      {[](cluster_config& c) { c.train.max_iterations = -1; }, "train.max_iterations"},
      {[](cluster_config& c) { c.train.evaluate_every = -2; }, "train.evaluate_every"},
      {[](cluster_config& c) { c.train.average_every = -1; }, "train.average_every"},
      {[](cluster_config& c) { c.strategy.exchange_probability = 0; }, "strategy.exchange_probability"},
      {[](cluster_config& c) { c.strategy.exchange_probability = 1.5; }, "strategy.exchange_probability"},
      {[](cluster_config& c) { c.storage_dir = ""; }, "storage.dir"},
      {[](cluster_config& c) { c.output_dir = ""; }, "output.dir"},
      {[](cluster_config& c) { c.nodes.clear(); }, "nodes: the cluster needs at least one node"},
      {[](cluster_config& c) { c.nodes[0].name = ""; }, "nodes[0].name must not be empty"},
      {[](cluster_config& c) { c.nodes[0].host = ""; }, "nodes[0].host"},
      {[](cluster_config& c) { c.nodes[1].name = "a"; }, "nodes[1].name 'a' is already used by nodes[0]"},
      {[](cluster_config& c) { c.nodes[2].port = 47101; }, "nodes[2].port"},
      // Every port a node listens on is its own on its host: b's weights
      // lane takes 47102 (its port + 1) on 10.0.0.2.
      {[](cluster_config& c) { c.nodes[2].port = 47102; }, "nodes[2].port (node 'c''s port) and nodes[1].lane_port (node 'b''s weights lane, its port + 1 by default) both use 10.0.0.2:47102"},
      {[](cluster_config& c) { c.nodes[1].lane_port = 47101; }, "nodes[1].lane_port"},
      {[](cluster_config& c) { c.nodes[2].metrics_port = 47101; }, "nodes[2].metrics_port"},
      {[](cluster_config& c) { c.nodes[1].port = 65535; }, "nodes[1].lane_port: node 'b' listens on port 65535"},
      {[](cluster_config& c) { c.nodes[1].platforms.clear(); }, "nodes[1].platforms"},
      {[](cluster_config& c) { c.nodes[2].platforms[0].name = "a0"; }, "nodes[2].platforms[0].name 'a0' is already used on node 'a'"},
      {[](cluster_config& c) { c.nodes[0].platforms[1].name = "a0"; }, "nodes[0].platforms[1].name"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].name = ""; }, "nodes[0].platforms[0].name"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].threads = 0; }, "nodes[0].platforms[0].threads"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].share = 1.5; }, "nodes[0].platforms[0].share"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].share = -0.5; }, "nodes[0].platforms[0].share"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].share = 0.9; }, "nodes.platforms.share"},
      {[](cluster_config& c) { c.nodes[0].platforms[0].share = 0.875; }, "nodes[0].platforms[1].share"},
      {[](cluster_config& c) { c.nodes[1].platforms[0].slowdown = 0.5; }, "nodes[1].platforms[0].slowdown"},
      {[](cluster_config& c) { c.nodes[1].platforms[0].interference[1].at_seconds = -1; }, "nodes[1].platforms[0].interference[1].at"},
      {[](cluster_config& c) { c.nodes[1].platforms[0].interference[1].slowdown = 0.9; }, "nodes[1].platforms[0].interference[1].slowdown"},
      {[](cluster_config& c) { c.nodes[1].platforms[0].interference[2].at_seconds = 10.5; }, "nodes[1].platforms[0].interference[2].at"},
      {[](cluster_config& c) { c.cpu_limiter = "docker"; }, "cluster.cpu_limiter must be 'auto', 'cgroup' or 'cpulimit', got 'docker'"},
      {[](cluster_config& c) { c.nodes[0].cpu_limit = -0.5; }, "nodes[0].cpu_limit must be 0 (no limit) or a number of cores >= 0.01, got -0.5"},
      {[](cluster_config& c) { c.nodes[0].cpu_limit = 0.005; }, "nodes[0].cpu_limit"},
      {[](cluster_config& c) { c.nodes[0].cpu_limit = std::nan(""); }, "nodes[0].cpu_limit"},
      {[](cluster_config& c) { c.nodes[0].cpu_limit = INFINITY; }, "nodes[0].cpu_limit"},
      {[](cluster_config& c) { c.nodes[1].cpu_schedule[1].cores = -1; }, "nodes[1].cpu_schedule[1].cores"},
      {[](cluster_config& c) { c.nodes[1].cpu_schedule[0].at_seconds = -2; }, "nodes[1].cpu_schedule[0].at"},
      {[](cluster_config& c) { c.nodes[1].cpu_schedule[2].at_seconds = 30.5; }, "nodes[1].cpu_schedule[2].at must be later than the step before it (30.5 after 30.5)"},
  };
  BOOST_CHECK_NO_THROW(validate(unusual_config()));
  for (const auto& rc : cases) {
    cluster_config c = unusual_config();
    rc.change(c);
    std::string e = error_of([&] { validate(c); });
    BOOST_TEST(contains(e, rc.names), "expected '" << rc.names << "', got '" << e << "'");
  }
  // The port rule is checked at parse time (a uint16_t cannot hold 70000).
  std::string e = error_of([] { parse("[[nodes]]\nname = \"a\"\nport = -1\n", file); });
  BOOST_TEST(contains(e, "nodes[0].port must be an integer in [0, 65535], got -1"), e);
}

BOOST_AUTO_TEST_CASE(same_port_on_different_hosts_is_fine) {
  cluster_config c = unusual_config();  // a and b both use 47101, on different hosts
  BOOST_CHECK_NO_THROW(validate(c));
  c.nodes[2].port = 0;  // port 0 picks a free one: no clash on the same host
  c.nodes.push_back({"d", "10.0.0.2", 0, {{"d0", 1, 0, 1.0, {}}}, {}, 0, {}});
  BOOST_CHECK_NO_THROW(validate(c));
}

BOOST_AUTO_TEST_CASE(a_weights_lane_listens_on_its_nodes_port_plus_one_unless_set) {
  node_config n;
  n.port = 47101;
  BOOST_TEST(lane_port_of(n) == 47102);
  n.lane_port = 0;  // any free port
  BOOST_TEST(lane_port_of(n) == 0);
  n.lane_port = 48000;
  BOOST_TEST(lane_port_of(n) == 48000);
  n.lane_port = -1;
  n.port = 0;  // a node on any free port: its lane too
  BOOST_TEST(lane_port_of(n) == 0);
  const auto c = parse("[[nodes]]\nname = \"a\"\nport = 5000\nlane_port = 6000\n"
                       "metrics_port = 9100\n[[nodes.platforms]]\nname = \"p\"\n"
                       "data = \"/d/p\"\ndata_format = \"npy\"\ntest_dir = \"/d/t\"\n",
                       file);
  BOOST_TEST(lane_port_of(c.nodes[0]) == 6000);
  BOOST_TEST(c.nodes[0].metrics_port == 9100);
  BOOST_TEST(c.nodes[0].platforms[0].data_dir == "/d/p");
  BOOST_TEST(c.nodes[0].platforms[0].data_format == "npy");
  BOOST_TEST(c.nodes[0].platforms[0].test_dir == "/d/t");
  const auto e = error_of([] { parse("[[nodes]]\nname = \"a\"\nlane_port = -2\n", file); });
  BOOST_TEST(contains(e, "nodes[0].lane_port must be an integer in [-1, 65535]"), e);
}

BOOST_AUTO_TEST_CASE(node_lookup) {
  cluster_config c = unusual_config();
  BOOST_TEST(c.node("c").host == "10.0.0.2");
  BOOST_TEST(c.balancer().name == "b");
  c.balancer_node = "";
  BOOST_TEST(c.balancer().name == "a");
  std::string e = error_of([&] { c.node("z"); });
  BOOST_TEST(contains(e, "'z'"), e);
  std::vector<std::string> names;
  for (const auto& p : c.platforms()) names.push_back(p.name);
  BOOST_TEST(names == (std::vector<std::string>{"a0", "a1", "b0", "c0"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(strategies_and_schedules) {
  auto c = default_config();
  BOOST_TEST(!c.strategy.asynchronous());
  BOOST_TEST(!c.strategy.edgegossip());
  apply_override(c, "strategy.name=gosgd-async");
  BOOST_TEST(c.strategy.asynchronous());
  apply_override(c, "strategy.name=edgegossip");
  BOOST_TEST(c.strategy.edgegossip());
  BOOST_TEST(!c.strategy.asynchronous());
  BOOST_TEST(contains(error_of([&] { apply_override(c, "strategy.name=fastest"); }),
                      "strategy.name"));
  apply_override(c, "strategy.name=sgp");
  BOOST_TEST(c.strategy.name == "sgp");
  BOOST_TEST(!c.strategy.edgegossip());
  apply_override(c, "strategy.topology=full");
  BOOST_TEST(c.strategy.topology == "full");
  BOOST_TEST(c.strategy.out_peers == 1);
  apply_override(c, "strategy.out_peers=3");
  BOOST_TEST(c.strategy.out_peers == 3);
  BOOST_TEST(contains(error_of([&] { apply_override(c, "strategy.out_peers=0"); }),
                      "strategy.out_peers"));
  BOOST_TEST(contains(error_of([&] { apply_override(c, "edgegossip.aggregator=pca"); }),
                      "edgegossip.aggregator"));
  // Push-sum in rounds of local steps; values in one byte.
  apply_override(c, "strategy.gossip_every=4");
  BOOST_TEST(c.strategy.gossip_every == 4);
  BOOST_CHECK_NO_THROW(validate(c));
  BOOST_TEST(contains(error_of([&] { apply_override(c, "strategy.gossip_every=0"); }),
                      "strategy.gossip_every must be a positive integer"));
  BOOST_TEST(c.train.lr_schedule == "constant");  // the default
  apply_override(c, "train.lr_schedule=cosine");
  BOOST_TEST(c.train.lr_schedule == "cosine");
  BOOST_TEST(contains(error_of([&] { apply_override(c, "train.lr_schedule=linear"); }),
                      "train.lr_schedule"));
  BOOST_TEST(c.train.lr_warmup == 0);  // the default
  apply_override(c, "train.lr_warmup=1.5");
  BOOST_TEST(c.train.lr_warmup == 1.5);
  BOOST_TEST(contains(error_of([&] { apply_override(c, "train.lr_warmup=-2"); }),
                      "train.lr_warmup"));
  BOOST_TEST(c.strategy.sparse_values == "sign");  // the default
  apply_override(c, "strategy.sparse_values=float16");
  BOOST_TEST(c.strategy.sparse_values == "float16");
  BOOST_TEST(contains(error_of([&] { apply_override(c, "strategy.sparse_values=int4"); }),
                      "strategy.sparse_values"));
  auto g = c;
  apply_override(g, "strategy.name=gosgd");
  auto e = error_of([&] { validate(g); });
  BOOST_TEST(contains(e, "strategy.gossip_every is 4, but only the push-sum family"), e);
  BOOST_TEST(contains(e, "strategy.name is 'gosgd'"), e);

  // EdgeGossip over the push-sum family: its gossip rounds count.
  auto eg = c;
  BOOST_TEST(eg.strategy.gossip == "gosgd");  // the default: the paper's
  apply_override(eg, "strategy.name=edgegossip");
  apply_override(eg, "strategy.gossip=sparse-push");
  BOOST_TEST(eg.strategy.push_sum());
  BOOST_TEST(eg.strategy.edgegossip());
  BOOST_TEST(eg.strategy.rule() == "sparse-push");
  validate(eg);  // gossip_every 4 is a push-sum setting: fine
  BOOST_TEST(contains(error_of([&] { apply_override(eg, "strategy.gossip=bsp"); }),
                      "strategy.gossip"));
  auto alone = c;
  apply_override(alone, "strategy.name=sgp");
  apply_override(alone, "strategy.gossip=scsp");
  e = error_of([&] { validate(alone); });
  BOOST_TEST(contains(e, "strategy.gossip is 'scsp', but only EdgeGossip takes a gossip"), e);
  auto back = parse("[strategy]\nname = \"edgegossip\"\ngossip = \"scsp\"\n", "x.toml");
  BOOST_TEST(back.strategy.rule() == "scsp");
  BOOST_TEST(parse(to_toml(back), "y.toml").strategy.gossip == "scsp");
}

BOOST_AUTO_TEST_CASE(corunners_are_read_and_checked) {
  auto c = parse("[[nodes]]\nname = \"a\"\n[[nodes.platforms]]\nname = \"p\"\n"
                 "[[nodes.corunners]]\nkind = \"cpu\"\nworkers = 2\nat = 5.0\nuntil = 20.0\n",
                 file);
  BOOST_REQUIRE_EQUAL(c.nodes[0].corunners.size(), 1u);
  BOOST_TEST(c.nodes[0].corunners[0].workers == 2);
  BOOST_TEST(c.nodes[0].corunners[0].until_seconds == 20.0);
  auto bad = error_of([] {
    parse("[[nodes]]\nname = \"a\"\n[[nodes.corunners]]\nkind = \"gpu\"\n", file);
  });
  BOOST_TEST(contains(bad, "kind"));
}

BOOST_AUTO_TEST_CASE(cpu_limits_are_read_and_checked) {
  auto c = parse(R"(
[cluster]
cpu_limiter = "cgroup"
[[nodes]]
name = "a"
cpu_limit = 0.5
cpu_schedule = [{at = 30.0, cores = 0.25}, {at = 60, cores = 0}]
  [[nodes.platforms]]
  name = "p"
[[nodes]]
name = "b"
cpu_limit = 2   # an integer is a fine number of cores
  [[nodes.platforms]]
  name = "q"
)", file);
  BOOST_CHECK_NO_THROW(validate(c));
  BOOST_TEST(c.cpu_limiter == "cgroup");
  BOOST_TEST(c.nodes[0].cpu_limit == 0.5);
  BOOST_REQUIRE(c.nodes[0].cpu_schedule.size() == 2u);
  BOOST_TEST(c.nodes[0].cpu_schedule[0].at_seconds == 30.0);
  BOOST_TEST(c.nodes[0].cpu_schedule[0].cores == 0.25);
  BOOST_TEST(c.nodes[0].cpu_schedule[1].at_seconds == 60.0);
  BOOST_TEST(c.nodes[0].cpu_schedule[1].cores == 0.0);
  BOOST_TEST(c.nodes[1].cpu_limit == 2.0);
  BOOST_TEST(c.nodes[1].cpu_schedule.empty());
  // Defaults: no limit, chosen by "auto".
  BOOST_TEST(default_config().cpu_limiter == "auto");
  BOOST_TEST(default_config().nodes[0].cpu_limit == 0.0);
  BOOST_TEST(default_config().nodes[0].cpu_schedule.empty());

  apply_override(c, "cluster.cpu_limiter=cpulimit");
  BOOST_TEST(c.cpu_limiter == "cpulimit");
  std::string e = error_of([&] { apply_override(c, "cluster.cpu_limiter=docker"); });
  BOOST_TEST(e == "override 'cluster.cpu_limiter=docker': cluster.cpu_limiter must be 'auto', "
                  "'cgroup' or 'cpulimit', got 'docker'");
  BOOST_TEST(c.cpu_limiter == "cpulimit");

  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_limit = -1\n", file); });
  BOOST_TEST(e == "cluster.toml:3: nodes[0].cpu_limit must be 0 (no limit) or a number of cores "
                  ">= 0.01, got -1");
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_limit = 0.001\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:3: nodes[0].cpu_limit must be"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_limit = \"half\"\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:3: nodes[0].cpu_limit must be a number, got string"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_schedule = [{at = 5, cores = 0.005}]\n", file); });
  BOOST_TEST(contains(e, "cluster.toml:3: nodes[0].cpu_schedule[0].cores must be 0 (no limit) or a "
                         "number of cores >= 0.01, got 0.005"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_schedule = [{at = -5, cores = 1}]\n", file); });
  BOOST_TEST(contains(e, "nodes[0].cpu_schedule[0].at must be a non-negative number, got -5"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_schedule = [{at = 5, core = 1}]\n", file); });
  BOOST_TEST(contains(e, "unknown key 'nodes[0].cpu_schedule[0].core' (did you mean "
                         "'nodes[0].cpu_schedule[0].cores'?)"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_schedule = 0.5\n", file); });
  BOOST_TEST(contains(e, "nodes[0].cpu_schedule must be an array of tables"), e);
  e = error_of([] { parse("[[nodes]]\nname = \"a\"\ncpu_limt = 0.5\n", file); });
  BOOST_TEST(contains(e, "unknown key 'nodes[0].cpu_limt' (did you mean 'nodes[0].cpu_limit'?)"), e);
  e = error_of([] {
    validate(parse("[[nodes]]\nname = \"a\"\ncpu_schedule = [{at = 20, cores = 1}, {at = 10, cores = 0.5}]\n"
                   "[[nodes.platforms]]\nname = \"p\"\n", file));
  });
  BOOST_TEST(e == "nodes[0].cpu_schedule[1].at must be later than the step before it (10 after 20)");
}

BOOST_AUTO_TEST_CASE(to_toml_round_trip) {
  for (const cluster_config& c : {default_config(), unusual_config()}) {
    std::string text = to_toml(c);
    BOOST_TEST_CONTEXT(text) {
      cluster_config back = parse(text, "written.toml");
      check_same(back, c);
      BOOST_TEST(to_toml(back) == text);
    }
  }
}

BOOST_AUTO_TEST_CASE(join_settings_name_what_differs_from_the_cluster) {
  auto a = default_config();
  BOOST_TEST(join_settings_differences(join_settings(a), join_settings(a)) == "");
  // A node that does not say is not refused for it.
  BOOST_TEST(join_settings_differences(join_settings(a), "") == "");
  auto b = a;
  b.train.model = "mlp";
  auto why = join_settings_differences(join_settings(a), join_settings(b));
  BOOST_TEST(why.find("train.model is mlp there, " + a.train.model + " in the cluster")
               != std::string::npos,
             why);
  BOOST_TEST(why.find("fingerprint") == std::string::npos, why);  // the named key says it
  b = a;
  b.strategy.name = "edgegossip";
  why = join_settings_differences(join_settings(a), join_settings(b));
  BOOST_TEST(why.find("strategy.name is edgegossip there") != std::string::npos, why);
  // Only the fingerprint differs: said, with both.
  b = a;
  b.seed = a.seed + 1;
  why = join_settings_differences(join_settings(a), join_settings(b));
  BOOST_TEST(why.find(run_fingerprint(b) + ", the cluster's " + run_fingerprint(a))
               != std::string::npos,
             why);
  // What does not change the run does not refuse it.
  b = a;
  b.train.epochs += 2;
  b.nodes[0].cpu_limit = 0.5;
  BOOST_TEST(join_settings_differences(join_settings(a), join_settings(b)) == "");
}

BOOST_AUTO_TEST_CASE(run_fingerprint_covers_what_changes_training) {
  auto a = default_config();
  auto b = a;
  b.train.epochs = a.train.epochs + 3;  // a longer run of the same training
  b.output_dir = "elsewhere";
  BOOST_TEST(run_fingerprint(a) == run_fingerprint(b));
  // Heterogeneity, real CPU limits included, is not part of it.
  b.nodes[0].cpu_limit = 0.5;
  b.nodes[0].cpu_schedule = {{30, 0.25}};
  b.cpu_limiter = "cpulimit";
  b.nodes[0].platforms[0].slowdown = 3;
  BOOST_TEST(run_fingerprint(a) == run_fingerprint(b));
  for (auto change : std::vector<void (*)(cluster_config&)>{
         [](cluster_config& c) { c.seed = 2; },
         [](cluster_config& c) { c.train.lr = 0.02; },
         [](cluster_config& c) { c.strategy.name = "edgegossip"; },
         [](cluster_config& c) { c.strategy.topology = "exponential"; },
         [](cluster_config& c) { c.strategy.out_peers = 2; },
         [](cluster_config& c) { c.strategy.name = "sgp"; },
         [](cluster_config& c) { c.strategy.gossip_every = 2; },
         [](cluster_config& c) {
           c.strategy.name = "edgegossip";
           c.strategy.gossip = "sparse-push";
         },
         [](cluster_config& c) { c.train.lr_schedule = "cosine"; },
         [](cluster_config& c) { c.train.lr_warmup = 1; },
         [](cluster_config& c) { c.strategy.sparse_values = "float16"; },
         [](cluster_config& c) { c.edgegossip.selection = selection::random; },
         [](cluster_config& c) { c.edgegossip.merge = merge_rule::gossip; }}) {
    auto c = a;
    change(c);
    BOOST_TEST(run_fingerprint(c) != run_fingerprint(a));
  }
  // SCSP's gain counts for SCSP runs only (others keep their fingerprint).
  auto scsp = a;
  scsp.strategy.name = "scsp";
  auto stronger = scsp;
  stronger.strategy.drift_gain = 5;
  BOOST_TEST(run_fingerprint(stronger) != run_fingerprint(scsp));
  auto plain = a;
  plain.strategy.drift_gain = 5;
  BOOST_TEST(run_fingerprint(plain) == run_fingerprint(a));
}

BOOST_AUTO_TEST_CASE(split_runs_place_stages_on_nodes) {
  cluster_config c = load(EG_SOURCE_DIR "/configs/split.toml");
  BOOST_CHECK_NO_THROW(validate(c));
  BOOST_TEST(c.split.mode == "predicted");
  BOOST_TEST(c.split.model == "conv8");
  BOOST_TEST(c.split.sg_conditioned);
  BOOST_REQUIRE(c.stages.size() == 3u);
  BOOST_TEST(c.stages[1].node == "b");
  BOOST_TEST(c.stages[1].layers == 2);
  BOOST_TEST(c.stages[1].slowdown == 2.0);
  BOOST_TEST(c.platforms().empty());
  // Written and read back.
  auto back = parse(to_toml(c), "written.toml");
  BOOST_REQUIRE(back.stages.size() == 3u);
  BOOST_TEST(back.stages[2].layers == 4);
  BOOST_TEST(back.split.sg_lr == c.split.sg_lr);
  BOOST_TEST(to_toml(back) == to_toml(c));
  // The split settings are part of the run's fingerprint.
  auto other = c;
  other.split.mode = "backprop";
  BOOST_TEST(run_fingerprint(other) != run_fingerprint(c));
  other = c;
  other.stages[0].layers = 3;
  BOOST_TEST(run_fingerprint(other) != run_fingerprint(c));
  other = c;
  other.split.sg_conv_layers = 2;
  BOOST_TEST(run_fingerprint(other) != run_fingerprint(c));
  BOOST_TEST(parse(to_toml(other), "written.toml").split.sg_conv_layers == 2);
  other = c;
  other.split.lr_warmup = 188;
  BOOST_TEST(run_fingerprint(other) != run_fingerprint(c));
  BOOST_TEST(parse(to_toml(other), "written.toml").split.lr_warmup == 188);
  auto by_delay = other;
  by_delay.split.lr_warmup_rule = "delay";
  BOOST_TEST(run_fingerprint(by_delay) != run_fingerprint(other));
  BOOST_TEST(parse(to_toml(by_delay), "written.toml").split.lr_warmup_rule == "delay");
  BOOST_TEST(c.split.schedule == "1f1b");  // the example's
  BOOST_TEST(c.split.in_flight == 2);
  auto in_arrival = c;
  in_arrival.split.schedule = "arrival";
  BOOST_TEST(run_fingerprint(in_arrival) != run_fingerprint(c));
  BOOST_TEST(parse(to_toml(in_arrival), "written.toml").split.schedule == "arrival");
  BOOST_TEST(parse(to_toml(c), "written.toml").split.schedule == "1f1b");
  auto bad_schedule = c;
  bad_schedule.split.schedule = "gpipe";
  BOOST_CHECK_EXCEPTION(validate(bad_schedule), config_error,
                        [](const config_error& e) {
                          return std::string(e.what()).find("split.schedule") !=
                                 std::string::npos;
                        });
  auto bad_rule = c;
  bad_rule.split.lr_warmup_rule = "cosine";
  BOOST_CHECK_EXCEPTION(validate(bad_rule), config_error,
                        [](const config_error& e) {
                          return std::string(e.what()).find("split.lr_warmup_rule") !=
                                 std::string::npos;
                        });

  auto e = error_of([&] {
    auto d = c;
    d.stages[1].node = "z";
    validate(d);
  });
  BOOST_TEST(contains(e, "stages[1].node 'z' is no node"), e);
  e = error_of([&] {
    auto d = c;
    d.stages.clear();
    validate(d);
  });
  BOOST_TEST(contains(e, "needs the model's stages"), e);
  e = error_of([&] {
    auto d = c;
    d.split.mode = "off";
    validate(d);
  });
  BOOST_TEST(contains(e, "split.mode is \"off\""), e);
  e = error_of([&] {
    auto d = default_config();
    d.split.mode = "backprop";
    d.stages.push_back({"local", 5, 1.0});
    validate(d);
  });
  BOOST_TEST(contains(e, "platforms would not train"), e);
  e = error_of([] { parse("[split]\nmode = \"fast\"\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.mode must be 'off', 'backprop', 'synthetic', 'delayed', 'corrected', 'stashed' or 'predicted'"), e);
  e = error_of([] { parse("[split]\nsg_conditioned = 1\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.sg_conditioned must be true or false"), e);
  e = error_of([] {
    auto d = default_config();
    d.split.sg_conv_layers = 1;
    validate(d);
  });
  BOOST_TEST(contains(e, "split.sg_conv_layers must be 0 (an MLP), 2 or 3, not 1"), e);
  e = error_of([] { parse("[split]\nsg_conv_layers = 5\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.sg_conv_layers must be at most 3, got 5"), e);
  e = error_of([] { parse("[split]\nrollback_lr_factor = 1.5\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.rollback_lr_factor must be a number in (0, 1)"), e);
  e = error_of([] { parse("[split]\nstuck_after = -5\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.stuck_after"), e);
  e = error_of([] { parse("[split]\nmax_rollbacks = -1\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.max_rollbacks"), e);
  e = error_of([] { parse("[split]\nrunaway_guard = \"yes\"\n", "x.toml"); });
  BOOST_TEST(contains(e, "split.runaway_guard must be true or false"), e);
  e = error_of([] { parse("[[stages]]\nnode = \"a\"\nlayers = 0\n", "x.toml"); });
  BOOST_TEST(contains(e, "stages[0].layers must be a positive integer"), e);
  e = error_of([] { parse("[[stages]]\nnode = \"a\"\ncores = 2\n", "x.toml"); });
  BOOST_TEST(contains(e, "cores"), e);
}

BOOST_AUTO_TEST_CASE(models_and_devices_are_checked) {
  auto c = default_config();
  apply_override(c, "train.model=torchscript:/models/net.pt");
  BOOST_TEST(c.train.model == "torchscript:/models/net.pt");
  auto e = error_of([&] { apply_override(c, "train.model=torchscript:"); });
  BOOST_TEST(contains(e, "'torchscript:PATH'"), e);
  e = error_of([&] { apply_override(c, "train.model=resnet"); });
  BOOST_TEST(contains(e, "'mobilenetv2'"), e);
  auto d = parse("[[nodes]]\nname = \"a\"\n[[nodes.platforms]]\nname = \"g\"\ndevice = \"cuda:1\"\n",
                 "x.toml");
  BOOST_TEST(d.nodes[0].platforms[0].device == "cuda:1");
  e = error_of([] {
    parse("[[nodes]]\nname = \"a\"\n[[nodes.platforms]]\nname = \"g\"\ndevice = \"tpu\"\n", "x.toml");
  });
  BOOST_TEST(contains(e, "device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'"), e);
}

BOOST_AUTO_TEST_CASE(members_that_joined_are_written_read_and_checked) {
  auto c = default_config();
  node_config d;
  d.name = "d";
  d.host = "10.1.2.4";
  d.port = 47301;
  d.lane_port = 47400;
  d.data_dir = "/srv/d data";
  d.joined = true;
  platform_config p;
  p.name = "d0";
  p.threads = 2;
  d.platforms.push_back(p);
  auto text = member_toml(d);
  BOOST_TEST(contains(text, "joined = true"), text);
  auto back = parse_members(text + "\n" + member_toml(d), "members");
  BOOST_REQUIRE_EQUAL(back.size(), 2u);
  BOOST_TEST(back[0].name == "d");
  BOOST_TEST(back[0].host == "10.1.2.4");
  BOOST_TEST(back[0].port == 47301);
  BOOST_TEST(back[0].lane_port == 47400);
  BOOST_TEST(back[0].data_dir == "/srv/d data");
  BOOST_TEST(back[0].joined);
  BOOST_REQUIRE_EQUAL(back[0].platforms.size(), 1u);
  BOOST_TEST(back[0].platforms[0].threads == 2);
  // Nothing but [[nodes]]; each checked as in a cluster file.
  auto e = error_of([] { parse_members("[train]\nepochs = 3\n", "members"); });
  BOOST_TEST(contains(e, "members"), e);
  e = error_of([] { parse_members("[[nodes]]\nname = \"d\"\nport = 70000\n", "members"); });
  BOOST_TEST(contains(e, "port"), e);
  e = error_of([] { parse_members("[[nodes]\n", "members"); });
  BOOST_TEST(contains(e, "members:1"), e);

  // In a cluster: after the file's nodes, written and read back as such.
  c.nodes[0].port = 47101;
  c.nodes.push_back(d);
  validate(c);
  auto again = parse(to_toml(c), "written.toml");
  BOOST_TEST(again.nodes.back().joined);
  BOOST_TEST(!again.nodes.front().joined);
  // A joined node changes neither the run's fingerprint nor the partition.
  BOOST_TEST(run_fingerprint(c) == run_fingerprint(default_config()));
  BOOST_TEST(c.file_platforms().size() == default_config().platforms().size());
  BOOST_TEST(c.platforms().size() == default_config().platforms().size() + 1);
  auto swapped = c;
  std::swap(swapped.nodes[0], swapped.nodes[1]);
  e = error_of([&] { validate(swapped); });
  BOOST_TEST((contains(e, "nodes that joined come last") || contains(e, "starts from nodes")), e);
  auto clash = c;
  clash.nodes.back().platforms[0].name = c.nodes[0].platforms[0].name;
  e = error_of([&] { validate(clash); });
  BOOST_TEST(!e.empty());
}

BOOST_AUTO_TEST_SUITE_END()
