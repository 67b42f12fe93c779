#pragma once
// The door between nodes. Inside a node, actors exchange the typed messages
// of messages/codec.hpp (plans, reports, predictions, hellos, control
// requests, gossip weights, commits, global models, stage batches) as they
// are: no encoding. When CAF's middleman carries one of them to another
// node, its `inspect` writes it as a Cap'n Proto envelope (the one wire
// format: messages/edgegossip.capnp), and on arrival decodes it once,
// checking the cluster id and protocol version against the receiving actor
// system's wire identity; a message that fails is dropped at
// the door and said in the log, before any actor sees it.

#include "common/error.hpp"
#include "messages/codec.hpp"

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include <string>
#include <type_traits>
#include <vector>

namespace eg::actors {

/// Errors that cross actor boundaries (and nodes), category "eg": the
/// project's codes (common/error.hpp), which every layer's exceptions carry.
using ec = eg::errc;
using eg::to_string;
/// The error `x` with `why` as its text (what the other side shows).
caf::error make_error(ec x, std::string why);
/// The error an exception of the project stands for: its code (internal for
/// one of no layer of the project) and its text.
caf::error make_error(const std::exception& e);
/// Whether `err` is `x`; `why` (if given) gets its text.
bool is(const caf::error& err, ec x, std::string* why = nullptr);

/// Who an actor system is on the wire: encoded messages carry its cluster id
/// and node name, and received ones must carry its cluster id.
struct wire_identity {
  std::string cluster_id;
  std::string node;
};

/// Announces the typed messages and the "eg" error category to CAF; every
/// actor system of the project is configured with it.
void announce_types(caf::actor_system_config& cfg);
/// Sets (or, with an empty cluster id, removes) the identity of `sys`.
void set_wire_identity(const caf::actor_system& sys, wire_identity id);

namespace detail {
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::plan& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::prediction& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::epoch_report& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::hello& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::control& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_weights& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_commit& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_global_model& x);
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_stage_batch& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in, messages::plan& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::prediction& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::epoch_report& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in, messages::hello& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::control& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_weights& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_commit& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_global_model& x);
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_stage_batch& x);
std::string describe(const messages::plan& x);
std::string describe(const messages::prediction& x);
std::string describe(const messages::epoch_report& x);
std::string describe(const messages::hello& x);
std::string describe(const messages::control& x);
std::string describe(const messages::held_weights& x);
std::string describe(const messages::held_commit& x);
std::string describe(const messages::held_global_model& x);
std::string describe(const messages::held_stage_batch& x);

template <class Inspector, class T>
typename Inspector::result_type inspect_wire(Inspector& f, T& x, const char* name) {
  if constexpr (std::is_same<typename Inspector::result_type, void>::value) {
    // to_string (logs): a short description, no encoding.
    auto text = describe(x);
    return f(caf::meta::type_name(name), text);
  } else if constexpr (Inspector::reads_state) {
    auto bytes = to_wire(f.context(), x);
    return f(bytes);
  } else {
    std::vector<char> bytes;
    if (auto err = f(bytes))
      return err;
    return from_wire(f.context(), bytes, x);
  }
}
} // namespace detail

} // namespace eg::actors

namespace eg::messages {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan& x) {
  return actors::detail::inspect_wire(f, x, "plan");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prediction& x) {
  return actors::detail::inspect_wire(f, x, "prediction");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, epoch_report& x) {
  return actors::detail::inspect_wire(f, x, "epoch_report");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello& x) {
  return actors::detail::inspect_wire(f, x, "hello");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, control& x) {
  return actors::detail::inspect_wire(f, x, "control");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_weights& x) {
  return actors::detail::inspect_wire(f, x, "weights");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_commit& x) {
  return actors::detail::inspect_wire(f, x, "commit");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_global_model& x) {
  return actors::detail::inspect_wire(f, x, "global_model");
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_stage_batch& x) {
  return actors::detail::inspect_wire(f, x, "stage_batch");
}

} // namespace eg::messages
