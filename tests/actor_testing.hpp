#pragma once
// An actor system on CAF's deterministic testing scheduler, for actor tests:
// every message is delivered by an explicit sched.run() / run_once(), time
// only moves with advance_time().

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

namespace eg::test {

struct actor_fixture {
  static caf::actor_system_config& make_config(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.verbosity", caf::atom("quiet"));
    return cfg;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{make_config(cfg)};
  caf::scheduler::test_coordinator& sched
    = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys};
};

} // namespace eg::test
