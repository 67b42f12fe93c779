// CAF 0.17's OpenSSL transport (libcaf_openssl) calls SSL_get_error() after
// SSL_read/SSL_write/SSL_accept/SSL_connect without clearing the thread's
// OpenSSL error queue first, which OpenSSL requires (SSL_get_error(3): "the
// current thread's error queue must be empty before the TLS/SSL I/O
// operation is attempted"). All of a node's connections share the
// middleman's thread, so one stranger's failed TLS handshake left an error
// there, and the next healthy connection to merely wait for data
// (SSL_ERROR_WANT_READ) read that error as its own and was closed: a flood of
// bad handshakes at a node's port cut it off from its peers.
//
// These four definitions in the edgegossip binary take precedence over
// libssl's for every library of the process (the binary exports them:
// CMakeLists.txt), clear the queue as OpenSSL asks, and call libssl's own.

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <class F>
F real(const char* name) {
  auto f = reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
  if (!f) {
    std::fprintf(stderr, "edgegossip: libssl has no %s\n", name);
    std::abort();
  }
  return f;
}

} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static auto f = real<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return f(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static auto f = real<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return f(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static auto f = real<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return f(ssl);
}

int SSL_connect(SSL* ssl) {
  static auto f = real<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return f(ssl);
}

} // extern "C"
