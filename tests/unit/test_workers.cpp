// links: eg_learning
// The workers of the training families (train/worker.hpp), without an actor
// system: what a gossip worker sends after a step and how it merges; push-sum's
// overlap wait; the parameter server's worker committing, pairing a lane
// answer with its model, refusing a model from elsewhere, carrying a lost
// update into the next commit; EdgeGossip's ranked epochs.
#include "algorithms/edgegossip/aggregator.hpp"
#include "algorithms/edgegossip/edgegossip_worker.hpp"
#include "algorithms/gossip/gossip_worker.hpp"
#include "algorithms/ps/ps_worker.hpp"
#include "algorithms/workers.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "sample_sets.hpp"

#include <boost/test/unit_test.hpp>

#include <numeric>

using namespace eg;
using namespace eg::learning;

namespace {

std::shared_ptr<const dataset> images() {
  static auto d = [] {
    torch::manual_seed(7);
    return std::make_shared<const dataset>(test::random_images(256));
  }();
  return d;
}

/// A platform's model over the first `points` samples: LeNet-5, batch 32.
std::unique_ptr<platform_model> model_of(uint64_t seed = 1, int64_t points = 128) {
  auto d = images();
  std::vector<int64_t> shard(static_cast<size_t>(points));
  std::iota(shard.begin(), shard.end(), 0);
  auto m = make_classifier("lenet5", seed, shape_of(*d));
  return std::make_unique<platform_model>(
    std::make_unique<local_trainer>(m, d, shard, sgd_options{0.05, 0.9, 32}));
}

worker_settings settings_of(const std::string& strategy, const std::string& name = "p0") {
  worker_settings s;
  s.platform = name;
  s.members = {"p0", "p1"};
  s.platforms = 2;
  s.strategy.name = strategy;
  s.strategy.exchange_probability = 1.0;
  s.batch = 32;
  return s;
}

/// EdgeGossip over the push-sum strategy `gossip` on a ring, with overlap tau.
worker_settings edgegossip_over(const std::string& gossip, const std::string& name,
                                int64_t tau) {
  auto s = settings_of("edgegossip", name);
  s.strategy.gossip = gossip;
  s.strategy.topology = "ring";
  s.strategy.overlap = tau;
  return s;
}

run_position position(const std::string& name, uint64_t iterations, uint32_t epoch = 0) {
  run_position p;
  p.platform = name;
  p.epoch = epoch;
  p.total_iterations = iterations;
  return p;
}

std::vector<torch::Tensor> copy(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (auto& t : v)
    out.push_back(t.detach().clone());
  return out;
}

/// One step of `m`'s trainer (an epoch of one batch begun if none is).
step_done one_step(platform_model& m, double now = 0) {
  if (m.trainer().epoch_done())
    m.trainer().begin_epoch({{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}});
  auto r = m.trainer().step();
  return {r.loss, m.trainer().epoch_done(), now};
}

} // namespace

BOOST_AUTO_TEST_SUITE(workers)

BOOST_AUTO_TEST_CASE(each_strategy_gets_the_worker_of_its_family) {
  auto m = model_of();
  BOOST_CHECK_EQUAL(make_worker(settings_of("gosgd"), *m)->family(), "gossip");
  BOOST_CHECK_EQUAL(make_worker(settings_of("sgp"), *m)->family(), "push-sum");
  BOOST_CHECK_EQUAL(make_worker(settings_of("edgegossip"), *m)->family(), "edgegossip");
  for (auto s : {"bsp", "ssp", "async", "adacomm", "adsp"})
    BOOST_CHECK_EQUAL(make_worker(settings_of(s), *m)->family(), "parameter server");
}

BOOST_AUTO_TEST_CASE(edgegossip_takes_the_push_sum_family_as_its_gossip) {
  auto m = model_of();
  for (auto g : {"sgp", "sparse-push", "scsp"}) {
    auto s = settings_of("edgegossip");
    s.strategy.gossip = g;
    BOOST_TEST(s.strategy.push_sum());
    BOOST_TEST(s.strategy.rule() == g);
    auto w = make_worker(s, *m);
    BOOST_CHECK_EQUAL(w->family(), "edgegossip");
    BOOST_CHECK_CLOSE(w->weight(), 1.0, 1e-9);  // push-sum's start weight, not GoSGD's 1/n
  }
  auto plain = settings_of("edgegossip");
  BOOST_TEST(!plain.strategy.push_sum());
  BOOST_TEST(plain.strategy.rule() == "gosgd");
}

BOOST_AUTO_TEST_CASE(edgegossip_over_push_sum_spreads_the_plans_rounds_over_its_share) {
  // Two platforms planned R = 4 rounds: p0 trains 8 batches (r = 1), p1 4
  // (r = 0.5). Each makes exactly 4 rounds, at most one a step, numbered
  // alike (so the overlap wait lines them up); every round is one
  // column-stochastic split, so the weights sent and kept add up to the
  // weight each had.
  for (auto g : {"sgp", "sparse-push"}) {
    BOOST_TEST_CONTEXT(g) {
      auto settings = [&](const std::string& name) { return edgegossip_over(g, name, 0); };
      auto ma = model_of(1), mb = model_of(2);
      auto a = make_worker(settings("p0"), *ma);
      auto b = make_worker(settings("p1"), *mb);
      std::vector<uint64_t> rounds_a, rounds_b;
      double sent_a = 0, sent_b = 0;
      auto run = [&](worker& w, platform_model& m, const std::string& name, double ratio,
                     size_t batches, std::vector<uint64_t>& rounds, double& sent) {
        w.start();
        w.peers({name == "p0" ? "p1" : "p0"});
        messages::plan plan;
        plan.epoch = 2;
        plan.ratio = ratio;
        plan.rounds = 4;
        w.planned(plan);
        w.epoch_begins(batches);
        for (size_t k = 1; k <= batches; ++k) {
          auto out = w.stepped(one_step(m), position(name, 100 + k, 2));
          BOOST_TEST(out.sends.size() <= 1u);
          for (auto& send : out.sends) {
            rounds.push_back(send.message.value.iteration);
            sent += send.message.value.gossip_weight;
          }
        }
      };
      run(*a, *ma, "p0", 1.0, 8, rounds_a, sent_a);
      run(*b, *mb, "p1", 0.5, 4, rounds_b, sent_b);
      BOOST_TEST(rounds_a.size() == 4u);
      BOOST_TEST(rounds_a == rounds_b);  // the same rounds, whatever the share
      BOOST_TEST(rounds_a.front() == (uint64_t{2} << 20) + 1);
      BOOST_TEST(rounds_a.back() == (uint64_t{2} << 20) + 4);
      BOOST_CHECK_CLOSE(a->weight() + sent_a, 1.0, 1e-9);
      BOOST_CHECK_CLOSE(b->weight() + sent_b, 1.0, 1e-9);
      // A share of 2 batches: two rounds in each step, split one after the
      // other (one message here: the ring's one peer, 1/2 + 1/4 of the
      // weight), numbered by the later round; the weight still adds up.
      auto mc = model_of(3);
      auto c = make_worker(settings("p1"), *mc);
      std::vector<uint64_t> rounds_c;
      double sent_c = 0;
      run(*c, *mc, "p1", 0.25, 2, rounds_c, sent_c);
      BOOST_TEST(rounds_c.size() == 2u);
      BOOST_TEST(rounds_c.back() == (uint64_t{2} << 20) + 4);
      BOOST_CHECK_CLOSE(c->weight() + sent_c, 1.0, 1e-9);
    }
  }
}

BOOST_AUTO_TEST_CASE(edgegossip_over_push_sum_waits_for_the_planned_round_not_the_iteration) {
  // p0 (8 batches) and p1 (2 batches), R = 2, tau 1: p0's second round waits
  // for p1's first, which p1 sends at its first step, while p0 is at step 4.
  auto settings = [](const std::string& name) { return edgegossip_over("sgp", name, 1); };
  auto ma = model_of(1), mb = model_of(2);
  auto a = make_worker(settings("p0"), *ma);
  auto b = make_worker(settings("p1"), *mb);
  messages::plan plan;
  plan.epoch = 0;
  plan.rounds = 2;
  for (auto* w : {a.get(), b.get()}) {
    w->start();
    w->planned(plan);
  }
  a->peers({"p1"});
  b->peers({"p0"});
  a->epoch_begins(8);
  b->epoch_begins(2);
  for (uint64_t k = 0; k < 4; ++k) {
    BOOST_TEST(a->awaited(k).empty(), "step " << k + 1);  // round 1 waits for nobody
    a->stepped(one_step(*ma), position("p0", k + 1));
  }
  BOOST_TEST(a->awaited(4) == std::vector<std::string>{"p1"});
  auto out = b->stepped(one_step(*mb), position("p1", 1));
  BOOST_REQUIRE_EQUAL(out.sends.size(), 1u);
  a->merge(out.sends[0].message);
  BOOST_TEST(a->awaited(4).empty());
}

BOOST_AUTO_TEST_CASE(edgegossip_over_sparse_push_waits_for_no_one_by_default) {
  // strategy.overlap's default (-1) under EdgeGossip with sparse messages:
  // no wait, where tau 1 makes p0's second round wait for p1's first (the
  // case above). Dense messages (SGP), and push-sum on its own, keep tau 1.
  auto settings = edgegossip_over("sparse-push", "p0", -1);
  BOOST_TEST(settings.strategy.overlap_tau() == 0);
  BOOST_TEST(edgegossip_over("scsp", "p0", -1).strategy.overlap_tau() == 0);
  BOOST_TEST(edgegossip_over("sgp", "p0", -1).strategy.overlap_tau() == 1);
  BOOST_TEST(settings_of("sgp").strategy.overlap_tau() == 1);
  auto ma = model_of(1);
  auto a = make_worker(settings, *ma);
  messages::plan plan;
  plan.epoch = 0;
  plan.rounds = 2;
  a->start();
  a->planned(plan);
  a->peers({"p1"});
  a->epoch_begins(8);
  for (uint64_t k = 0; k < 8; ++k) {
    BOOST_TEST(a->awaited(k).empty(), "step " << k + 1);
    a->stepped(one_step(*ma), position("p0", k + 1));
  }
}

BOOST_AUTO_TEST_CASE(a_gossip_worker_sends_half_its_weight_and_the_peer_mixes_by_weight) {
  auto ma = model_of(1), mb = model_of(2);
  auto a = make_worker(settings_of("gosgd", "p0"), *ma);
  auto b = make_worker(settings_of("gosgd", "p1"), *mb);
  a->start();
  b->start();
  // Nobody reachable: the step is local, nothing goes.
  auto out = a->stepped(one_step(*ma), position("p0", 1));
  BOOST_CHECK(out.sends.empty());
  BOOST_CHECK(out.next == next_move::finish_epoch || out.next == next_move::step);
  a->peers({"p1"});
  out = a->stepped(one_step(*ma), position("p0", 2));
  BOOST_REQUIRE_EQUAL(out.sends.size(), 1u);
  BOOST_CHECK_EQUAL(out.sends[0].to, "p1");
  BOOST_CHECK_EQUAL(out.sends[0].message.sender, "p0");
  BOOST_CHECK_EQUAL(out.sends[0].message.value.iteration, 2u);
  BOOST_CHECK_CLOSE(out.sends[0].message.value.gossip_weight, 0.25, 1e-9);  // half of 1/2
  BOOST_CHECK_CLOSE(a->weight(), 0.25, 1e-9);
  // b (weight 1/2) merges a's 1/4: its parameters become 2/3 its own, 1/3 a's.
  auto before = copy(mb->params());
  auto sent = copy(ma->params());
  b->merge(out.sends[0].message);
  BOOST_CHECK_CLOSE(b->weight(), 0.75, 1e-9);
  for (size_t i = 0; i < before.size(); ++i)
    BOOST_CHECK(torch::allclose(mb->params()[i], before[i] * (2.0 / 3) + sent[i] / 3.0, 1e-5, 1e-6));
}

BOOST_AUTO_TEST_CASE(a_message_not_sent_comes_back_with_its_weight_and_is_said_at_the_epochs_end) {
  auto ma = model_of(1);
  auto a = make_worker(settings_of("sgp", "p0"), *ma);
  a->start();
  a->peers({"p1"});
  a->epoch_begins(8);
  auto out = a->stepped(one_step(*ma), position("p0", 1));
  BOOST_REQUIRE_EQUAL(out.sends.size(), 1u);
  BOOST_CHECK_CLOSE(a->weight(), 0.5, 1e-9);
  // The lane skipped it: it comes back without its tensors.
  auto back = out.sends[0].message;
  back.value.tensors.clear();
  back.hold = nullptr;
  auto before = copy(ma->params());
  a->unsent("p1", back);
  BOOST_CHECK_CLOSE(a->weight(), 1.0, 1e-9);
  for (size_t i = 0; i < before.size(); ++i)
    BOOST_CHECK(torch::equal(ma->params()[i], before[i]));  // the model as it is
  auto notes = a->epoch_over(0);
  BOOST_REQUIRE_EQUAL(notes.size(), 1u);
  BOOST_CHECK(!notes[0].warning);
  BOOST_CHECK(notes[0].text.find("1 message(s) not sent") != std::string::npos);
  BOOST_CHECK(a->epoch_over(1).empty());  // said once
}

BOOST_AUTO_TEST_CASE(a_sparse_push_edge_out_of_step_asks_its_sender_for_a_keyframe) {
  auto ma = model_of(1), mb = model_of(1);
  auto sa = settings_of("sparse-push", "p0"), sb = settings_of("sparse-push", "p1");
  auto a = make_worker(sa, *ma);
  auto b = make_worker(sb, *mb);
  a->start();
  b->start();
  a->peers({"p1"});
  b->peers({"p0"});
  // p0's messages to p1: the second lost on the way, unknown to p0.
  std::vector<messages::held_weights> sent;
  for (uint64_t k = 1; k <= 3 + learning::sparse_push::max_unexplained; ++k) {
    auto out = a->stepped(one_step(*ma), position("p0", k));
    for (auto& s : out.sends)
      if (s.to == "p1")
        sent.push_back(s.message);
  }
  BOOST_REQUIRE(sent.size() >= 3 + learning::sparse_push::max_unexplained);
  for (size_t i = 0; i < sent.size(); ++i)
    if (i != 1)
      b->merge(sent[i]);
  // p1's next step asks p0 for a keyframe, with a message of no weight.
  auto out = b->stepped(one_step(*mb), position("p1", 1));
  auto ask = std::find_if(out.sends.begin(), out.sends.end(), [](const gossip_send& s) {
    return s.message.value.keyframe_request;
  });
  BOOST_REQUIRE(ask != out.sends.end());
  BOOST_CHECK_EQUAL(ask->to, "p0");
  BOOST_CHECK_EQUAL(ask->message.value.gossip_weight, 0.0);
  const double w = a->weight();
  a->merge(ask->message);
  BOOST_CHECK_EQUAL(a->weight(), w);  // no weight moved
  auto next = a->stepped(one_step(*ma), position("p0", 20));
  BOOST_REQUIRE(!next.sends.empty());
  BOOST_CHECK(next.sends[0].message.value.keyframe);
}

BOOST_AUTO_TEST_CASE(a_message_that_does_not_fit_is_refused_and_the_model_is_unchanged) {
  auto ma = model_of(1), mb = model_of(2);
  auto b = make_worker(settings_of("gosgd", "p1"), *mb);
  messages::held_weights w;
  w.sender = "p0";
  w.value.gossip_weight = 0.5;
  auto views = to_views(ma->names(), ma->params());
  views.pop_back();  // a parameter short
  w.value.tensors = views;
  auto before = copy(mb->params());
  BOOST_CHECK_THROW(b->merge(w), refused_message);
  for (size_t i = 0; i < before.size(); ++i)
    BOOST_CHECK(torch::equal(mb->params()[i], before[i]));
  // A parameter-server worker takes no gossip at all.
  auto ps = make_worker(settings_of("bsp", "p1"), *mb);
  w.value.tensors = to_views(ma->names(), ma->params());
  BOOST_CHECK_THROW(ps->merge(w), refused_message);
}

BOOST_AUTO_TEST_CASE(push_sum_waits_for_its_in_neighbour_until_its_message_comes_or_time_runs_out) {
  auto settings = settings_of("sgp", "p0");
  settings.strategy.topology = "ring";
  settings.strategy.overlap = 1;
  auto ma = model_of(1), mb = model_of(2);
  auto a = make_worker(settings, *ma);
  auto b = make_worker(settings_of("sgp", "p1"), *mb);
  a->start();
  a->peers({"p1"});
  a->epoch_begins(8);
  // Step 1 needs nothing; step 2 waits for p1's message of step 1 (tau 1).
  BOOST_CHECK(a->awaited(0).empty());
  a->stepped(one_step(*ma), position("p0", 1));
  BOOST_CHECK(a->awaited(1) == std::vector<std::string>{"p1"});
  b->start();
  b->peers({"p0"});
  auto out = b->stepped(one_step(*mb), position("p1", 1));
  BOOST_REQUIRE_EQUAL(out.sends.size(), 1u);
  a->merge(out.sends[0].message);
  BOOST_CHECK(a->awaited(1).empty());
  // Step 3 waits for step 2's message, which does not come: given up, and
  // not waited for again this epoch.
  a->stepped(one_step(*ma), position("p0", 2));
  BOOST_CHECK_EQUAL(a->give_up(2), 1u);
  BOOST_CHECK(a->awaited(2).empty());
  auto notes = a->epoch_over(0);
  BOOST_REQUIRE_EQUAL(notes.size(), 1u);
  BOOST_CHECK(notes[0].text.find("1 overlap wait(s) ran out") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_parameter_server_worker_waits_for_its_first_server_for_a_while) {
  auto m = model_of();
  auto s = settings_of("adsp");
  // Not heard of a server: the first step waits for one, wait after wait,
  // until the waits run out; then it trains without.
  ps_worker alone(s, *m);
  alone.start();
  for (int i = 0; i < ps_worker::first_server_waits; ++i) {
    BOOST_TEST_INFO("wait " << i);
    BOOST_CHECK(alone.awaited(0) == std::vector<std::string>{"the parameter server"});
    BOOST_CHECK_EQUAL(alone.give_up(0), 1u);
  }
  BOOST_CHECK(alone.awaited(0).empty());
  BOOST_CHECK_EQUAL(alone.give_up(0), 0u);
  // Heard of one: never waited for again, even while it is unreachable.
  ps_worker w(s, *m);
  w.start();
  BOOST_CHECK_EQUAL(w.awaited(0).size(), 1u);
  w.server_changed(true, true, "", 0.1);
  BOOST_CHECK(w.awaited(0).empty());
  w.server_changed(false, true, "", 0.2);
  BOOST_CHECK(w.awaited(5).empty());
}

BOOST_AUTO_TEST_CASE(a_parameter_server_worker_commits_its_update_and_loads_the_global_model) {
  auto m = model_of();
  auto s = settings_of("bsp");
  s.strategy.commit_steps = 2;
  ps_worker w(s, *m);
  w.start();
  auto initial = copy(m->params());
  // Without a server: training goes on locally, said once.
  auto out = w.stepped(one_step(*m, 0.1), position("p0", 1));
  out = w.stepped(one_step(*m, 0.2), position("p0", 2));
  BOOST_CHECK(!out.commit);
  BOOST_REQUIRE_EQUAL(out.notes.size(), 1u);
  BOOST_CHECK(out.notes[0].text.find("no parameter server reachable") != std::string::npos);
  BOOST_CHECK(out.next == next_move::finish_epoch);
  BOOST_CHECK(w.ready());
  // A server: the next commit carries everything trained since the start.
  w.server_changed(true, true, "", 0.3);
  m->trainer().begin_epoch({{{0, 1, 2, 3}}});
  auto r = m->trainer().step();
  out = w.stepped({r.loss, true, 0.4}, position("p0", 3));
  BOOST_REQUIRE(out.commit);
  BOOST_CHECK(out.next == next_move::none);
  BOOST_CHECK(!w.ready());
  BOOST_CHECK(out.commit->epoch_end);
  BOOST_CHECK(out.commit->lane.empty());
  auto update = from_views(out.commit->update.value.tensors, m->names(), m->params());
  for (size_t i = 0; i < update.size(); ++i)
    BOOST_CHECK(torch::allclose(update[i], m->params()[i] - initial[i], 1e-5, 1e-7));
  // A stale generation's answer changes nothing; the right one loads the model.
  messages::held_global_model global;
  global.sender = "server";
  global.value.version = 5;
  auto target = copy(initial);
  for (auto& t : target)
    t.add_(1.0);
  global.value.tensors = to_views(m->names(), target);
  BOOST_CHECK(w.answered(out.commit->generation + 1, global, 2, 0, 0.5).next == next_move::none);
  BOOST_CHECK(!w.ready());
  auto done = w.answered(out.commit->generation, global, 2, 0, 0.5);
  BOOST_CHECK(done.next == next_move::finish_epoch);
  BOOST_CHECK(w.ready());
  for (size_t i = 0; i < target.size(); ++i)
    BOOST_CHECK(torch::equal(m->params()[i], target[i]));
  messages::epoch_report report;
  w.fill_report(report);
  BOOST_CHECK_EQUAL(report.commits, 1u);
  BOOST_CHECK_EQUAL(report.server_version, 5u);
}

BOOST_AUTO_TEST_CASE(a_lane_commit_pairs_its_answer_with_the_model_from_the_servers_node_only) {
  auto m = model_of();
  auto s = settings_of("ssp");
  s.strategy.commit_steps = 1;
  ps_worker w(s, *m);
  w.start();
  w.server_changed(true, true, "b@127.0.0.1:47302", 0);
  auto out = w.stepped(one_step(*m), position("p0", 1));
  BOOST_REQUIRE(out.commit);
  BOOST_CHECK_EQUAL(out.commit->lane, "b@127.0.0.1:47302");
  BOOST_CHECK_GT(out.commit->update.value.number, 0u);
  BOOST_CHECK_EQUAL(out.commit->update.sender, "p0");
  const auto gen = out.commit->generation;
  // The answer first: the model is awaited on the lane.
  auto answer = w.answered_on_lane(gen, 9, 1, 0, 0.1);
  BOOST_REQUIRE(answer.lane_wait);
  BOOST_CHECK_EQUAL(*answer.lane_wait, gen);
  BOOST_CHECK(answer.next == next_move::none);
  messages::held_global_model model;
  model.value.version = 9;
  auto values = copy(m->params());
  model.value.tensors = to_views(m->names(), values);
  model.hold = std::make_shared<std::vector<torch::Tensor>>(values);
  // From a node that does not host the server: refused.
  auto refused = w.lane_model("c", model, 0.2);
  BOOST_CHECK_EQUAL(refused.refused, 1u);
  BOOST_CHECK(!w.ready());
  auto pulled = w.lane_model("b", model, 0.2);
  BOOST_CHECK(pulled.next == next_move::step);
  BOOST_CHECK(w.ready());
  // The wait's end for an answer already complete does nothing.
  BOOST_CHECK(w.lane_wait_over(gen, 0.3).next == next_move::none);
}

BOOST_AUTO_TEST_CASE(an_update_the_server_lost_goes_again_with_the_next_commit) {
  auto m = model_of();
  auto s = settings_of("async");
  s.strategy.commit_steps = 1;
  ps_worker w(s, *m);
  w.start();
  w.server_changed(true, true, "", 0);
  auto initial = copy(m->params());
  auto first = w.stepped(one_step(*m), position("p0", 1));
  BOOST_REQUIRE(first.commit);
  auto lost = w.unanswered(first.commit->generation, true, "the update did not arrive", 0.1);
  BOOST_CHECK(lost.next == next_move::step);
  BOOST_REQUIRE_EQUAL(lost.notes.size(), 1u);
  BOOST_CHECK(lost.notes[0].text.find("goes with the next commit") != std::string::npos);
  auto second = w.stepped(one_step(*m), position("p0", 2));
  BOOST_REQUIRE(second.commit);
  // Both steps' change since the start, not the second's alone.
  auto update = from_views(second.commit->update.value.tensors, m->names(), m->params());
  for (size_t i = 0; i < update.size(); ++i)
    BOOST_CHECK(torch::allclose(update[i], m->params()[i] - initial[i], 1e-5, 1e-7));
  // A server that moves while a commit is in flight: on without its answer
  // (this commit was the epoch's last: the epoch ends).
  BOOST_CHECK(second.commit->epoch_end);
  auto moved = w.server_changed(true, true, "", 0.2);
  BOOST_CHECK(moved.next == next_move::finish_epoch);
  BOOST_CHECK(w.ready());
}

BOOST_AUTO_TEST_CASE(edgegossip_ranks_its_aggregated_points_when_it_trains_part_of_its_data) {
  auto m = model_of(1, 200);
  auto s = settings_of("edgegossip");
  std::vector<int64_t> shard(200);
  std::iota(shard.begin(), shard.end(), 0);
  s.aggregated = std::make_shared<const aggregated_points>(
    aggregate(*images(), shard, aggregator_from_name("hash-kmeans", 10, 1)));
  auto w = make_worker(s, *m);
  auto whole = position("p0", 0);
  auto plan = w->plan_epoch(whole, {});
  BOOST_CHECK(plan.ranking.empty());
  BOOST_CHECK_EQUAL(plan.plan.samples(), 200);
  auto half = whole;
  half.ratio = 0.5;
  plan = w->plan_epoch(half, {});
  BOOST_CHECK_EQUAL(static_cast<int64_t>(plan.ranking.size()), s.aggregated->size());
  // Whole subsets: each class's share, at most one subset over it.
  size_t largest = 0;
  for (auto& m : s.aggregated->members)
    largest = std::max(largest, m.size());
  BOOST_CHECK_GE(plan.plan.samples(), 100);
  BOOST_CHECK_LE(plan.plan.samples(), static_cast<int64_t>(100 + 10 * largest));
  BOOST_CHECK_LT(plan.plan.samples(), 200);
  // With random selection (or GoSGD) the same share, shuffled, unranked.
  s.edgegossip.selection = config::selection::random;
  auto r = make_worker(s, *m)->plan_epoch(half, {});
  BOOST_CHECK(r.ranking.empty());
  BOOST_CHECK_EQUAL(r.plan.samples(), 100);
}

BOOST_AUTO_TEST_SUITE_END()
