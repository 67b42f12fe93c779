#include "messages/secret.hpp"
#include "common/error.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <cstdio>

namespace eg::messages {
namespace {

std::string keyed_digest(const std::string& secret, const std::string& text) {
  if (secret.empty())
    return {};
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), mac, &len);
  std::string hex(2 * len, '0');
  for (unsigned i = 0; i < len; ++i)
    std::snprintf(&hex[2 * i], 3, "%02x", mac[i]);
  return hex;
}

} // namespace

std::string make_nonce() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1)
    throw failure<errc::system_failed>("no random bytes for a handshake nonce (OpenSSL RAND_bytes)");
  std::string hex(2 * sizeof raw, '0');
  for (size_t i = 0; i < sizeof raw; ++i)
    std::snprintf(&hex[2 * i], 3, "%02x", raw[i]);
  return hex;
}

std::string proof(const std::string& secret, const std::string& purpose,
                  const std::string& cluster_id, const std::string& who,
                  const std::string& challenge, const std::string& nonce) {
  return keyed_digest(secret, "edgegossip " + purpose + " " + cluster_id + " " + who + " "
                                + challenge + " " + nonce);
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}
} // namespace

challenges::challenges(size_t capacity, double lifetime_seconds)
  : capacity_(std::max<size_t>(1, capacity)), lifetime_(lifetime_seconds) {}

std::string challenges::issue() {
  if (open_.size() >= capacity_)
    open_.erase(open_.begin());  // the oldest
  open_.emplace_back(make_nonce(), steady_seconds());
  return open_.back().first;
}

bool challenges::redeem(const std::string& nonce) {
  const double now = steady_seconds();
  bool valid = false;
  for (auto i = open_.begin(); i != open_.end();) {
    const bool match = !valid && same_digest(i->first, nonce);
    if (match)
      valid = now - i->second <= lifetime_;
    if (match || now - i->second > lifetime_)
      i = open_.erase(i);
    else
      ++i;
  }
  return valid;
}

bool same_digest(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace eg::messages
