#pragma once
// Framing of the records storage/ writes as Cap'n Proto messages: a 4-byte
// magic naming the kind of record, a uint32 format version and a CRC-32 of
// the body (both little-endian), then the body. The checksum catches torn or
// damaged records so that readers fall back to older ones instead of
// restoring garbage. Internal to storage/.

#include <capnp/blob.h>
#include <capnp/message.h>
#include <kj/array.h>

#include <optional>
#include <string>

namespace eg::storage::record {

/// The framed record of `message`.
std::string frame(const char (&magic)[5], capnp::MessageBuilder& message);

/// The body of `bytes` as word-aligned memory, or nullopt with the reason in
/// `problem` (too short, not a `kind` record, another format version,
/// checksum mismatch).
std::optional<kj::Array<capnp::word>> unframe(const std::string& bytes, const char (&magic)[5],
                                              const char* kind, std::string& problem);

/// Reader options for a body of `words` words: traversal bounded by its size.
capnp::ReaderOptions reader_options(size_t words);

/// Bytes of a string as a Cap'n Proto Data field, without copying.
inline capnp::Data::Reader data(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

/// A Text or Data field as a string.
inline std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }
inline std::string str(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

} // namespace eg::storage::record
