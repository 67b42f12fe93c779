// links: eg_actors
// How an actor system that trains waits for work (actors::tune_scheduler):
// the settings are options CAF knows, and with them the worker threads of a
// system whose actor gets a message every few milliseconds sleep between
// messages instead of waking every 50 us, as with CAF's defaults. Both
// systems are measured in the same test, as CPU time of this process.
#include "actors/node/runtime.hpp"

#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>

#include <chrono>
#include <ctime>
#include <string>
#include <thread>

namespace {

using namespace eg;

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// CPU seconds this process spends while an actor of a system made from
/// `cfg` gets a message every 3 ms for about 0.6 s (two worker threads).
double cpu_while_messages_trickle_in(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", size_t{2});
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto counter = sys.spawn([]() -> caf::behavior {
    return {[](int x) { return x + 1; }};
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double before = process_cpu_seconds();
  for (int i = 0; i < 200; ++i) {
    caf::anon_send(counter, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const double used = process_cpu_seconds() - before;
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
  return used;
}

/// A system config that says whether CAF declares an option.
struct config_probe : caf::actor_system_config {
  bool knows(const char* key) const { return custom_options_.qualified_name_lookup(key) != nullptr; }
};

} // namespace

BOOST_AUTO_TEST_SUITE(scheduler)

BOOST_AUTO_TEST_CASE(the_settings_are_options_caf_knows) {
  config_probe cfg;
  actors::tune_scheduler(cfg);
  for (const char* key :
       {"work-stealing.aggressive-poll-attempts", "work-stealing.aggressive-steal-interval",
        "work-stealing.moderate-poll-attempts", "work-stealing.moderate-steal-interval",
        "work-stealing.moderate-sleep-duration", "work-stealing.relaxed-steal-interval",
        "work-stealing.relaxed-sleep-duration"}) {
    BOOST_TEST(cfg.knows(key), key);
  }
  BOOST_TEST(caf::get_or(cfg, "work-stealing.moderate-poll-attempts", size_t{0}) == 10u);
  BOOST_TEST(caf::get_or(cfg, "work-stealing.moderate-sleep-duration", caf::timespan{0}).count() ==
             caf::timespan{std::chrono::milliseconds(1)}.count());
  BOOST_TEST(!cfg.knows("work-stealing.no-such-option"));
}

BOOST_AUTO_TEST_CASE(idle_workers_sleep_between_messages_a_few_milliseconds_apart) {
  caf::actor_system_config defaults;
  const double with_defaults = cpu_while_messages_trickle_in(defaults);
  caf::actor_system_config tuned;
  actors::tune_scheduler(tuned);
  const double with_tuning = cpu_while_messages_trickle_in(tuned);
  BOOST_TEST_MESSAGE("CPU seconds over 0.6 s of messages 3 ms apart: CAF's defaults "
                     << with_defaults << ", tuned " << with_tuning);
  // The defaults' workers wake every 50 us, the tuned ones every 1 ms.
  BOOST_TEST(with_tuning * 3 < with_defaults);
}

BOOST_AUTO_TEST_SUITE_END()
