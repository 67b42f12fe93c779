// links: eg_actors
// The inspection console's plain code (snapshot, JSON, events, commands) and
// the balancer's answers to the console, on CAF's testing scheduler.
#include "actors/balancer/balancer.hpp"
#include "actors/balancer/inspection.hpp"
#include "actors/interfaces.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "messages/codec.hpp"
#include "messages/secret.hpp"
#include "actor_testing.hpp"
#include "process.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include <chrono>
#include <cmath>
#include <thread>

using namespace eg;
using namespace eg::actors;
namespace in = eg::inspection;

namespace {

messages::epoch_report report_of(const std::string& platform, uint32_t epoch) {
  messages::epoch_report r;
  r.platform = platform;
  r.node = "n-" + platform;
  r.epoch = epoch;
  r.ratio = 0.5;
  r.wall_seconds = 2.5;
  r.samples = 1000;
  r.planned_samples = 1000;
  r.iterations = 16;
  r.train_loss = 0.75;
  r.test_loss = 0.6;
  r.test_accuracy = 0.8 + 0.01 * epoch;
  r.gossip_weight = 0.25;
  r.bytes_sent = 100;
  r.bytes_received = 200;
  r.messages_sent = 2;
  r.messages_received = 4;
  return r;
}

} // namespace

BOOST_AUTO_TEST_SUITE(inspection)

BOOST_AUTO_TEST_CASE(console_credentials_answer_one_challenge) {
  messages::challenges issued;
  auto redeem = [&](const std::string& c) { return issued.redeem(c); };
  auto creds = in::console_credentials("s3cret", issued.issue());
  BOOST_TEST(creds.find("s3cret") == std::string::npos);
  BOOST_TEST(in::credentials_valid(creds, "s3cret", redeem));
  // Replayed: the challenge is used up.
  BOOST_TEST(!in::credentials_valid(creds, "s3cret", redeem));
  // A challenge this node never handed out.
  BOOST_TEST(!in::credentials_valid(in::console_credentials("s3cret", messages::make_nonce()),
                                    "s3cret", redeem));
  // A wrong secret, or none.
  BOOST_TEST(!in::credentials_valid(in::console_credentials("S3cret", issued.issue()), "s3cret",
                                    redeem));
  BOOST_TEST(!in::credentials_valid(in::console_credentials("", issued.issue()), "s3cret", redeem));
  // Tampered: another nonce under the same proof.
  auto c = issued.issue();
  auto good = in::console_credentials("s3cret", c);
  auto first = good.find(' '), second = good.find(' ', first + 1);
  auto tampered = good.substr(0, first + 1) + messages::make_nonce() + good.substr(second);
  BOOST_TEST(!in::credentials_valid(tampered, "s3cret", redeem));
  // No secret configured: any console with a fresh challenge.
  BOOST_TEST(in::credentials_valid(in::console_credentials("", issued.issue()), "", redeem));
  BOOST_TEST(!in::credentials_valid("", "", redeem));
}

BOOST_AUTO_TEST_CASE(challenges_expire_and_are_bounded) {
  messages::challenges issued(2, 30);
  auto a = issued.issue(), b = issued.issue(), c = issued.issue();  // a is forgotten
  BOOST_TEST(a != b);
  BOOST_TEST(!issued.redeem(a));
  BOOST_TEST(issued.redeem(c));
  BOOST_TEST(issued.redeem(b));
  messages::challenges brief(8, 0.05);
  auto d = brief.issue();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  BOOST_TEST(!brief.redeem(d));
}

BOOST_AUTO_TEST_CASE(event_log_keeps_the_most_recent) {
  in::event_log log(3);
  for (int i = 0; i < 5; ++i)
    log.add(i, "join", "e" + std::to_string(i));
  auto ev = log.recent();
  BOOST_REQUIRE_EQUAL(ev.size(), 3u);
  BOOST_TEST(ev[0].text == "e2");
  BOOST_TEST(ev[2].text == "e4");
  BOOST_TEST(ev[2].at == 4.0);
}

BOOST_AUTO_TEST_CASE(topology_and_traffic_sum_the_epochs) {
  auto a0 = report_of("a", 0), a1 = report_of("a", 1), b0 = report_of("b", 0);
  a0.received_from = {{"b", 3, 300}, {"c", 1, 100}};
  a1.received_from = {{"b", 2, 200}};
  b0.received_from = {{"a", 5, 500}};
  std::vector<messages::epoch_report> all{a0, b0, a1};
  auto links = in::topology_of(all);
  BOOST_REQUIRE_EQUAL(links.size(), 3u);
  std::map<std::string, in::link> by;
  for (auto& l : links)
    by[l.from + ">" + l.to] = l;
  BOOST_TEST(by["b>a"].messages == 5u);
  BOOST_TEST(by["b>a"].bytes == 500u);
  BOOST_TEST(by["c>a"].bytes == 100u);
  BOOST_TEST(by["a>b"].messages == 5u);

  in::platform_row row;
  row.name = "a";
  in::add_completed_epochs(row, all);
  BOOST_TEST(row.bytes_out == 200u);
  BOOST_TEST(row.bytes_in == 400u);
  BOOST_TEST(row.messages_out == 4u);
  BOOST_TEST(row.messages_in == 8u);
  BOOST_TEST(row.exchange_rate == 4.0 / 32.0);
  BOOST_TEST(row.test_accuracy == 0.81);  // of the latest epoch
  in::platform_row none;
  none.name = "z";
  in::add_completed_epochs(none, all);
  BOOST_TEST(none.test_accuracy == -1.0);
  BOOST_TEST(none.exchange_rate == 0.0);
}

BOOST_AUTO_TEST_CASE(commands_are_checked) {
  BOOST_TEST((in::parse_command("snapshot").verb == eg::messages::verb::snapshot));
  auto h = in::parse_command("  history  p3 ");
  BOOST_TEST((h.verb == eg::messages::verb::history));
  BOOST_TEST(h.argument == "p3");
  BOOST_TEST((in::parse_command("pause").verb == eg::messages::verb::pause));
  BOOST_CHECK_THROW(in::parse_command("history"), in::inspection_error);
  BOOST_CHECK_THROW(in::parse_command("history a b"), in::inspection_error);
  BOOST_CHECK_THROW(in::parse_command("pause now"), in::inspection_error);
  BOOST_CHECK_THROW(in::parse_command("reboot"), in::inspection_error);
  BOOST_CHECK_THROW(in::parse_command(""), in::inspection_error);
}

BOOST_AUTO_TEST_CASE(snapshot_json_round_trip) {
  in::snapshot s;
  s.cluster = {"c\"1", "edgegossip", "sync", "c1-20260101-000000", "paused", 12.5, 2, 5, 1,
               0.8123, 2, 1, "a", true, "b"};
  in::platform_row p;
  p.name = "p0";
  p.node = "a";
  p.state = "up";
  p.paused = true;
  p.epoch = 2;
  p.progress = 0.5;
  p.iterations = 42;
  p.samples = 2688;
  p.throughput = 1234.5;
  p.ratio = 0.25;
  p.train_loss = std::nan("");  // a diverged loss survives as NaN
  p.test_accuracy = 0.7;
  p.bytes_in = uint64_t{1} << 40;
  p.bytes_out = 7;
  p.messages_in = 3;
  p.messages_out = 4;
  p.exchange_rate = 0.05;
  p.checkpoint_epochs = 2;
  p.checkpoint_at = 11.0;
  s.cluster.accuracy_by_node = "a 0.8000 of 100, b 0.8164 of 300";
  s.platforms = {p};
  s.nodes = {{"a", "127.0.0.1", 47101, "up", true, {"p0"}, ""},
             {"b", "10.0.0.2", 47102, "down", false, {}, "No space left on device"}};
  s.topology = {{"p1", "p0", 3, 999}};
  s.events = {{1.5, "join", "platform p0 joined from node a — ü"}};
  auto back = in::snapshot_from_json(in::to_json(s));
  BOOST_TEST(back.cluster.id == "c\"1");
  BOOST_TEST(back.cluster.state == "paused");
  BOOST_TEST(back.cluster.evaluated_epoch == 1);
  BOOST_TEST(back.cluster.averaged_accuracy == 0.8123);
  BOOST_TEST(back.cluster.accuracy_by_node == "a 0.8000 of 100, b 0.8164 of 300");
  BOOST_TEST(back.cluster.via == "b");
  BOOST_TEST(back.cluster.server.empty());
  BOOST_REQUIRE_EQUAL(back.platforms.size(), 1u);
  auto& q = back.platforms[0];
  BOOST_TEST(q.paused);
  BOOST_TEST(q.iterations == 42u);
  BOOST_TEST(q.bytes_in == uint64_t{1} << 40);
  BOOST_TEST(std::isnan(q.train_loss));
  BOOST_TEST(q.checkpoint_epochs == 2);
  BOOST_REQUIRE_EQUAL(back.nodes.size(), 2u);
  BOOST_TEST(back.nodes[1].host == "10.0.0.2");
  BOOST_TEST(back.nodes[1].port == 47102);
  BOOST_TEST(back.nodes[0].store.empty());
  BOOST_TEST(back.nodes[1].store == "No space left on device");
  BOOST_TEST((back.nodes[0].platforms == std::vector<std::string>{"p0"}));
  BOOST_TEST(back.topology.at(0).bytes == 999u);
  BOOST_TEST(back.events.at(0).text == s.events[0].text);
}

BOOST_AUTO_TEST_CASE(history_and_answer_round_trip) {
  in::history h{"a", {report_of("a", 0), report_of("a", 1)}};
  h.epochs[1].received_from = {{"b", 2, 20}};
  auto back = in::history_from_json(in::to_json(h));
  BOOST_TEST(back.platform == "a");
  BOOST_REQUIRE_EQUAL(back.epochs.size(), 2u);
  BOOST_TEST(back.epochs[1].test_accuracy == 0.81);
  BOOST_TEST(back.epochs[1].received_from.at(0).peer == "b");
  BOOST_TEST(back.epochs[0].iterations == 16u);
  auto a = in::answer_from_json(in::to_json(in::answer{false, "the run is over"}));
  BOOST_TEST(!a.ok);
  BOOST_TEST(a.text == "the run is over");
}

BOOST_AUTO_TEST_CASE(malformed_json_is_refused) {
  BOOST_CHECK_THROW(in::snapshot_from_json("{"), in::inspection_error);
  BOOST_CHECK_THROW(in::snapshot_from_json("{\"cluster\": {}}"), in::inspection_error);
  BOOST_CHECK_THROW(in::history_from_json("[1, 2]"), in::inspection_error);
  BOOST_CHECK_THROW(in::answer_from_json("{\"ok\": \"yes\", \"text\": 1}"),
                    in::inspection_error);
}

// -- the balancer's answers -----------------------------------------------------

namespace {

struct fixture : eg::test::actor_fixture {

  /// Asks the balancer; the JSON, or the error's text prefixed with "error: ".
  std::string ask(const balancer_actor& b, const std::string& command) {
    std::string out;
    messages::control c;
    try {
      c = in::parse_command(command);  // as the node does at its door
    } catch (const std::exception& e) {
      return std::string{"error: "} + e.what();
    }
    auto rh = self->request(b, caf::infinite, inspect_atom::value, c, std::string{"n"});
    sched.run();
    rh.receive([&](std::string& s) { out = std::move(s); },
               [&](caf::error& e) { out = "error: " + sys.render(e); });
    return out;
  }
};

/// A stand-in platform recording the control commands it gets.
platform_actor::behavior_type controlled_platform(platform_actor::pointer,
                                                  std::shared_ptr<std::vector<std::string>> got) {
  return {
    [](plan_atom, const plan&) {},
    [](norm_atom, const std::string&) {},
    [](adopt_atom, const std::string&) {},
    [](step_atom) {},
    [](overlap_atom, uint64_t) {},
    [](merge_atom, const held_weights&) {},
    [](unsent_atom, const std::string&, const held_weights&) {},
    [](peers_atom, const std::vector<std::string>&) {},
    [](rescale_atom, double) {},
    [](server_atom, caf::actor, const std::string&) {},
    [](pull_atom, const std::string&, const held_global_model&) {},
    [](pull_atom, uint64_t) {},
    [](weights_atom) { return held_weights{}; },
    [](weights_atom, const std::string&) { return held_weights{}; },
    [](done_atom, const std::string&) {},
    [](cut_atom, uint32_t) {},
    [=](control_atom, const control& c) {
      got->push_back(messages::to_string(c.verb));
      return true;
    },
  };
}


} // namespace

BOOST_FIXTURE_TEST_CASE(balancer_answers_the_console, fixture) {
  test::temp_dir dir;
  auto cfg = config::default_config();
  cfg.id = "ins";
  cfg.train.epochs = 3;
  cfg.output_dir = dir / "runs";
  cfg.nodes[0].platforms.resize(2);
  cfg.nodes[0].platforms[0] = {"p0", 1, 0.5, 1, {}};
  cfg.nodes[0].platforms[1] = {"p1", 1, 0.5, 1, {}};
  auto test_set = std::make_shared<learning::dataset>(test::random_images(20));
  auto b = spawn_balancer(sys, {balancer_settings::of(cfg, {}), test_set->describe(),
                                caf::actor_cast<node_actor>(self), false, {}, {}});
  auto got0 = std::make_shared<std::vector<std::string>>();
  auto got1 = std::make_shared<std::vector<std::string>>();
  auto p0 = sys.spawn(controlled_platform, got0);
  auto p1 = sys.spawn(controlled_platform, got1);
  self->send(b, join_atom::value, std::string{"p0"}, std::string{"local"},
             caf::actor_cast<caf::actor>(p0), caf::actor{}, std::string{}, uint64_t{0},
             std::string{}, std::string{});
  sched.run();

  // Before every platform joined: one row per configured platform.
  auto s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.cluster.state == "waiting");
  BOOST_TEST(s.cluster.via == "n");
  BOOST_REQUIRE_EQUAL(s.platforms.size(), 2u);
  BOOST_TEST(s.platforms[0].state == "up");
  BOOST_TEST(s.platforms[1].state == "waiting");
  BOOST_REQUIRE_EQUAL(s.nodes.size(), 1u);
  BOOST_TEST(s.nodes[0].balancer);
  BOOST_TEST(s.nodes[0].store.empty());
  // A node's store that cannot write shows in its row and the events.
  self->send(b, failed_atom::value, std::string{"local"}, std::string{"disk full"});
  sched.run();
  s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.nodes[0].store == "disk full");
  BOOST_TEST(s.events.back().kind == "store");

  self->send(b, join_atom::value, std::string{"p1"}, std::string{"local"},
             caf::actor_cast<caf::actor>(p1), caf::actor{}, std::string{}, uint64_t{0},
             std::string{}, std::string{});
  sched.run();
  auto r0 = report_of("p0", 0);
  r0.received_from = {{"p1", 2, 2000}};
  self->send(b, report_atom::value, r0);
  auto progress = report_of("p1", 0);
  progress.samples = 250;
  progress.iterations = 4;
  self->send(b, progress_atom::value, progress);
  sched.run();
  s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.cluster.state == "training");
  BOOST_TEST(s.cluster.platforms_up == 2u);
  BOOST_TEST(s.platforms[0].checkpoint_epochs == 1);
  BOOST_TEST(s.platforms[0].test_accuracy == 0.8);
  BOOST_TEST(s.platforms[0].progress == 1.0);
  BOOST_TEST(s.platforms[1].progress == 0.25);
  BOOST_TEST(s.platforms[1].iterations == 4u);
  BOOST_TEST(s.platforms[1].checkpoint_epochs == -1);
  BOOST_REQUIRE_EQUAL(s.topology.size(), 1u);
  BOOST_TEST(s.topology[0].from == "p1");
  BOOST_TEST(s.topology[0].bytes == 2000u);

  // Commands reach every live platform; the state and the events say so.
  auto a = in::answer_from_json(ask(b, "pause"));
  BOOST_TEST(a.ok);
  sched.run();
  BOOST_TEST((*got0 == std::vector<std::string>{"pause"}));
  BOOST_TEST((*got1 == std::vector<std::string>{"pause"}));
  s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.cluster.state == "paused");
  BOOST_TEST(s.platforms[0].paused);
  in::answer_from_json(ask(b, "resume"));
  in::answer_from_json(ask(b, "checkpoint"));
  sched.run();
  BOOST_TEST((*got1 == std::vector<std::string>{"pause", "resume", "checkpoint"}));

  // History of one platform; unknown platforms and commands are errors.
  auto h = in::history_from_json(ask(b, "history p0"));
  BOOST_REQUIRE_EQUAL(h.epochs.size(), 1u);
  BOOST_TEST(h.epochs[0].received_from.at(0).peer == "p1");
  BOOST_TEST(ask(b, "history nope").rfind("error: ", 0) == 0);
  BOOST_TEST(ask(b, "format disk").rfind("error: ", 0) == 0);

  // A platform that goes down shows as down, in the counts and the events;
  // the pause reaches one that rejoins while paused.
  in::answer_from_json(ask(b, "pause"));
  self->send_exit(p1, caf::exit_reason::kill);
  sched.run();
  s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.platforms[1].state == "down");
  BOOST_TEST(s.cluster.platforms_down == 1u);
  std::vector<std::string> kinds;
  for (auto& e : s.events)
    kinds.push_back(e.kind);
  // (p0 had reported epoch 1: with p1 down the epoch is complete.)
  BOOST_TEST((kinds == std::vector<std::string>{"join", "store", "join", "pause", "resume",
                                                "checkpoint", "pause", "down", "epoch",
                                                "checkpoint"}));
  auto got2 = std::make_shared<std::vector<std::string>>();
  auto p1b = sys.spawn(controlled_platform, got2);
  self->send(b, join_atom::value, std::string{"p1"}, std::string{"local"},
             caf::actor_cast<caf::actor>(p1b), caf::actor{}, std::string{}, uint64_t{0},
             std::string{}, std::string{});
  sched.run();
  BOOST_TEST((*got2 == std::vector<std::string>{"pause"}));
  s = in::snapshot_from_json(ask(b, "snapshot"));
  BOOST_TEST(s.platforms[1].state == "restoring");

  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(p0, caf::exit_reason::user_shutdown);
  self->send_exit(p1b, caf::exit_reason::user_shutdown);
  sched.run();
}

BOOST_AUTO_TEST_SUITE_END()
