// links: eg_learning
#include "algorithms/gossip/topology.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace eg::learning;

namespace {

std::vector<std::string> platforms(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back("p" + std::to_string(i));
  return out;
}

/// Every member but `self`: all peers live.
std::vector<std::string> others(const std::vector<std::string>& members, const std::string& self) {
  std::vector<std::string> out;
  for (const auto& m : members)
    if (m != self)
      out.push_back(m);
  return out;
}

size_t index_in(const std::vector<std::string>& members, const std::string& name) {
  auto it = std::find(members.begin(), members.end(), name);
  BOOST_REQUIRE(it != members.end());
  return static_cast<size_t>(it - members.begin());
}

/// The one target of member i at iteration k with all peers live.
size_t target_of(const topology& t, const std::vector<std::string>& members, uint64_t k, size_t i) {
  std::mt19937_64 rng(1);
  auto to = t.targets(k, members[i], others(members, members[i]), rng);
  BOOST_REQUIRE_EQUAL(to.size(), 1u);
  return index_in(members, to.front());
}

/// Whether every node reaches every other along the directed edges.
bool strongly_connected(const std::vector<std::vector<size_t>>& out) {
  const size_t n = out.size();
  // Strongly connected iff node 0 reaches all and all reach node 0.
  std::vector<std::vector<size_t>> in(n);
  for (size_t u = 0; u < n; ++u)
    for (size_t v : out[u])
      in[v].push_back(u);
  auto reaches_all = [n](const std::vector<std::vector<size_t>>& edges) {
    std::vector<bool> seen(n, false);
    std::vector<size_t> queue{0};
    seen[0] = true;
    for (size_t q = 0; q < queue.size(); ++q)
      for (size_t v : edges[queue[q]])
        if (!seen[v]) {
          seen[v] = true;
          queue.push_back(v);
        }
    return queue.size() == n;
  };
  return reaches_all(out) && reaches_all(in);
}

} // namespace

BOOST_AUTO_TEST_SUITE(topology)

// --- uniform ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(uniform_picks_one_live_peer_and_none_without) {
  uniform_random t;
  std::mt19937_64 rng(7);
  const std::vector<std::string> live{"b", "d", "e"};
  for (uint64_t k = 0; k < 200; ++k) {
    auto to = t.targets(k, "a", live, rng);
    BOOST_REQUIRE_EQUAL(to.size(), 1u);
    BOOST_CHECK(std::find(live.begin(), live.end(), to.front()) != live.end());
  }
  BOOST_CHECK(t.targets(0, "a", {}, rng).empty());
  BOOST_CHECK(!t.directed());
  BOOST_CHECK_EQUAL(t.name(), "uniform");
}

BOOST_AUTO_TEST_CASE(uniform_covers_all_live_peers_evenly) {
  uniform_random t;
  std::mt19937_64 rng(42);
  const std::vector<std::string> live{"b", "c", "d", "e", "f"};
  const int draws = 50000;
  std::map<std::string, int> count;
  for (int k = 0; k < draws; ++k)
    ++count[t.targets(k, "a", live, rng).front()];
  BOOST_CHECK_EQUAL(count.size(), live.size());
  // Expected 10000 each, standard deviation ~89: 5 % is over 5 sigma.
  for (const auto& p : live)
    BOOST_CHECK_CLOSE(static_cast<double>(count[p]), draws / 5.0, 5.0);
}

BOOST_AUTO_TEST_CASE(uniform_matches_the_mixers_old_draw) {
  // The mixer drew live[uniform_int_distribution<size_t>(0, size - 1)(rng)]:
  // with the same seed, the same peers in the same order.
  uniform_random t;
  std::mt19937_64 rng(2024), old_rng(2024);
  std::vector<std::string> live{"p1", "p2", "p3", "p4", "p5", "p6", "p7"};
  for (uint64_t k = 0; k < 1000; ++k) {
    if (k == 500)
      live.pop_back();  // a peer went down: the range shrinks for both
    std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
    const auto& expected = live[pick(old_rng)];
    auto to = t.targets(k, "p0", live, rng);
    BOOST_REQUIRE_EQUAL(to.size(), 1u);
    BOOST_REQUIRE_EQUAL(to.front(), expected);
  }
  BOOST_CHECK(rng == old_rng);  // one draw per call, none elsewhere
}

// --- exponential -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(exponential_period_counts_powers_of_two_below_n) {
  BOOST_CHECK_EQUAL(exponential::period(1), 1u);
  BOOST_CHECK_EQUAL(exponential::period(2), 1u);
  BOOST_CHECK_EQUAL(exponential::period(3), 2u);
  BOOST_CHECK_EQUAL(exponential::period(4), 2u);
  BOOST_CHECK_EQUAL(exponential::period(5), 3u);
  BOOST_CHECK_EQUAL(exponential::period(8), 3u);
  BOOST_CHECK_EQUAL(exponential::period(9), 4u);
  BOOST_CHECK_EQUAL(exponential::period(17), 5u);
}

BOOST_AUTO_TEST_CASE(exponential_node0_of_8_sends_to_1_2_4_1_2_4) {
  const auto members = platforms(8);
  exponential t(members);
  std::vector<size_t> seen;
  for (uint64_t k = 0; k <= 5; ++k)
    seen.push_back(target_of(t, members, k, 0));
  const std::vector<size_t> expected{1, 2, 4, 1, 2, 4};
  BOOST_CHECK_EQUAL_COLLECTIONS(seen.begin(), seen.end(), expected.begin(), expected.end());
  // Node 6 wraps around: 7, 0, 2.
  BOOST_CHECK_EQUAL(target_of(t, members, 0, 6), 7u);
  BOOST_CHECK_EQUAL(target_of(t, members, 1, 6), 0u);
  BOOST_CHECK_EQUAL(target_of(t, members, 2, 6), 2u);
  BOOST_CHECK(t.directed());
  BOOST_CHECK_EQUAL(t.name(), "exponential");
}

BOOST_AUTO_TEST_CASE(exponential_each_iteration_is_a_permutation) {
  // Out-degree 1 (target_of requires exactly one target) and in-degree 1.
  for (size_t n = 2; n <= 17; ++n) {
    const auto members = platforms(n);
    exponential t(members);
    for (uint64_t k = 0; k < 2 * exponential::period(n) + 1; ++k) {
      std::vector<int> in_degree(n, 0);
      for (size_t i = 0; i < n; ++i) {
        const size_t j = target_of(t, members, k, i);
        BOOST_CHECK_NE(j, i);
        ++in_degree[j];
      }
      for (size_t j = 0; j < n; ++j)
        BOOST_CHECK_MESSAGE(in_degree[j] == 1,
                            "n=" << n << " k=" << k << ": in-degree of " << j << " is "
                                 << in_degree[j]);
    }
  }
}

BOOST_AUTO_TEST_CASE(exponential_one_period_is_strongly_connected) {
  for (size_t n = 2; n <= 17; ++n) {
    const auto members = platforms(n);
    exponential t(members);
    std::vector<std::vector<size_t>> out(n);
    for (uint64_t k = 0; k < exponential::period(n); ++k)
      for (size_t i = 0; i < n; ++i)
        out[i].push_back(target_of(t, members, k, i));
    BOOST_CHECK_MESSAGE(strongly_connected(out), "n=" << n);
  }
}

BOOST_AUTO_TEST_CASE(exponential_period_repeats_and_uses_distinct_hops) {
  // n=5: hops 1, 2, 4, then 1 again (m=3); n=4: hops 1, 2 (m=2).
  const auto five = platforms(5);
  exponential t5(five);
  BOOST_CHECK_EQUAL(target_of(t5, five, 0, 3), 4u);
  BOOST_CHECK_EQUAL(target_of(t5, five, 1, 3), 0u);
  BOOST_CHECK_EQUAL(target_of(t5, five, 2, 3), 2u);
  BOOST_CHECK_EQUAL(target_of(t5, five, 3, 3), 4u);
  const auto four = platforms(4);
  exponential t4(four);
  BOOST_CHECK_EQUAL(target_of(t4, four, 0, 0), 1u);
  BOOST_CHECK_EQUAL(target_of(t4, four, 1, 0), 2u);
  BOOST_CHECK_EQUAL(target_of(t4, four, 2, 0), 1u);
  // Large k: no overflow, still periodic.
  const auto eight = platforms(8);
  exponential t8(eight);
  const uint64_t big = 3 * 1000000000000ULL;  // divisible by 3
  BOOST_CHECK_EQUAL(target_of(t8, eight, big, 0), 1u);
  BOOST_CHECK_EQUAL(target_of(t8, eight, big + 2, 0), 4u);
}

BOOST_AUTO_TEST_CASE(exponential_over_the_live_members_when_one_is_down) {
  // p2 of 8 is down: the graph is the exponential graph of the 7 others
  // (p0 p1 p3 p4 p5 p6 p7, indices 0..6), period 3, hops 1, 2, 4.
  const auto members = platforms(8);
  exponential t(members);
  std::mt19937_64 rng(3);
  auto live = others(members, "p0");
  live.erase(std::find(live.begin(), live.end(), "p2"));
  const std::vector<std::string> expected{"p1", "p3", "p5", "p1"};
  for (uint64_t k = 0; k < expected.size(); ++k) {
    auto to = t.targets(k, "p0", live, rng);
    BOOST_REQUIRE_EQUAL(to.size(), 1u);
    BOOST_CHECK_EQUAL(to.front(), expected[k]);
  }
  BOOST_CHECK(t.targets(0, "p0", {}, rng).empty());
}

BOOST_AUTO_TEST_CASE(directed_graphs_stay_strongly_connected_as_members_go_down) {
  // Any members down (every subset of 7 members of at least 2 left): the
  // union of one period's edges among the live ones is strongly connected.
  const auto members = platforms(7);
  for (const std::string name : {"exponential", "ring"}) {
    auto t = make_topology(name, members);
    for (unsigned mask = 0; mask < (1u << 7); ++mask) {
      std::vector<std::string> up;
      for (size_t i = 0; i < 7; ++i)
        if (mask & (1u << i))
          up.push_back(members[i]);
      if (up.size() < 2)
        continue;
      std::vector<std::vector<size_t>> out(up.size());
      std::mt19937_64 rng(1);
      for (uint64_t k = 0; k < exponential::period(up.size()); ++k)
        for (size_t i = 0; i < up.size(); ++i) {
          auto to = t->targets(k, up[i], others(up, up[i]), rng);
          BOOST_REQUIRE_EQUAL(to.size(), 1u);
          out[i].push_back(index_in(up, to.front()));
        }
      BOOST_CHECK_MESSAGE(strongly_connected(out), name << " mask " << mask);
    }
  }
}

BOOST_AUTO_TEST_CASE(exponential_alone_or_not_a_member_sends_to_no_one) {
  std::mt19937_64 rng(3);
  exponential one({"p0"});
  BOOST_CHECK(one.targets(0, "p0", {}, rng).empty());
  BOOST_CHECK(one.targets(0, "p0", {"x"}, rng).empty());
  const auto members = platforms(4);
  exponential t(members);
  BOOST_CHECK(t.targets(0, "stranger", members, rng).empty());
  exponential none(std::vector<std::string>{});
  BOOST_CHECK(none.targets(0, "p0", {"p1"}, rng).empty());
}

// --- ring ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(ring_sends_to_the_next_member_at_every_iteration) {
  const auto members = platforms(5);
  ring t(members);
  for (uint64_t k = 0; k < 7; ++k)
    for (size_t i = 0; i < members.size(); ++i)
      BOOST_CHECK_EQUAL(target_of(t, members, k, i), (i + 1) % members.size());
  BOOST_CHECK(t.directed());
  BOOST_CHECK_EQUAL(t.name(), "ring");
}

BOOST_AUTO_TEST_CASE(ring_closes_over_a_dead_successor_and_handles_edge_cases) {
  const auto members = platforms(3);
  ring t(members);
  std::mt19937_64 rng(5);
  auto to = t.targets(0, "p2", {"p1"}, rng);  // p0 is down: p2's successor is p1
  BOOST_REQUIRE_EQUAL(to.size(), 1u);
  BOOST_CHECK_EQUAL(to.front(), "p1");
  to = t.targets(0, "p2", {"p0", "p1"}, rng);
  BOOST_REQUIRE_EQUAL(to.size(), 1u);
  BOOST_CHECK_EQUAL(to.front(), "p0");
  BOOST_CHECK(t.targets(0, "stranger", members, rng).empty());
  BOOST_CHECK(t.targets(0, "p0", {}, rng).empty());  // alone
  ring one({"p0"});
  BOOST_CHECK(one.targets(0, "p0", {}, rng).empty());
  // n = 2: each sends to the other.
  const auto two = platforms(2);
  ring t2(two);
  BOOST_CHECK_EQUAL(target_of(t2, two, 0, 0), 1u);
  BOOST_CHECK_EQUAL(target_of(t2, two, 0, 1), 0u);
}

// --- uniform with several out-peers, full ----------------------------------------

BOOST_AUTO_TEST_CASE(uniform_with_k_out_peers_draws_k_distinct_live_peers_evenly) {
  uniform_random t(3);
  BOOST_CHECK_EQUAL(t.out_peers(), 3u);
  std::mt19937_64 rng(9);
  const std::vector<std::string> live{"b", "c", "d", "e", "f", "g"};
  std::map<std::string, int> count;
  const int draws = 20000;
  for (int k = 0; k < draws; ++k) {
    auto to = t.targets(k, "a", live, rng);
    BOOST_REQUIRE_EQUAL(to.size(), 3u);
    std::sort(to.begin(), to.end());
    BOOST_REQUIRE(std::adjacent_find(to.begin(), to.end()) == to.end());  // distinct
    for (auto& p : to) {
      BOOST_REQUIRE(std::find(live.begin(), live.end(), p) != live.end());
      ++count[p];
    }
  }
  // Each peer in half of the draws: 10000 expected, sigma ~71.
  for (const auto& p : live)
    BOOST_CHECK_CLOSE(static_cast<double>(count[p]), draws / 2.0, 4.0);
  // Fewer live than k: all of them.
  auto few = t.targets(0, "a", {"b", "c"}, rng);
  BOOST_CHECK_EQUAL(few.size(), 2u);
  BOOST_CHECK(t.targets(0, "a", {}, rng).empty());
  BOOST_CHECK_THROW(uniform_random(0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(full_sends_to_every_live_peer) {
  fully_connected t;
  std::mt19937_64 rng(1), untouched(1);
  const std::vector<std::string> live{"b", "c", "d"};
  BOOST_CHECK(t.targets(5, "a", live, rng) == live);
  BOOST_CHECK(t.targets(5, "a", {}, rng).empty());
  BOOST_CHECK(rng == untouched);
  BOOST_CHECK(!t.directed());
  BOOST_CHECK_EQUAL(t.name(), "full");
}

BOOST_AUTO_TEST_CASE(directed_graphs_leave_the_rng_alone) {
  const auto members = platforms(6);
  std::mt19937_64 rng(11), untouched(11);
  exponential e(members);
  ring r(members);
  for (uint64_t k = 0; k < 10; ++k) {
    e.targets(k, "p0", others(members, "p0"), rng);
    r.targets(k, "p0", others(members, "p0"), rng);
  }
  BOOST_CHECK(rng == untouched);
}

// --- factory ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(factory_builds_every_known_topology) {
  const auto names = topology_names();
  const std::vector<std::string> expected{"exponential", "full", "ring", "uniform"};
  BOOST_CHECK_EQUAL_COLLECTIONS(names.begin(), names.end(), expected.begin(), expected.end());
  for (const auto& n : names) {
    auto t = make_topology(n, platforms(4));
    BOOST_REQUIRE(t);
    BOOST_CHECK_EQUAL(t->name(), n);
  }
  BOOST_CHECK(!make_topology("uniform", {})->directed());
  BOOST_CHECK(make_topology("exponential", platforms(4))->directed());
  BOOST_CHECK(make_topology("ring", platforms(4))->directed());
  BOOST_CHECK(!make_topology("full", platforms(4))->directed());
  std::mt19937_64 rng(4);
  BOOST_CHECK_EQUAL(make_topology("uniform", {}, 2)->targets(0, "a", {"b", "c", "d"}, rng).size(),
                    2u);
  // The member list reaches the graph.
  const auto members = platforms(8);
  auto t = make_topology("exponential", members);
  BOOST_CHECK_EQUAL(target_of(*t, members, 2, 0), 4u);
}

BOOST_AUTO_TEST_CASE(factory_rejects_an_unknown_name_listing_the_known_ones) {
  try {
    make_topology("torus", platforms(4));
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    BOOST_CHECK_MESSAGE(what.find("torus") != std::string::npos, what);
    for (const auto& n : topology_names())
      BOOST_CHECK_MESSAGE(what.find(n) != std::string::npos, what);
  }
  BOOST_CHECK_THROW(make_topology("", {}), std::invalid_argument);
  BOOST_CHECK_THROW(make_topology("Ring", platforms(3)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(duplicate_members_are_rejected) {
  BOOST_CHECK_THROW(make_topology("ring", {"a", "b", "a"}), std::invalid_argument);
  BOOST_CHECK_THROW(exponential({"a", "a"}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(make_topology("uniform", {"a", "a"}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(sources_are_the_inverse_of_targets_for_every_directed_graph) {
  // With any set of live members, j is among i's sources at k exactly when
  // i is j's target at k (the same view of who is live).
  auto members = platforms(7);
  std::mt19937_64 rng(1);
  for (const char* name : {"exponential", "ring", "full"}) {
    auto t = make_topology(name, members);
    for (std::vector<std::string> down : {std::vector<std::string>{}, {"p3"}, {"p0", "p5"}}) {
      std::vector<std::string> up;
      for (auto& m : members)
        if (std::find(down.begin(), down.end(), m) == down.end())
          up.push_back(m);
      for (uint64_t k = 0; k < 9; ++k)
        for (auto& i : up) {
          auto src = t->sources(k, i, others(up, i));
          BOOST_REQUIRE(src.has_value());
          for (auto& j : up) {
            if (j == i)
              continue;
            auto tj = t->targets(k, j, others(up, j), rng);
            bool sends = std::find(tj.begin(), tj.end(), i) != tj.end();
            bool listed = std::find(src->begin(), src->end(), j) != src->end();
            BOOST_TEST(sends == listed, name << " k=" << k << " " << j << "->" << i);
          }
        }
    }
  }
}

BOOST_AUTO_TEST_CASE(exponential_node0_of_8_hears_from_7_6_4) {
  auto members = platforms(8);
  auto t = make_topology("exponential", members);
  std::vector<std::string> expected = {"p7", "p6", "p4", "p7"};
  for (uint64_t k = 0; k < 4; ++k) {
    auto src = t->sources(k, "p0", others(members, "p0"));
    BOOST_REQUIRE(src.has_value());
    BOOST_REQUIRE_EQUAL(src->size(), 1u);
    BOOST_TEST(src->front() == expected[k]);
  }
}

BOOST_AUTO_TEST_CASE(uniform_does_not_say_who_sends) {
  auto t = make_topology("uniform", platforms(4));
  BOOST_TEST(!t->sources(3, "p0", {"p1", "p2", "p3"}).has_value());
}

BOOST_AUTO_TEST_CASE(overlap_gate_waits_for_the_message_of_iteration_k_plus_1_minus_tau) {
  overlap_gate gate(1);
  // Step 1 (k = 0) needs nothing: no one has sent yet.
  BOOST_TEST(!gate.needed_iteration(0).has_value());
  BOOST_REQUIRE(gate.needed_iteration(5).has_value());
  BOOST_TEST(*gate.needed_iteration(5) == 5u);
  BOOST_TEST(gate.missing(5, {"a", "b"}) == (std::vector<std::string>{"a", "b"}));
  gate.heard("a", 4);  // too old
  gate.heard("b", 6);  // newer counts too
  BOOST_TEST(gate.missing(5, {"a", "b"}) == (std::vector<std::string>{"a"}));
  gate.heard("a", 5);
  BOOST_TEST(gate.missing(5, {"a", "b"}).empty());
  gate.heard("a", 2);  // an older message does not move it back
  BOOST_TEST(gate.missing(5, {"a"}).empty());

  overlap_gate two(2);
  BOOST_TEST(!two.needed_iteration(1).has_value());
  BOOST_TEST(*two.needed_iteration(4) == 3u);

  overlap_gate off(0);
  BOOST_TEST(!off.needed_iteration(100).has_value());
}

BOOST_AUTO_TEST_CASE(overlap_gate_stops_waiting_for_a_silent_source_until_the_next_epoch) {
  overlap_gate gate(1);
  gate.give_up({"c"});
  BOOST_TEST(gate.missing(10, {"c", "d"}) == (std::vector<std::string>{"d"}));
  gate.heard("c", 3);  // heard again, but behind: still not waited for this epoch
  BOOST_TEST(gate.missing(10, {"c"}).empty());
  gate.new_epoch();
  BOOST_TEST(gate.missing(10, {"c"}) == (std::vector<std::string>{"c"}));
}
