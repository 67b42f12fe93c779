// links: eg_actors
// The project's error codes (common/error.hpp): each layer's failures carry
// the code of their kind, are still caught by their standard class, and an
// actor turns them into a caf::error of category "eg" with that code.
#include "actors/wire.hpp"
#include "algorithms/gossip/gossip.hpp"
#include "algorithms/gossip/topology.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "data/load.hpp"
#include "messages/codec.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "storage/store.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>

namespace eg {
std::ostream& operator<<(std::ostream& os, errc c) { return os << to_string(c); }
} // namespace eg

using namespace eg;

namespace {

/// The code of what `f` throws (errc::internal for none of the project's);
/// fails the test when it throws nothing.
errc code_thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return code_of(e);
  }
  BOOST_FAIL("nothing was thrown");
  return errc::internal;
}

const learning::model_shape fashion{data::sample_shape::image(1, 28, 28), 10};

} // namespace

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(each_layer_says_what_kind_of_failure_it_met) {
  BOOST_TEST(code_thrown([] { config::parse("[train]\nepochs = -1\n", "c.toml"); })
             == errc::bad_config);
  BOOST_TEST(code_thrown([] { config::parse("[strategy]\nname = \"x\"\n", "c.toml"); })
             == errc::bad_config);
  BOOST_TEST(code_thrown([] {
               data::load({"/nonexistent/edgegossip-data", "auto", "", 0}, {});
             }) == errc::bad_data);
  BOOST_TEST(code_thrown([] { messages::decode(std::vector<char>(40, 'x'), "edgegossip"); })
             == errc::bad_message);
  const auto file = std::filesystem::temp_directory_path() / "edgegossip-errors-not-a-dir";
  std::ofstream(file.string()) << "a file";
  BOOST_TEST(code_thrown([&] { storage::store::open((file / "db").string()); })
             == errc::storage_failed);
  std::filesystem::remove(file);
  // A model for images given flat features; another model's parameters.
  BOOST_TEST(code_thrown([] {
               learning::make_classifier("lenet5", 1, {data::sample_shape::features(8), 3});
             }) == errc::mismatch);
  BOOST_TEST(code_thrown([] {
               auto lenet = learning::make_classifier("lenet5", 1, fashion);
               auto logreg = learning::make_classifier("logreg", 1, fashion);
               learning::load_model(*lenet, learning::save_model(*logreg));
             }) == errc::mismatch);
  // Names nothing registered.
  BOOST_TEST(code_thrown([] { learning::make_topology("torus", {}); }) == errc::bad_config);
  BOOST_TEST(code_thrown([] { learning::make_strategy("allreduce", 2, 0.5); })
             == errc::bad_config);
  // A call outside a class's contract.
  BOOST_TEST(code_thrown([] { learning::gosgd(0, 0.5); }) == errc::invalid_argument);
  // Not the project's.
  BOOST_TEST(code_thrown([] { throw std::logic_error("a bug"); }) == errc::internal);
}

BOOST_AUTO_TEST_CASE(a_coded_failure_is_still_caught_by_its_standard_class) {
  BOOST_CHECK_THROW(learning::make_strategy("allreduce", 2, 0.5), std::invalid_argument);
  BOOST_CHECK_THROW(config::parse("[train]\nepochs = -1\n", "c.toml"), std::runtime_error);
  BOOST_CHECK_THROW(config::parse("[train]\nepochs = -1\n", "c.toml"), config::config_error);
  try {
    throw mismatch_error("tensor 'fc.weight' is 3x4, expected 4x3");
  } catch (const std::exception& e) {
    BOOST_TEST(describe(e) == "[mismatch] tensor 'fc.weight' is 3x4, expected 4x3");
  }
}

BOOST_AUTO_TEST_CASE(an_actor_sends_the_failures_code_and_text) {
  try {
    data::load({"/nonexistent/edgegossip-data", "auto", "", 0}, {});
    BOOST_FAIL("no exception");
  } catch (const std::exception& e) {
    auto err = actors::make_error(e);
    std::string why;
    BOOST_TEST(actors::is(err, errc::bad_data, &why));
    BOOST_TEST(why == e.what());
    BOOST_TEST(!actors::is(err, errc::bad_config));
  }
  // The wire's first codes keep their numbers (older nodes read them).
  BOOST_TEST(static_cast<int>(errc::refused) == 1);
  BOOST_TEST(static_cast<int>(errc::lost) == 6);
}

BOOST_AUTO_TEST_SUITE_END()
