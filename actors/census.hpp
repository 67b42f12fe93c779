#pragma once
// Which of the process's actors are running, by name: each actor enters
// itself when it starts and leaves when it ends (an attached functor), so
// that a shutdown that does not end can say which actors keep it up.

#include <caf/actor_cast.hpp>
#include <caf/fwd.hpp>

#include <string>
#include <vector>

namespace eg::actors::census {

/// Counts `self` as running under `what` ("platform a0", "balancer") until
/// it ends.
void enter(caf::abstract_actor* self, std::string what);

/// `handle`, counted under `what`; returns it.
template <class Handle>
Handle counted(Handle handle, std::string what) {
  if (handle)
    enter(caf::actor_cast<caf::abstract_actor*>(handle), std::move(what));
  return handle;
}

/// The actors running now, in the order they entered (a name more than once
/// where several run under it).
std::vector<std::string> running();

} // namespace eg::actors::census
