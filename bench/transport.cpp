// `edgegossip bench transport`: model weights between two node processes on
// 127.0.0.1, the way gossip moves them (messages::encode, a CAF message of
// bytes through the middleman, messages::decode on the other side), against
// a plain TCP socket copy of the same bytes between the same two processes,
// in the same run. The second process is this binary started again with a
// hidden option; it hosts a published echo actor and a raw socket server.

#include "bench/bench.hpp"

#include "actors/interfaces.hpp"
#include "actors/runtime.hpp"
#include "learning/model.hpp"
#include "messages/codec.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <torch/torch.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace eg::bench {
namespace {

using clock_type = std::chrono::steady_clock;
const std::string cluster_id = "bench-transport";

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// -- raw sockets ---------------------------------------------------------------

void check(bool ok, const char* what) {
  if (!ok)
    throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

void write_all(int fd, const void* data, size_t n) {
  auto p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    check(w > 0, "write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

/// Writes several buffers with as few system calls as the kernel allows.
void writev_all(int fd, std::vector<iovec> iov) {
  size_t first = 0;
  while (first < iov.size()) {
    int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t w = ::writev(fd, iov.data() + first, count);
    if (w < 0 && errno == EINTR)
      continue;
    check(w > 0, "writev");
    auto left = static_cast<size_t>(w);
    while (first < iov.size() && left >= iov[first].iov_len)
      left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}

bool read_all(int fd, void* data, size_t n) {
  auto p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Listens on 127.0.0.1 (a free port); returns the socket and its port.
std::pair<int, uint16_t> listen_loopback() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  check(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  check(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind");
  check(::listen(fd, 4) == 0, "listen");
  socklen_t len = sizeof addr;
  check(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
  return {fd, ntohs(addr.sin_port)};
}

int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  check(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  check(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "connect");
  no_delay(fd);
  return fd;
}

/// The raw side of the peer: each message is an 8-byte length and that many
/// bytes, read into one buffer that is reused; answered with the length.
void serve_raw(int listener) {
  int fd = ::accept(listener, nullptr, nullptr);
  if (fd < 0)
    return;
  no_delay(fd);
  std::unique_ptr<char[]> buf;
  uint64_t capacity = 0;
  for (uint64_t n; read_all(fd, &n, sizeof n);) {
    if (n > capacity) {
      buf.reset(new char[n]);  // not zeroed: the socket writes every byte
      capacity = n;
    }
    if (!read_all(fd, buf.get(), n))
      break;
    write_all(fd, &n, sizeof n);
  }
  ::close(fd);
}

// -- the model's bytes ---------------------------------------------------------

/// The parameters of a model of about `bytes` bytes as float32 tensors: the
/// real LeNet-5 for its own size, else eight layers (weight and bias each).
struct model_bytes {
  std::string label;
  std::vector<torch::Tensor> tensors;
  size_t bytes() const {
    size_t n = 0;
    for (auto& t : tensors)
      n += static_cast<size_t>(t.nbytes());
    return n;
  }
};

model_bytes lenet5() {
  model_bytes m;
  m.label = "LeNet-5";
  auto model = learning::make_classifier("lenet5", 1);
  for (auto& p : model->parameters())
    m.tensors.push_back(p.detach().contiguous());
  return m;
}

model_bytes synthetic(size_t bytes, const std::string& label) {
  model_bytes m;
  m.label = label;
  const int64_t layers = 8, floats = static_cast<int64_t>(bytes / 4);
  const int64_t bias = 1024, weight = floats / layers - bias;
  for (int64_t i = 0; i < layers; ++i) {
    m.tensors.push_back(torch::randn({weight / 1024, 1024}));
    m.tensors.push_back(torch::randn({bias}));
  }
  return m;
}

messages::envelope as_weights(const model_bytes& m, uint64_t iteration) {
  messages::weights w;
  w.gossip_weight = 0.5;
  w.iteration = iteration;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    auto& t = m.tensors[i];
    messages::tensor_view v;
    v.name = "layer" + std::to_string(i);
    v.shape = t.sizes().vec();
    v.data = t.data_ptr();
    v.bytes = static_cast<size_t>(t.nbytes());
    w.tensors.push_back(std::move(v));
  }
  return {{cluster_id, messages::protocol_version, "sender"}, std::move(w)};
}

// -- the CAF side of the peer --------------------------------------------------

using echo_actor = caf::typed_actor<
  // Encoded weights: decoded and checked; answers the tensor bytes and the
  // seconds decoding took.
  caf::replies_to<actors::gossip_atom, actors::bytes>::with<uint64_t, double>>;

echo_actor::behavior_type echo(echo_actor::pointer) {
  return {
    [](actors::gossip_atom, const actors::bytes& payload) -> caf::result<uint64_t, double> {
      auto start = clock_type::now();
      auto env = messages::decode(payload, cluster_id);
      auto* w = std::get_if<messages::weights>(&env.payload);
      if (!w)
        return caf::make_error(caf::sec::unexpected_message);
      uint64_t n = 0;
      for (auto& t : w->tensors)
        n += t.bytes;
      return {n, seconds_since(start)};
    },
  };
}

void node_settings(caf::actor_system_config& cfg) {
  // As actors/runtime.cpp configures every node.
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads",
          static_cast<size_t>(std::max(2u, std::thread::hardware_concurrency())));
  cfg.set("scheduler.max-throughput", size_t{1});
  cfg.set("logger.verbosity", caf::atom("quiet"));
}

/// The second process: publishes the echo actor and serves raw sockets;
/// prints "ports CAF RAW" and runs until its standard input closes.
int peer() {
  actors::tune_allocator();
  caf::actor_system_config cfg;
  node_settings(cfg);
  caf::actor_system sys{cfg};
  auto e = sys.spawn(echo);
  auto port = sys.middleman().publish(e, 0, "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "transport peer: cannot publish: %s\n", sys.render(port.error()).c_str());
    return 1;
  }
  auto [listener, raw_port] = listen_loopback();
  std::thread raw([l = listener] { serve_raw(l); });
  std::printf("ports %u %u\n", static_cast<unsigned>(*port), static_cast<unsigned>(raw_port));
  std::fflush(stdout);
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  ::shutdown(listener, SHUT_RDWR);
  ::close(listener);
  raw.detach();
  caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
  std::_Exit(0);  // the raw thread may still block in read
}

/// Starts the peer process; returns its pid, the write end of its stdin and
/// the two ports.
struct peer_process {
  pid_t pid = -1;
  int stdin_fd = -1;
  uint16_t caf_port = 0;
  uint16_t raw_port = 0;
};

peer_process start_peer() {
  int in[2], out[2];
  check(::pipe(in) == 0 && ::pipe(out) == 0, "pipe");
  pid_t pid = ::fork();
  check(pid >= 0, "fork");
  if (pid == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::close(in[1]);
    ::close(out[0]);
    ::execl("/proc/self/exe", "edgegossip", "bench", "transport", "--transport-peer",
            static_cast<char*>(nullptr));  // inherits GLIBC_TUNABLES, if set
    std::_Exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  std::string line;
  for (char c; ::read(out[0], &c, 1) == 1 && c != '\n';)
    line += c;
  ::close(out[0]);
  peer_process p;
  p.pid = pid;
  p.stdin_fd = in[1];
  unsigned a = 0, b = 0;
  if (std::sscanf(line.c_str(), "ports %u %u", &a, &b) != 2)
    throw std::runtime_error("transport peer did not start: '" + line + "'");
  p.caf_port = static_cast<uint16_t>(a);
  p.raw_port = static_cast<uint16_t>(b);
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

struct round_times {
  std::vector<double> raw, caf, encode, decode;
};

} // namespace

int transport(const options& opt, const transport_options& t) {
  if (t.peer)
    return peer();
  actors::tune_allocator();  // the same allocator settings as the nodes
  at::set_num_threads(1);
  auto p = start_peer();

  caf::actor_system_config cfg;
  node_settings(cfg);
  caf::actor_system sys{cfg};
  auto remote = sys.middleman().remote_actor<echo_actor>("127.0.0.1", p.caf_port);
  if (!remote)
    throw std::runtime_error("cannot reach the transport peer: " + sys.render(remote.error()));
  int raw = connect_loopback(p.raw_port);
  caf::scoped_actor self{sys};

  // One gossip message through CAF: encode, send, decoded on the peer, ack.
  auto caf_round = [&](const model_bytes& m, uint64_t it, round_times& r) {
    auto start = clock_type::now();
    auto buf = messages::encode(as_weights(m, it));
    r.encode.push_back(seconds_since(start));
    uint64_t got = 0;
    self->request(*remote, caf::infinite, actors::gossip_atom::value, std::move(buf))
      .receive(
        [&](uint64_t n, double decode_seconds) {
          got = n;
          r.decode.push_back(decode_seconds);
        },
        [&](caf::error& e) { throw std::runtime_error("transport: " + sys.render(e)); });
    r.caf.push_back(seconds_since(start));
    if (got != m.bytes())
      throw std::runtime_error("transport: the peer decoded " + std::to_string(got) + " of "
                               + std::to_string(m.bytes()) + " bytes");
  };
  // The same bytes over a plain socket: length, the tensors' bytes, ack.
  auto raw_round = [&](const model_bytes& m, round_times& r) {
    auto start = clock_type::now();
    uint64_t n = m.bytes();
    std::vector<iovec> iov{{&n, sizeof n}};
    for (auto& x : m.tensors)
      iov.push_back({x.data_ptr(), static_cast<size_t>(x.nbytes())});
    writev_all(raw, iov);
    uint64_t ack = 0;
    if (!read_all(raw, &ack, sizeof ack) || ack != n)
      throw std::runtime_error("transport: raw peer went away");
    r.raw.push_back(seconds_since(start));
  };

  struct size_case {
    model_bytes model;
    int rounds;
  };
  std::vector<size_case> cases;
  cases.push_back({lenet5(), t.rounds > 0 ? t.rounds : 300});
  cases.push_back({synthetic(size_t{4} << 20, "4 MB"), t.rounds > 0 ? t.rounds : 40});
  cases.push_back({synthetic(size_t{40} << 20, "40 MB"), t.rounds > 0 ? t.rounds : 10});
  cases.push_back({synthetic(size_t{250} << 20, "250 MB"), t.rounds > 0 ? t.rounds : 4});

  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::printf("transport: weights between two processes on 127.0.0.1; CAF 0.17 middleman + "
              "Cap'n Proto codec against a plain TCP socket, rounds interleaved, medians; "
              "GLIBC_TUNABLES=%s\n",
              tunables ? tunables : "(unset)");
  std::printf("%-8s %11s %7s %12s %12s %7s %10s %10s %11s %11s\n", "model", "bytes", "rounds",
              "raw MB/s", "codec MB/s", "ratio", "raw ms", "codec ms", "encode ms", "decode ms");
  std::string summary;
  double worst_large = 1e9;
  round_times lenet_times;
  for (auto& c : cases) {
    round_times r;
    // Warm-up: connections, buffers and the allocator's pools.
    round_times warm;
    for (int i = 0; i < 2; ++i) {
      raw_round(c.model, warm);
      caf_round(c.model, 0, warm);
    }
    for (int i = 0; i < c.rounds; ++i) {
      // Alternate which goes first so drift of the machine hits both alike.
      if (i % 2 == 0) {
        raw_round(c.model, r);
        caf_round(c.model, static_cast<uint64_t>(i), r);
      } else {
        caf_round(c.model, static_cast<uint64_t>(i), r);
        raw_round(c.model, r);
      }
    }
    const double mb = static_cast<double>(c.model.bytes()) / 1e6;
    const double raw_s = median(r.raw), caf_s = median(r.caf);
    const double ratio = raw_s / caf_s;
    std::printf("%-8s %11zu %7d %12.0f %12.0f %7.2f %10.3f %10.3f %11.3f %11.3f\n",
                c.model.label.c_str(), c.model.bytes(), c.rounds, mb / raw_s, mb / caf_s, ratio,
                1e3 * raw_s, 1e3 * caf_s, 1e3 * median(r.encode), 1e3 * median(r.decode));
    std::fflush(stdout);
    char part[96];
    std::snprintf(part, sizeof part, " %s %.2f;", c.model.label.c_str(), ratio);
    summary += part;
    if (c.model.bytes() >= (size_t{4} << 20) - (size_t{64} << 10))
      worst_large = std::min(worst_large, ratio);
    if (&c == &cases.front())
      lenet_times = r;
  }
  std::printf("round trip, LeNet-5 weights there and an 8-byte answer back: codec median %.0f us "
              "(p90 %.0f us), raw socket median %.0f us (p90 %.0f us)\n",
              1e6 * median(lenet_times.caf), 1e6 * percentile(lenet_times.caf, 0.9),
              1e6 * median(lenet_times.raw), 1e6 * percentile(lenet_times.raw, 0.9));

  ::close(raw);
  ::close(p.stdin_fd);
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  std::printf("summary: transport throughput / raw socket:%s LeNet-5 round trip %.0f us vs "
              "%.0f us raw; %s (goal >= 0.8 for 4 MB and up, worst %.2f)\n",
              summary.c_str(), 1e6 * median(lenet_times.caf), 1e6 * median(lenet_times.raw),
              worst_large >= 0.8 ? "goal met" : "goal missed", worst_large);
  (void)opt;
  return 0;
}

} // namespace eg::bench
