#include "messages/secret.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdio>

namespace eg::messages {

std::string hello_digest(const std::string& secret, const std::string& cluster_id,
                         const std::string& node) {
  if (secret.empty())
    return {};
  std::string text = "edgegossip hello " + cluster_id + " " + node;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), mac, &len);
  std::string hex(2 * len, '0');
  for (unsigned i = 0; i < len; ++i)
    std::snprintf(&hex[2 * i], 3, "%02x", mac[i]);
  return hex;
}

bool same_digest(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

} // namespace eg::messages
