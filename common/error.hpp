#pragma once
// The project's error codes, shared by every layer. Each layer's exceptions
// carry one (config_error: bad_config, data_error: bad_data, codec_error:
// bad_message, storage_error: storage_failed ...), and an actor that catches
// one turns it into a caf::error of category "eg" with that code and the
// exception's text (actors/wire.hpp: make_error), so that the code travels
// to whoever asked, across nodes too. Header-only, no dependency: every
// folder may include it.

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace eg {

/// What went wrong, for a program to act on (the text says it to a person).
/// Codes 1-6 travel in caf::errors between nodes: never renumber.
enum class errc : uint8_t {
  refused = 1,       ///< a handshake or console request that does not prove the secret
  bad_request,       ///< a malformed or unknown command
  unknown_platform,  ///< no platform of that name
  run_over,          ///< the run is over: nothing to control
  unreachable,       ///< the node that must answer cannot be reached
  lost,              ///< part of a message never arrived: nothing of it was applied
  bad_config,        ///< a cluster file or override that cannot be used
  bad_data,          ///< a data directory or file that cannot be read as it claims to be
  bad_message,       ///< a message that is not one of this protocol (foreign, truncated)
  mismatch,          ///< a model, tensor, shape or layout that does not fit what it meets
  storage_failed,    ///< a store that cannot be opened, read or written; a corrupt record
  network_failed,    ///< a socket, lane or connection that failed
  system_failed,     ///< the operating system refused (a process, a CPU limit, random bytes)
  invalid_argument,  ///< a call outside a plain class's contract (a bug where it happens)
  internal,          ///< an exception of no layer of the project (a library's, or a bug)
  diverged,          ///< training ran away and could not be brought back (split runs)
};

inline const char* to_string(errc c) {
  switch (c) {
    case errc::refused: return "refused";
    case errc::bad_request: return "bad_request";
    case errc::unknown_platform: return "unknown_platform";
    case errc::run_over: return "run_over";
    case errc::unreachable: return "unreachable";
    case errc::lost: return "lost";
    case errc::bad_config: return "bad_config";
    case errc::bad_data: return "bad_data";
    case errc::bad_message: return "bad_message";
    case errc::mismatch: return "mismatch";
    case errc::storage_failed: return "storage_failed";
    case errc::network_failed: return "network_failed";
    case errc::system_failed: return "system_failed";
    case errc::invalid_argument: return "invalid_argument";
    case errc::internal: return "internal";
    case errc::diverged: return "diverged";
  }
  return "unknown";
}

/// The code an exception of the project carries (a mixin beside its
/// standard base, so that `catch (const std::invalid_argument&)` and the
/// like still catch it).
class coded {
public:
  errc code() const noexcept { return code_; }

protected:
  explicit coded(errc c) noexcept : code_(c) {}
  ~coded() = default;

private:
  errc code_;
};

/// An exception of the standard class `Base` carrying `Code`.
template <errc Code, class Base = std::runtime_error>
class failure : public Base, public coded {
public:
  explicit failure(const std::string& what) : Base(what), coded(Code) {}
  explicit failure(const char* what) : Base(what), coded(Code) {}
};

/// A model, tensor, shape or layout that does not fit (gossip merges,
/// checkpoints, messages of another model).
using mismatch_error = failure<errc::mismatch, std::invalid_argument>;
/// A call outside a plain class's contract.
using argument_error = failure<errc::invalid_argument, std::invalid_argument>;
/// A file of the project's that cannot be written, or read back as written
/// (a checkpoint, a report, a stored record).
using storage_failure = failure<errc::storage_failed>;
/// The operating system refused (starting a process, limiting the CPU).
using system_failure = failure<errc::system_failed>;
/// A choice that names nothing known (a registry's, config/registry.hpp).
using unknown_name = failure<errc::bad_config, std::invalid_argument>;

/// The code of `e`: its own, or errc::internal for an exception that is
/// none of the project's.
inline errc code_of(const std::exception& e) noexcept {
  auto* c = dynamic_cast<const coded*>(&e);
  return c ? c->code() : errc::internal;
}

/// "[code] text": how logs name an exception, so that the kind shows
/// beside the cause.
inline std::string describe(const std::exception& e) {
  return std::string{"["} + to_string(code_of(e)) + "] " + e.what();
}

} // namespace eg
