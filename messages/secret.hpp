#pragma once
// The cluster secret in the handshake: a node proves it knows the secret with
// an HMAC-SHA256 of its cluster id and name keyed by the secret, so the
// secret itself never crosses the network. It keeps strangers out of a
// cluster; it does not encrypt traffic, and a digest seen on the wire could
// be replayed by someone on the path (use a trusted network).

#include <string>

namespace eg::messages {

/// Hex HMAC-SHA256(secret, "edgegossip hello <cluster id> <node>"); "" when
/// `secret` is empty (no secret configured).
std::string hello_digest(const std::string& secret, const std::string& cluster_id,
                         const std::string& node);

/// Hex HMAC-SHA256(secret, "edgegossip lane <cluster id> <node>"): what a
/// node presents when it opens a weights lane connection (messages/lane.hpp);
/// "" when `secret` is empty.
std::string lane_digest(const std::string& secret, const std::string& cluster_id,
                        const std::string& node);

/// Compares two digests in time independent of where they differ.
bool same_digest(const std::string& a, const std::string& b);

} // namespace eg::messages
