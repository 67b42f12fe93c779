#include "messages/secret.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

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

std::string hello_digest(const std::string& secret, const std::string& cluster_id,
                         const std::string& node) {
  return keyed_digest(secret, "edgegossip hello " + cluster_id + " " + node);
}

std::string lane_digest(const std::string& secret, const std::string& cluster_id,
                        const std::string& node) {
  return keyed_digest(secret, "edgegossip lane " + cluster_id + " " + node);
}

bool same_digest(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace eg::messages
