// Stage actors (actors/stage.hpp): a split model trained by a pipeline of
// actors, against the same model whole.
#include "actors/stage.hpp"
#include "actors/wire.hpp"
#include "models/dataset.hpp"
#include "algorithms/split/split.hpp"
#include "process.hpp"
#include "storage/store.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <fstream>
#include <thread>
#include <regex>
#include <vector>

using namespace eg;
using namespace eg::actors;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

struct fashion_data {
  std::shared_ptr<const learning::dataset> train, test;
};

const fashion_data& fashion() {
  static fashion_data d = [] {
    fashion_data x;
    x.train = std::make_shared<learning::dataset>(
      learning::load_fashion_mnist(data_dir, learning::split::train, 4096));
    auto test = learning::load_fashion_mnist(data_dir, learning::split::test, 2000);
    test.norm = x.train->norm;  // the test images normalised as the training images are
    x.test = std::make_shared<learning::dataset>(std::move(test));
    return x;
  }();
  return d;
}

struct pipeline {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::shared_ptr<learning::stage_trainer>> trainers;
  std::vector<stage_actor> stages;

  /// `lr`: the stages' SGD learning rate; `guard`: their runaway guard;
  /// `one_forward_one_backward`: the stages keep to that schedule.
  pipeline(const std::string& model, const std::vector<int64_t>& cuts, learning::stage_mode mode,
           std::vector<double> slowdowns = {}, double lr = 0.01,
           learning::runaway_options guard = {}, bool one_forward_one_backward = false) {
    announce_types(cfg);
    cfg.set("logger.verbosity", caf::atom("quiet"));
    sys = std::make_unique<caf::actor_system>(cfg);
    learning::stage_options o;
    o.mode = mode;
    o.sgd.lr = lr;
    trainers = learning::make_pipeline(model, cuts, 1, o, learning::shape_of(*fashion().train));
    for (size_t k = 0; k < trainers.size(); ++k) {
      stage_args a;
      a.runaway = guard;
      a.trainer = trainers[k];
      a.index = k;
      a.slowdown = k < slowdowns.size() ? slowdowns[k] : 1.0;
      if (one_forward_one_backward)
        a.forward_limit = one_forward_one_backward_limit(3, k);
      if (k == 0) {
        a.train_set = fashion().train;
        a.test_set = fashion().test;
        a.in_flight = 3;
      }
      stages.push_back(spawn_stage(*sys, std::move(a)));
    }
    link_stages(stages);
  }
  ~pipeline() {
    for (auto& s : stages)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }

  std::vector<split_epoch> run(uint32_t epochs) {
    std::vector<split_epoch> out;
    if (auto err = try_run(epochs, out))
      BOOST_FAIL("the run failed: " << sys->render(*err));
    return out;
  }

  /// The run's epochs in `out`, or its error.
  std::optional<caf::error> try_run(uint32_t epochs, std::vector<split_epoch>& out) {
    caf::scoped_actor self{*sys};
    std::optional<caf::error> failed;
    self->request(stages.front(), std::chrono::seconds(300), run_atom::value, epochs)
      .receive([&](std::vector<split_epoch>& e) { out = std::move(e); },
               [&](caf::error& err) { failed = err; });
    return failed;
  }

  stage_stats stats(size_t k) {
    caf::scoped_actor self{*sys};
    stage_stats s;
    self->request(stages.at(k), std::chrono::seconds(10), stats_atom::value)
      .receive([&](stage_stats& x) { s = x; }, [&](caf::error&) { BOOST_FAIL("no stats"); });
    return s;
  }

  /// Every parameter of the stages, in order.
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> all;
    for (auto& t : trainers)
      for (auto& p : t->parameters())
        all.push_back(p.detach().clone());
    return all;
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(stage)

BOOST_AUTO_TEST_CASE(a_split_in_backprop_mode_trains_exactly_as_the_whole_model) {
  pipeline whole("lenet5", {}, learning::stage_mode::backprop);
  pipeline split("lenet5", {1, 3}, learning::stage_mode::backprop);
  auto w = whole.run(2);
  auto s = split.run(2);
  BOOST_REQUIRE_EQUAL(w.size(), 2u);
  BOOST_REQUIRE_EQUAL(s.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    BOOST_TEST(s[e].test_accuracy == w[e].test_accuracy);
    BOOST_TEST(std::abs(s[e].train_loss - w[e].train_loss) < 1e-5);
  }
  BOOST_TEST(w.back().test_accuracy > 0.5);  // it learnt
  auto pw = whole.parameters();
  auto ps = split.parameters();
  BOOST_REQUIRE_EQUAL(pw.size(), ps.size());
  for (size_t i = 0; i < pw.size(); ++i)
    BOOST_TEST(torch::allclose(pw[i], ps[i], 1e-5, 1e-6), "parameter " << i);
  // Activations went up and gradients came down between the three stages;
  // the stages waited for each other.
  auto first = split.stats(0), middle = split.stats(1), last = split.stats(2);
  BOOST_TEST(first.bytes_up > 0u);
  BOOST_TEST(first.bytes_down == 0u);  // nothing below the first
  BOOST_TEST(middle.bytes_down > 0u);
  BOOST_TEST(last.bytes_up == 0u);
  BOOST_TEST(first.batches == 2u * 64u);  // 4096 images, batch 64, 2 epochs
  BOOST_TEST(last.idle_share() > 0.2);
}

BOOST_AUTO_TEST_CASE(a_split_with_synthetic_gradients_trains_every_batch_and_learns) {
  pipeline split("lenet5", {1}, learning::stage_mode::synthetic);
  auto s = split.run(3);
  BOOST_REQUIRE_EQUAL(s.size(), 3u);
  BOOST_TEST(split.stats(0).batches == 3u * 64u);
  BOOST_TEST(split.stats(1).batches == 3u * 64u);
  // The lower stage sent gradients down? There is none below it; the upper
  // one sent its input gradients, the lower stage's regression targets.
  BOOST_TEST(split.stats(1).bytes_down > 0u);
  BOOST_TEST(s.back().seconds > s.front().seconds);
  BOOST_TEST_MESSAGE("synthetic gradients, 3 epochs: test accuracy " << s.back().test_accuracy);
  BOOST_TEST(s.back().test_accuracy > 0.4, "accuracy " << s.back().test_accuracy);
}

BOOST_AUTO_TEST_CASE(pipelined_stages_pipeline_batches_and_learn) {
  // Delayed, corrected and stashed modes keep several batches in the
  // pipeline (the first stage's window) and send the true gradient down;
  // every batch is trained.
  for (auto mode : {learning::stage_mode::delayed, learning::stage_mode::corrected,
                    learning::stage_mode::stashed}) {
    BOOST_TEST_CONTEXT(learning::to_string(mode)) {
      pipeline split("lenet5", {1, 3}, mode);
      auto s = split.run(3);
      BOOST_REQUIRE_EQUAL(s.size(), 3u);
      BOOST_TEST(split.stats(0).batches == 3u * 64u);
      BOOST_TEST(split.stats(2).batches == 3u * 64u);
      BOOST_TEST(split.stats(1).bytes_down > 0u);  // true gradients came down
      BOOST_TEST_MESSAGE(learning::to_string(mode) << ", 3 epochs: test accuracy "
                                                   << s.back().test_accuracy);
      BOOST_TEST(s.back().test_accuracy > 0.5, "accuracy " << s.back().test_accuracy);
    }
  }
}

BOOST_AUTO_TEST_CASE(one_forward_one_backward_trains_the_same_at_any_speed) {
  // Under the one-forward-one-backward schedule each stage steps in the
  // same order in every run: a pipeline whose stages run at other speeds,
  // so that their messages come in another order, trains exactly the same.
  BOOST_TEST(one_forward_one_backward_limit(3, 0) == 3);
  BOOST_TEST(one_forward_one_backward_limit(3, 1) == 2);
  BOOST_TEST(one_forward_one_backward_limit(3, 5) == 1);
  for (auto mode : {learning::stage_mode::predicted, learning::stage_mode::synthetic}) {
    BOOST_TEST_CONTEXT(learning::to_string(mode)) {
      pipeline even("lenet5", {1, 3}, mode, {1, 1, 1}, 0.01, {}, true);
      pipeline uneven("lenet5", {1, 3}, mode, {1, 3, 2}, 0.01, {}, true);
      auto a = even.run(2);
      auto b = uneven.run(2);
      BOOST_REQUIRE_EQUAL(a.size(), 2u);
      BOOST_REQUIRE_EQUAL(b.size(), 2u);
      for (size_t e = 0; e < 2; ++e) {
        BOOST_TEST(a[e].train_loss == b[e].train_loss);
        BOOST_TEST(a[e].test_accuracy == b[e].test_accuracy);
      }
      auto pa = even.parameters();
      auto pb = uneven.parameters();
      for (size_t i = 0; i < pa.size(); ++i)
        BOOST_TEST(torch::equal(pa[i], pb[i]), "parameter " << i);
      BOOST_TEST(uneven.stats(2).batches == 2u * 64u);
      if (mode == learning::stage_mode::predicted)  // (synthetic learns slowly: docs/SPLIT.md)
        BOOST_TEST(a.back().test_accuracy > 0.5, "accuracy " << a.back().test_accuracy);
    }
  }
}

// A scripted divergence: a learning rate far too high for LeNet-5 with
// momentum 0.9. Unguarded, the pipeline is left guessing; guarded, every
// stage goes back to its checkpoint with a smaller learning rate (x 0.05
// here) and trains.
BOOST_AUTO_TEST_CASE(a_runaway_pipeline_is_rolled_back_and_slowed_not_left_guessing) {
  const double too_fast = 0.8;
  learning::runaway_options off;
  off.enabled = false;
  pipeline unguarded("lenet5", {1, 3}, learning::stage_mode::backprop, {}, too_fast, off);
  auto u = unguarded.run(2);
  BOOST_REQUIRE_EQUAL(u.size(), 2u);
  BOOST_TEST_MESSAGE("unguarded, lr " << too_fast << ": test accuracy " << u.back().test_accuracy);
  BOOST_TEST(u.back().test_accuracy < 0.3, "accuracy " << u.back().test_accuracy);
  BOOST_TEST(unguarded.stats(0).rollbacks == 0u);

  learning::runaway_options on;
  on.max_rollbacks = 6;
  // 0.8, then 0.04, a rate LeNet-5 trains at. (At 0.2 its ReLUs die and
  // the loss sits at a uniform guess's without running away: the next test.)
  on.slow = 0.05;
  pipeline guarded("lenet5", {1, 3}, learning::stage_mode::backprop, {}, too_fast, on);
  auto g = guarded.run(4);
  BOOST_REQUIRE_EQUAL(g.size(), 4u);
  auto first = guarded.stats(0);
  BOOST_TEST_MESSAGE("guarded: " << first.rollbacks << " rollbacks, learning rate now "
                                 << first.learning_rate << ", test accuracy "
                                 << g.back().test_accuracy);
  BOOST_TEST(first.rollbacks >= 1u);
  // Learning, not guessing (chance: 0.1). Backprop mode: one batch in the
  // pipeline at a time, so the run is the same every time.
  BOOST_TEST(g.back().test_accuracy > 0.6, "accuracy " << g.back().test_accuracy);
  BOOST_TEST(g.back().test_accuracy > u.back().test_accuracy + 0.25);
  // Every stage went back as often and was slowed alike.
  for (size_t k = 0; k < 3; ++k) {
    auto s = guarded.stats(k);
    BOOST_TEST(s.rollbacks == first.rollbacks, "stage " << k);
    BOOST_TEST(std::abs(s.learning_rate - too_fast * std::pow(0.05, first.rollbacks)) < 1e-9,
               "stage " << k << ": " << s.learning_rate);
  }
  // Every batch of the four epochs was trained once at the end; the
  // epochs that ran away were trained again.
  BOOST_TEST(guarded.stats(2).batches >= 4u * 64u);
}

// LeNet-5 at lr 0.2: its ReLUs die within the first batches and the loss
// sits at a uniform guess's, never above it, so nothing runs away; the
// guard calls it stuck after `stuck_after` steps, and every stage goes back
// to where it began (its checkpoints since are of a dead model) with a
// smaller learning rate.
BOOST_AUTO_TEST_CASE(a_pipeline_stuck_at_a_uniform_guess_starts_again_slower) {
  const double dead = 0.2;
  learning::runaway_options off;
  off.enabled = false;
  pipeline unguarded("lenet5", {1, 3}, learning::stage_mode::backprop, {}, dead, off);
  auto u = unguarded.run(3);
  BOOST_TEST_MESSAGE("unguarded, lr " << dead << ": test accuracy " << u.back().test_accuracy);
  BOOST_TEST(u.back().test_accuracy < 0.3, "accuracy " << u.back().test_accuracy);

  learning::runaway_options on;
  on.stuck_after = 100;  // of 64 batches an epoch: in the second epoch
  on.slow = 0.1;
  pipeline guarded("lenet5", {1, 3}, learning::stage_mode::backprop, {}, dead, on);
  auto g = guarded.run(3);
  BOOST_REQUIRE_EQUAL(g.size(), 3u);
  auto first = guarded.stats(0);
  BOOST_TEST_MESSAGE("guarded: " << first.rollbacks << " rollbacks, learning rate now "
                                 << first.learning_rate << ", test accuracy "
                                 << g.back().test_accuracy);
  BOOST_TEST(first.rollbacks >= 1u);
  BOOST_TEST(g.back().test_accuracy > 0.6, "accuracy " << g.back().test_accuracy);
}

BOOST_AUTO_TEST_CASE(a_pipeline_that_keeps_running_away_stops_with_an_error) {
  learning::runaway_options none;
  none.max_rollbacks = 0;
  pipeline p("lenet5", {1, 3}, learning::stage_mode::delayed, {}, 0.8, none);
  std::vector<split_epoch> out;
  auto err = p.try_run(2, out);
  BOOST_REQUIRE(err.has_value());
  const auto text = p.sys->render(*err);
  BOOST_TEST_MESSAGE(text);
  BOOST_TEST(text.find("diverged") != std::string::npos, text);
  BOOST_TEST(text.find("ran away") != std::string::npos, text);
  BOOST_TEST(text.find("split.max_rollbacks") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_stage_refuses_messages_whose_shapes_disagree_and_goes_on) {
  pipeline split("lenet5", {1}, learning::stage_mode::backprop);
  caf::scoped_actor self{*split.sys};
  // An activation of the wrong shape for the upper stage, a gradient for a
  // batch the lower stage never sent, and a message without its tensors.
  auto hold = std::make_shared<std::vector<torch::Tensor>>();
  auto wrong = torch::zeros({4, 3, 5, 5});
  auto labels = torch::zeros({4}, torch::kLong);
  hold->push_back(wrong);
  hold->push_back(labels);
  held_stage_batch m;
  m.value.direction = messages::stage_direction::forward;
  m.value.batch = 7;
  m.value.tensors = {{"input", messages::dtype::float32, {4, 3, 5, 5}, wrong.data_ptr(),
                      static_cast<size_t>(wrong.numel()) * 4},
                     {"labels", messages::dtype::int64, {4}, labels.data_ptr(), 4 * 8}};
  m.hold = hold;
  self->send(split.stages[1], batch_atom::value, m);
  held_stage_batch g = m;
  g.value.direction = messages::stage_direction::backward;
  g.value.tensors = {{"gradient", messages::dtype::float32, {4, 3, 5, 5}, wrong.data_ptr(),
                      static_cast<size_t>(wrong.numel()) * 4}};
  self->send(split.stages[0], batch_atom::value, g);
  held_stage_batch lying = m;  // a length that disagrees with the shape
  lying.value.tensors[0].bytes = 12;
  self->send(split.stages[1], batch_atom::value, lying);
  held_stage_batch empty;
  self->send(split.stages[1], batch_atom::value, empty);
  // A gradient sent forward: the upper stage finds no input in it.
  held_stage_batch astray = g;
  astray.value.direction = messages::stage_direction::forward;
  self->send(split.stages[1], batch_atom::value, astray);
  // Nothing was trained on them, and the pipeline still trains.
  BOOST_TEST(split.stats(1).bytes_down == 0u);
  auto s = split.run(1);
  BOOST_REQUIRE_EQUAL(s.size(), 1u);
  BOOST_TEST(split.stats(0).batches == 64u);
  BOOST_TEST(s.back().test_accuracy > 0.3);
}

BOOST_AUTO_TEST_CASE(stage_checkpoints_round_trip_and_refuse_damage) {
  stage_checkpoint c;
  c.fingerprint = "00ff";
  c.run = "split-20261125-010203";
  c.epochs_done = 2;
  c.history = {{0, 1.25, 0.5, 0.625, 3.5}, {1, 0.75, 0.71875, 0.8, 7.25}};
  c.trainer = std::string("\0\n\nbytes\n\n", 11);
  auto bytes = encode_stage_checkpoint(c);
  auto back = decode_stage_checkpoint(bytes);
  BOOST_TEST(back.fingerprint == c.fingerprint);
  BOOST_TEST(back.run == c.run);
  BOOST_TEST(back.epochs_done == 2u);
  BOOST_REQUIRE_EQUAL(back.history.size(), 2u);
  BOOST_TEST(back.history[1].test_accuracy == 0.8);
  BOOST_TEST(back.history[1].seconds == 7.25);
  BOOST_TEST(back.trainer == c.trainer);
  auto flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x20;
  BOOST_CHECK_EXCEPTION(decode_stage_checkpoint(flipped), learning::stage_error,
                        [](auto& e) { return std::string(e.what()).find("corrupt") != std::string::npos; });
  BOOST_CHECK_THROW(decode_stage_checkpoint(bytes.substr(0, bytes.size() / 2)), learning::stage_error);
  BOOST_CHECK_EXCEPTION(decode_stage_checkpoint("PK\x03\x04 a zip file"), learning::stage_error,
                        [](auto& e) { return std::string(e.what()) == "not a stage checkpoint"; });
  BOOST_TEST(stage_checkpoint_key(1, 3) == eg::storage::key("@stage1", 3));
}

namespace {

/// Two nodes of a split LeNet-5 (stage 0: conv1, conv2 on a; stage 1: the
/// fully connected layers on b, ten times slower, so that an epoch lasts a
/// second or two) on free local ports.
std::string split_cluster(const test::temp_dir& dir, const std::string& mode, uint32_t epochs,
                          uint16_t* port_a = nullptr) {
  std::ostringstream toml;
  toml << "[cluster]\nid = \"split-test\"\nseed = 3\n"
       << "[data]\ntrain_samples = 3000\ntest_samples = 500\n"
       << "[train]\nepochs = " << epochs << "\n"
       << "[split]\nmode = \"" << mode << "\"\nmodel = \"lenet5\"\nin_flight = 4\n"
       << "resend_after = 5.0\n"
       << "[storage]\ndir = \"" << dir / "data" << "\"\n"
       << "[output]\ndir = \"" << dir / "runs" << "\"\n";
  for (std::string node : {"a", "b"}) {
    const auto port = test::free_port();
    if (node == "a" && port_a)
      *port_a = port;
    toml << "[[nodes]]\nname = \"" << node << "\"\nport = " << port << "\n";
  }
  toml << "[[stages]]\nnode = \"a\"\nlayers = 2\n"
       << "[[stages]]\nnode = \"b\"\nlayers = 3\nslowdown = 10.0\n";
  auto path = dir / "split.toml";
  test::write_file(path, toml.str());
  return path;
}

std::unique_ptr<test::process> start(const test::temp_dir& dir, const std::string& config,
                                     const std::string& node, const std::string& log) {
  return std::make_unique<test::process>(
    std::vector<std::string>{EG_BINARY, "node", "--config", config, "--node", node}, dir / log);
}

} // namespace

BOOST_AUTO_TEST_CASE(stages_on_two_node_processes_pause_for_a_lost_node_and_resume) {
  test::temp_dir dir;
  const uint32_t epochs = 6;
  uint16_t port_a = 0;
  auto cfg = split_cluster(dir, "synthetic", epochs, &port_a);
  auto a = start(dir, cfg, "a", "a.log");
  auto b = start(dir, cfg, "b", "b.log");
  // Kill -9 node b in its third epoch: its checkpoints after the first (and
  // perhaps the second) epoch are in its store.
  BOOST_REQUIRE_MESSAGE(a->wait_for_output("epoch 2 done", std::chrono::seconds(180)),
                        a->output() << "\n--- b:\n" << b->output());
  b->signal(SIGKILL);
  BOOST_REQUIRE_EQUAL(b->wait(std::chrono::seconds(10)), 128 + SIGKILL);
  BOOST_REQUIRE_MESSAGE(a->wait_for_output("a stage is gone; the pipeline waits",
                                           std::chrono::seconds(20)),
                        a->output());
  // Nothing moves while b is away.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  BOOST_TEST(a->output().find("epoch 4 done") == std::string::npos);
  BOOST_TEST(a->running());
  // What a user reads on the console: the stages, the paused run, b's stage down.
  {
    auto [code, view] = test::run_binary(
      {"console", "127.0.0.1:" + std::to_string(port_a), "--cluster", "split-test", "--once"},
      dir / "console.log",
      std::chrono::seconds(60));
    BOOST_TEST_INFO(view);
    BOOST_TEST(code == 0);
    BOOST_TEST(view.find("split lenet5 (synthetic, 2 stages)") != std::string::npos);
    BOOST_TEST(view.find("state paused") != std::string::npos);
    BOOST_TEST(std::regex_search(view, std::regex("STAGE +NODE +STATE .*SENT UP")));
    BOOST_TEST(std::regex_search(view, std::regex("@stage0 +a +up")));
    BOOST_TEST(std::regex_search(view, std::regex("@stage1 +b +down")));
    BOOST_TEST(view.find("GOSSIP") == std::string::npos);
    BOOST_TEST(view.find("no gossip: the stages send activations up") != std::string::npos);
  }

  auto b2 = start(dir, cfg, "b", "b2.log");
  BOOST_REQUIRE_MESSAGE(b2->wait_for_output("resumed from its checkpoint after epoch",
                                            std::chrono::seconds(60)),
                        b2->output());
  BOOST_REQUIRE_MESSAGE(a->wait_for_output("every stage is there; the pipeline goes on",
                                           std::chrono::seconds(60)),
                        a->output());
  BOOST_REQUIRE_EQUAL(a->wait(std::chrono::seconds(300)), 0);
  BOOST_TEST_INFO("a:\n" << a->output() << "\n--- b (restarted):\n" << b2->output());
  BOOST_REQUIRE_EQUAL(b2->wait(std::chrono::seconds(60)), 0);

  // Every epoch once in the run's metrics, and the model learnt.
  auto run = test::only_run_dir(dir / "runs");
  auto rows = test::read_csv((run / "split-metrics.csv").string());
  BOOST_REQUIRE_EQUAL(rows.size(), epochs);
  for (uint32_t e = 0; e < epochs; ++e)
    BOOST_TEST(std::stoul(rows[e]["epoch"]) == e + 1);
  BOOST_TEST(std::stod(rows.back()["test_accuracy"]) > 0.5, rows.back()["test_accuracy"]);
  // The tensors went on the weights lane, and none was refused.
  auto out = a->output();
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(std::regex_search(out, m, std::regex("weights lane: (\\d+) messages sent, "
                                                             "(\\d+) received; .* (\\d+) refused")),
                        out);
  BOOST_TEST(std::stoul(m[1]) > 100u);
  BOOST_TEST(std::stoul(m[2]) > 100u);
  BOOST_TEST(std::stoul(m[3]) == 0u);
  // b's checkpoints are in its store.
  auto db = storage::store::open((std::filesystem::path(dir / "data") / "b").string());
  BOOST_TEST(db->get(storage::family::checkpoints, stage_checkpoint_key(1, epochs)).has_value());
}

BOOST_AUTO_TEST_CASE(a_split_run_in_one_process_on_the_default_launcher_path) {
  test::temp_dir dir;
  auto cfg = split_cluster(dir, "backprop", 3);
  auto [code, output] = test::run_binary({"run", "--config", cfg}, dir / "run.log",
                                         std::chrono::seconds(300));
  BOOST_TEST_INFO(output);
  BOOST_REQUIRE_EQUAL(code, 0);
  auto rows = test::read_csv((test::only_run_dir(dir / "runs") / "split-metrics.csv").string());
  BOOST_REQUIRE_EQUAL(rows.size(), 3u);
  BOOST_TEST(std::stod(rows[2]["test_accuracy"]) > 0.5, rows[2]["test_accuracy"]);
  // A cluster file whose stages do not cover the model is refused by name.
  auto bad = dir / "bad.toml";
  std::string text;
  {
    std::ifstream in(cfg);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  text.replace(text.find("layers = 3"), 10, "layers = 4");
  test::write_file(bad, text);
  auto [bad_code, bad_output] = test::run_binary({"run", "--config", bad}, dir / "bad.log",
                                                 std::chrono::seconds(60));
  BOOST_TEST(bad_code != 0);
  BOOST_TEST(bad_output.find("the stages take 6 layers, but lenet5 has 5") != std::string::npos,
             bad_output);
}

BOOST_AUTO_TEST_SUITE_END()
