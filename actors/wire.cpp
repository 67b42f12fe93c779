#include "actors/wire.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/execution_unit.hpp>
#include <caf/message.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <mutex>

namespace eg::actors {
namespace {

std::mutex identities_mutex;
std::map<const caf::actor_system*, wire_identity> identities;

wire_identity identity_of(caf::execution_unit* ctx) {
  if (!ctx)
    return {};
  std::lock_guard<std::mutex> lock(identities_mutex);
  auto i = identities.find(&ctx->system());
  return i == identities.end() ? wire_identity{} : i->second;
}

template <class T>
std::vector<char> encode_as(caf::execution_unit* ctx, const T& x, const std::string& sender) {
  auto id = identity_of(ctx);
  messages::envelope e;
  e.hdr = {id.cluster_id, messages::protocol_version, sender.empty() ? id.node : sender};
  e.payload = x;
  return messages::encode(e);
}

/// Refusals at the door are logged: the first ten, then every hundredth.
void refused(const char* what, const std::string& why) {
  static std::atomic<uint64_t> count{0};
  auto n = ++count;
  if (n <= 10 || n % 100 == 0)
    spdlog::warn("refused a {} from another node: {}{}", what, why,
                 n > 10 ? fmt::format(" ({} refused so far)", n) : std::string{});
}

/// Decodes `in` as a message holding a T, checked against the identity.
template <class T>
caf::error decode_as(caf::execution_unit* ctx, const std::vector<char>& in, const char* what,
                     T& out, messages::header* hdr = nullptr,
                     std::shared_ptr<const void>* storage = nullptr,
                     messages::message_size* size = nullptr) {
  auto id = identity_of(ctx);
  try {
    if (id.cluster_id.empty())
      throw messages::codec_error("this process belongs to no cluster");
    auto env = messages::decode(in, id.cluster_id, size);
    auto* body = std::get_if<T>(&env.payload);
    if (!body)
      throw messages::codec_error(std::string{"the message does not hold a "} + what);
    out = std::move(*body);
    if (hdr)
      *hdr = std::move(env.hdr);
    if (storage)
      *storage = std::move(env.storage);
    return {};
  } catch (const messages::codec_error& e) {
    refused(what, e.what());
    return make_error(ec::bad_request, std::string{what} + ": " + e.what());
  }
}

} // namespace

caf::error make_error(ec x, std::string why) {
  return caf::error(static_cast<uint8_t>(x), caf::atom("eg"), caf::make_message(std::move(why)));
}

caf::error make_error(const std::exception& e) { return make_error(code_of(e), e.what()); }

bool is(const caf::error& err, ec x, std::string* why) {
  if (err.category() != caf::atom("eg") || err.code() != static_cast<uint8_t>(x))
    return false;
  if (why)
    *why = err.context().match_elements<std::string>() ? err.context().get_as<std::string>(0)
                                                       : std::string{};
  return true;
}

void announce_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<messages::plan>("eg::plan");
  cfg.add_message_type<messages::prediction>("eg::prediction");
  cfg.add_message_type<messages::epoch_report>("eg::epoch_report");
  cfg.add_message_type<messages::hello>("eg::hello");
  cfg.add_message_type<messages::role>("eg::role");
  cfg.add_message_type<messages::control>("eg::control");
  cfg.add_message_type<messages::held_weights>("eg::weights");
  cfg.add_message_type<messages::held_commit>("eg::commit");
  cfg.add_message_type<messages::held_global_model>("eg::global_model");
  cfg.add_message_type<messages::held_stage_batch>("eg::stage_batch");
  cfg.add_error_category(caf::atom("eg"), [](uint8_t code, caf::atom_value,
                                             const caf::message& context) {
    std::string text = to_string(static_cast<ec>(code));
    if (context.match_elements<std::string>())
      text += ": " + context.get_as<std::string>(0);
    return text;
  });
}

void set_wire_identity(const caf::actor_system& sys, wire_identity id) {
  std::lock_guard<std::mutex> lock(identities_mutex);
  if (id.cluster_id.empty())
    identities.erase(&sys);
  else
    identities[&sys] = std::move(id);
}

namespace detail {

std::vector<char> to_wire(caf::execution_unit* ctx, const messages::plan& x) {
  return encode_as(ctx, x, {});
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::prediction& x) {
  return encode_as(ctx, x, x.platform);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::epoch_report& x) {
  return encode_as(ctx, x, x.platform);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::hello& x) {
  return encode_as(ctx, x, x.node);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::control& x) {
  return encode_as(ctx, x, {});
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_weights& x) {
  return encode_as(ctx, x.value, x.sender);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_commit& x) {
  return encode_as(ctx, x.value, x.sender);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_global_model& x) {
  return encode_as(ctx, x.value, x.sender);
}
std::vector<char> to_wire(caf::execution_unit* ctx, const messages::held_stage_batch& x) {
  return encode_as(ctx, x.value, x.sender);
}

caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in, messages::plan& x) {
  return decode_as(ctx, in, "plan", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::prediction& x) {
  return decode_as(ctx, in, "prediction", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::epoch_report& x) {
  return decode_as(ctx, in, "epoch report", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in, messages::hello& x) {
  return decode_as(ctx, in, "hello", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::control& x) {
  return decode_as(ctx, in, "control request", x);
}
namespace {
/// A message with tensor views: they point into the received bytes, which
/// move into a buffer that the message holds (a packed message's views
/// point into its own unpacked storage instead).
template <class Body>
caf::error decode_held(caf::execution_unit* ctx, const std::vector<char>& in, const char* what,
                       messages::held<Body>& x) {
  auto kept = std::make_shared<const std::vector<char>>(in);
  messages::header hdr;
  Body body;
  std::shared_ptr<const void> storage;
  messages::message_size size;
  if (auto err = decode_as(ctx, *kept, what, body, &hdr, &storage, &size))
    return err;
  std::shared_ptr<const void> hold = storage;
  if (!hold)
    hold = kept;
  x = messages::held<Body>{hdr.sender, std::move(body), std::move(hold), size.wire,
                           size.unpacked};
  return {};
}
} // namespace

caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_weights& x) {
  return decode_held(ctx, in, "weights message", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_commit& x) {
  return decode_held(ctx, in, "commit", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_global_model& x) {
  return decode_held(ctx, in, "global model", x);
}
caf::error from_wire(caf::execution_unit* ctx, const std::vector<char>& in,
                     messages::held_stage_batch& x) {
  return decode_held(ctx, in, "stage batch", x);
}

std::string describe(const messages::plan& x) {
  return fmt::format("epoch {} ratio {:.3f}", x.epoch + 1, x.ratio);
}
std::string describe(const messages::prediction& x) {
  return fmt::format("{} {:.0f}/s", x.platform, x.throughput);
}
std::string describe(const messages::epoch_report& x) {
  return fmt::format("{} epoch {}", x.platform, x.epoch + 1);
}
std::string describe(const messages::hello& x) {
  return fmt::format("node {}, {} components", x.node, x.components.size());
}
std::string describe(const messages::control& x) {
  return fmt::format("{} {}", messages::to_string(x.verb), x.argument);
}
std::string describe(const messages::held_weights& x) {
  return fmt::format("from {}, {} tensors, {} sparse parts", x.sender, x.value.tensors.size(),
                     x.value.sparse.size());
}
std::string describe(const messages::held_commit& x) {
  return fmt::format("commit {} of {}, {} tensors", x.value.number, x.sender,
                     x.value.tensors.size());
}
std::string describe(const messages::held_global_model& x) {
  return fmt::format("global model version {}, {} tensors", x.value.version,
                     x.value.tensors.size());
}
std::string describe(const messages::held_stage_batch& x) {
  return fmt::format("{} batch {} from {}", messages::to_string(x.value.direction),
                     x.value.batch, x.sender);
}

} // namespace detail
} // namespace eg::actors
