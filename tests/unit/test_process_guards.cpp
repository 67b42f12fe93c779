// links: eg_actors
// What bounds a node's stop (actors/node/process_guards.hpp): the signal
// watch asks the node to stop at the first SIGTERM, and exits the process
// when a second signal comes or the stop outlasts its deadline. Here the
// exit is recorded instead of taken, and the signals are sent to this
// process (blocked in every thread, so only the watch takes them).
#include "actors/node/process_guards.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

using namespace std::chrono_literals;
using eg::actors::runtime_detail::forced_exit_code;
using eg::actors::runtime_detail::shutdown_watchdog;
using eg::actors::runtime_detail::signal_watch;

namespace {

struct recorded {
  std::atomic<int> stops{0};
  std::atomic<int> exit_code{-1};
};

/// Waits up to `limit` for `done`.
template <class F> bool within(std::chrono::milliseconds limit, F done) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

struct blocked_signals {
  blocked_signals() { signal_watch::block(); }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(process_guards, blocked_signals)

BOOST_AUTO_TEST_CASE(a_first_signal_asks_the_node_to_stop_and_nothing_more) {
  recorded r;
  signal_watch watch(true, [&] { ++r.stops; }, 10s, [&](int code) { r.exit_code = code; });
  BOOST_TEST(!watch.received());
  ::kill(::getpid(), SIGTERM);
  BOOST_TEST(within(3s, [&] { return watch.received(); }));
  BOOST_TEST(r.stops.load() == 1);
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(r.exit_code.load() == -1);  // the stop has 10 s: no exit yet
}

BOOST_AUTO_TEST_CASE(a_second_signal_exits_at_once) {
  recorded r;
  signal_watch watch(true, [&] { ++r.stops; }, 10s, [&](int code) { r.exit_code = code; });
  ::kill(::getpid(), SIGINT);
  BOOST_TEST(within(3s, [&] { return watch.received(); }));
  BOOST_TEST(r.exit_code.load() == -1);
  ::kill(::getpid(), SIGTERM);
  BOOST_TEST(within(3s, [&] { return r.exit_code.load() != -1; }));
  BOOST_TEST(r.exit_code.load() == forced_exit_code);
  BOOST_TEST(r.stops.load() == 1);  // the stop was asked once
}

BOOST_AUTO_TEST_CASE(a_stop_that_outlasts_its_deadline_exits) {
  recorded r;
  const auto start = std::chrono::steady_clock::now();
  signal_watch watch(true, [&] { ++r.stops; }, 400ms, [&](int code) { r.exit_code = code; });
  ::kill(::getpid(), SIGTERM);
  BOOST_TEST(within(5s, [&] { return r.exit_code.load() != -1; }));
  BOOST_TEST(r.exit_code.load() == forced_exit_code);
  const bool waited = std::chrono::steady_clock::now() - start >= 400ms;
  BOOST_TEST(waited);
}

BOOST_AUTO_TEST_CASE(without_a_signal_nothing_happens) {
  recorded r;
  {
    signal_watch watch(true, [&] { ++r.stops; }, 100ms, [&](int code) { r.exit_code = code; });
    std::this_thread::sleep_for(400ms);
    BOOST_TEST(!watch.received());
  }
  BOOST_TEST(r.stops.load() == 0);
  BOOST_TEST(r.exit_code.load() == -1);
}

// The shutdown watchdog: a step with a limit of its own brings the exit
// nearer than the whole shutdown's (CAF's network layer once hung in its
// stop after every actor had ended: 5 s, not 30); a shutdown that ends in
// time exits nothing.
BOOST_AUTO_TEST_CASE(a_shutdown_step_that_outlasts_its_own_limit_exits_with_the_runs_code) {
  recorded r;
  {
    shutdown_watchdog dog(10s, [&](int code) { r.exit_code = code; });
    dog.arm(4);
    dog.step("waiting for the actors");  // no limit: the 10 s stand
    std::this_thread::sleep_for(300ms);
    BOOST_TEST(r.exit_code.load() == -1);
    const auto limited = std::chrono::steady_clock::now();
    dog.step("CAF's network layer is still stopping", 200ms);
    BOOST_TEST(within(3s, [&] { return r.exit_code.load() != -1; }));
    BOOST_TEST(r.exit_code.load() == 4);
    BOOST_TEST((std::chrono::steady_clock::now() - limited >= 200ms));
  }
  recorded quiet;
  {
    shutdown_watchdog dog(10s, [&](int code) { quiet.exit_code = code; });
    dog.arm(0);
    dog.step("CAF's network layer is still stopping", 500ms);
  }  // ended in time
  std::this_thread::sleep_for(700ms);
  BOOST_TEST(quiet.exit_code.load() == -1);
}

BOOST_AUTO_TEST_SUITE_END()
