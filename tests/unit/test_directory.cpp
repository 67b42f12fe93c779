// The node's directory of components and the balancer's succession.
#include "actors/node/directory.hpp"

#include <boost/test/unit_test.hpp>

#include <set>

using eg::actors::dials;
using eg::actors::succession;
using eg::messages::component;
using eg::messages::role;

BOOST_AUTO_TEST_SUITE(directory)

BOOST_AUTO_TEST_CASE(a_hello_replaces_what_was_known_of_its_node) {
  eg::actors::directory d;
  d.add({role::node, "a", "a"}, {});
  d.add({role::platform, "a0", "a"}, {});
  d.add({role::platform, "b0", "b"}, {});
  d.add({role::balancer, "b", "b"}, {});
  BOOST_TEST(d.balancer_home() == "b");
  // Node b comes back without its balancer, with another platform.
  d.replace_node("b", {{role::node, "b", "b"}, {role::platform, "b1", "b"}}, {{}, {}});
  BOOST_TEST(d.balancer_home().empty());
  BOOST_TEST(d.of_role(role::platform).size() == 2u);
  BOOST_TEST(d.hosted_by("b").size() == 2u);
  BOOST_TEST(d.hosted_by("a").size() == 2u);
  // Components and handles must pair up.
  BOOST_CHECK_THROW(d.replace_node("b", {{role::node, "b", "b"}}, {}), std::invalid_argument);
  d.remove_node("b");
  BOOST_TEST(d.hosted_by("b").empty());
  BOOST_TEST(d.entries().size() == 2u);
}

BOOST_AUTO_TEST_CASE(remove_drops_one_role_of_one_node) {
  eg::actors::directory d;
  d.add({role::balancer, "a", "a"}, {});
  d.add({role::balancer, "c", "c"}, {});
  d.add({role::node, "a", "a"}, {});
  d.remove(role::balancer, "a");
  BOOST_TEST(d.balancer_home() == "c");
  BOOST_TEST(d.hosted_by("a").size() == 1u);
  BOOST_TEST(!d.find(role::node, "x"));
}

BOOST_AUTO_TEST_CASE(succession_puts_the_balancer_node_first_then_file_order) {
  succession s({"a", "b", "c", "d"}, "c");
  BOOST_TEST((s.order() == std::vector<std::string>{"c", "a", "b", "d"}));
  BOOST_TEST(s.rank("c") == 0u);
  BOOST_TEST(s.rank("d") == 3u);
  BOOST_TEST(s.rank("zz") == 4u);
  BOOST_TEST(s.gives_way("a", "c"));   // c comes back: a's successor stops
  BOOST_TEST(!s.gives_way("c", "a"));
}

BOOST_AUTO_TEST_CASE(a_node_elects_itself_only_when_all_before_it_are_lost) {
  using v = succession::verdict;
  succession s({"a", "b", "c"}, "a");
  BOOST_TEST((s.when_none("a", false, {}) == v::elect));     // its own turn first
  BOOST_TEST((s.when_none("b", false, {}) == v::wait));      // a may be starting
  BOOST_TEST((s.when_none("b", false, {"a"}) == v::elect));  // a went down
  BOOST_TEST((s.when_none("c", false, {"a"}) == v::wait));   // b's turn
  BOOST_TEST((s.when_none("c", false, {"a", "b"}) == v::elect));
  BOOST_TEST((s.when_none("c", true, {"a", "b"}) == v::retry));  // still dialling
  BOOST_TEST((s.when_none("x", false, {"a", "b", "c"}) == v::wait));
}

BOOST_AUTO_TEST_CASE(only_one_side_of_a_cut_may_host_the_balancer) {
  // Three nodes, b cut off: b alone is a minority, a and c together the
  // majority; and never both sides of one cut.
  succession three({"a", "b", "c"}, "a");
  BOOST_TEST(!three.majority("b", {}));
  BOOST_TEST(three.majority("c", {"a"}));
  BOOST_TEST(three.majority("a", {"c"}));
  BOOST_TEST(!three.majority("a", {}));  // the balancer's own node cut off
  BOOST_TEST(three.majority("b", {"c"}));
  BOOST_TEST(three.majority("a", {"b", "c"}));
  BOOST_TEST(!three.majority("b", {"x", "y"}));  // strangers are no nodes of it
  // Four nodes cut two and two: the side of the balancer's node (c) wins.
  succession four({"a", "b", "c", "d"}, "c");
  BOOST_TEST(four.majority("c", {"d"}));
  BOOST_TEST(!four.majority("a", {"b"}));
  BOOST_TEST(!four.majority("b", {}));
  // Every split of the four: exactly one side, or none, may host it.
  const std::vector<std::string> nodes{"a", "b", "c", "d"};
  for (unsigned mask = 0; mask < 16; ++mask) {
    std::set<std::string> left, right;
    for (unsigned i = 0; i < 4; ++i)
      (mask & (1u << i) ? left : right).insert(nodes[i]);
    auto may = [&](const std::set<std::string>& side) {
      if (side.empty())
        return false;
      auto peers = side;
      auto me = *peers.begin();
      peers.erase(me);
      return four.majority(me, peers);
    };
    BOOST_TEST(!(may(left) && may(right)), "split " << mask);
    BOOST_TEST((may(left) || may(right)), "split " << mask);
  }
  // cluster.majority = 1: any node alone may (a two-node cluster that fails
  // over, accepting that a cut then splits the run).
  succession two({"a", "b"}, "a");
  BOOST_TEST(!two.majority("b", {}));
  BOOST_TEST(two.majority("a", {}));
  BOOST_TEST(two.majority("b", {}, 1));
}

BOOST_AUTO_TEST_CASE(of_two_balancers_the_one_further_in_the_run_stays) {
  // a (first in the order) was cut off and paused at 2 epochs; b's
  // successor went on to 6 with the majority: a's gives way, not b's.
  succession s({"a", "b", "c"}, "a");
  BOOST_TEST(s.gives_way("a", 2, "b", 6));
  BOOST_TEST(!s.gives_way("b", 6, "a", 2));
  // As far as each other: the order decides, as without a cut.
  BOOST_TEST(!s.gives_way("a", 4, "b", 4));
  BOOST_TEST(s.gives_way("b", 4, "a", 4));
  // The directory carries a balancer's progress into the hello.
  eg::actors::directory d;
  d.add({role::balancer, "a", "a"}, {});
  d.set_samples(role::balancer, "a", 5);
  BOOST_REQUIRE_EQUAL(d.of_role(role::balancer).size(), 1u);
  BOOST_TEST(d.of_role(role::balancer).front().what.samples == 5u);
}

BOOST_AUTO_TEST_CASE(the_earlier_node_in_the_file_dials) {
  std::vector<std::string> file{"a", "b", "c"};
  BOOST_TEST(dials(file, "a", "c"));
  BOOST_TEST(!dials(file, "c", "a"));
  BOOST_TEST(dials(file, "b", "c"));
  BOOST_TEST(!dials(file, "x", "a"));
}

BOOST_AUTO_TEST_SUITE_END()
