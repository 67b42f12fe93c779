#pragma once
// The cluster secret in the handshakes: challenge and response. The side
// that accepts a connection hands out a fresh random nonce (make_nonce());
// the side that dials answers with its own nonce and proof() over both, an
// HMAC-SHA256 keyed by the secret, and the acceptor answers with its proof
// over the two nonces the other way round. The secret itself never crosses
// the network, and a proof seen on the wire is worth nothing later: the
// nonce it answers is used once. It keeps strangers out of a cluster; it
// does not encrypt traffic (cluster.tls does).

#include <string>
#include <utility>
#include <vector>

namespace eg::messages {

/// 32 random bytes (OpenSSL's RAND_bytes) in hex: a challenge, used once.
std::string make_nonce();

/// Hex HMAC-SHA256(secret, "edgegossip <purpose> <cluster id> <who>
/// <challenge> <response nonce>"): `who` proves it knows the secret in
/// answer to `challenge` (the other side's nonce), binding its own nonce
/// `nonce` into the proof. "" when `secret` is empty (no secret configured).
std::string proof(const std::string& secret, const std::string& purpose,
                  const std::string& cluster_id, const std::string& who,
                  const std::string& challenge, const std::string& nonce);

/// The nonces a side has handed out and not yet seen answered: at most
/// `capacity` (the oldest forgotten first), each valid once and for
/// `lifetime_seconds`. Not thread-safe.
class challenges {
public:
  explicit challenges(size_t capacity = 256, double lifetime_seconds = 30);
  /// A fresh nonce, remembered.
  std::string issue();
  /// Whether `nonce` was issued here, is still valid and was not used yet;
  /// it is used up either way.
  bool redeem(const std::string& nonce);

private:
  size_t capacity_;
  double lifetime_;
  std::vector<std::pair<std::string, double>> open_;  // nonce, issued (steady seconds)
};

/// Compares two digests in time independent of where they differ.
bool same_digest(const std::string& a, const std::string& b);

} // namespace eg::messages
