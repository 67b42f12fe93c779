// `edgegossip bench transport`: model weights between two node processes on
// 127.0.0.1, the way gossip moves them (messages::encode, a CAF message of
// bytes through the middleman, messages::decode on the other side), against
// a plain TCP socket copy of the same bytes between the same two processes,
// in the same run. The second process is this binary started again with a
// hidden option; it hosts a published echo actor and a raw socket server.

#include "bench/bench.hpp"

#include "actors/interfaces.hpp"
#include "actors/node/runtime.hpp"
#include "train/loans.hpp"
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "messages/codec.hpp"
#include "messages/lane.hpp"
#include "messages/socket.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <torch/torch.h>

#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace eg::bench {
namespace {

using clock_type = std::chrono::steady_clock;
// The raw bytes the bench measures (the echo decodes them itself).
using bytes = std::vector<char>;
using shared_bytes = messages::shared_buffer;
const std::string cluster_id = "bench-transport";

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// -- raw sockets ---------------------------------------------------------------

/// The raw side of the peer: each message is an 8-byte length and that many
/// bytes, read into one buffer that is reused; answered with the length.
void serve_raw(int listener) {
  ::pthread_setname_np(::pthread_self(), "bench.raw");
  messages::socket_fd fd(::accept(listener, nullptr, nullptr));
  if (!fd)
    return;
  messages::tune_socket(fd.get(), 0, 0);
  // One buffer, grown when a message is larger, of the same storage as the
  // lane's (whole huge pages for large ones): the two differ in framing and
  // threads, not in the memory the kernel copies into.
  messages::buffer buf;
  try {
    for (uint64_t n; messages::read_all(fd.get(), &n, sizeof n);) {
      if (n > buf.size())
        buf = messages::buffer(static_cast<size_t>(n));
      if (!messages::read_all(fd.get(), buf.data(), n))
        break;
      messages::write_all(fd.get(), &n, sizeof n);
    }
  } catch (const messages::socket_error&) {
  }
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
  auto model = learning::make_classifier("lenet5", 1, learning::fashion_mnist_shape());
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
  return {{cluster_id, messages::protocol_version, "sender"}, std::move(w), nullptr};
}

// -- the node side of the peer ------------------------------------------------

const std::string peer_node = "peer", bench_node = "bench";

using echo_actor = caf::typed_actor<
  // Through the middleman: encoded weights, decoded and checked; answers the
  // tensor bytes and the seconds decoding took.
  caf::replies_to<actors::gossip_atom, bytes>::with<uint64_t, double>,
  // From the weights lane: the same, answered on the lane.
  caf::reacts_to<actors::gossip_atom, shared_bytes>>;

struct echo_state {
  std::shared_ptr<messages::lane> lane;
  messages::lane_endpoint reply_to;  // the bench process's lane
};

/// The tensor bytes of a weights message (decoded and checked), or 0.
uint64_t tensor_bytes(const char* data, size_t size) {
  auto env = messages::decode(data, size, cluster_id);
  auto* w = std::get_if<messages::weights>(&env.payload);
  uint64_t n = 0;
  if (w)
    for (auto& t : w->tensors)
      n += t.bytes;
  return n;
}

echo_actor::behavior_type echo(echo_actor::stateful_pointer<echo_state> self,
                               std::shared_ptr<messages::lane> lane,
                               messages::lane_endpoint reply_to) {
  self->state.lane = std::move(lane);
  self->state.reply_to = std::move(reply_to);
  return {
    [](actors::gossip_atom, const bytes& payload) -> caf::result<uint64_t, double> {
      auto start = clock_type::now();
      uint64_t n = tensor_bytes(payload.data(), payload.size());
      if (n == 0)
        return caf::make_error(caf::sec::unexpected_message);
      return {n, seconds_since(start)};
    },
    [self](actors::gossip_atom, const shared_bytes& payload) {
      auto start = clock_type::now();
      uint64_t n = tensor_bytes(payload->data(), payload->size());
      double took = seconds_since(start);
      messages::buffer answer(sizeof n + sizeof took);
      std::memcpy(answer.data(), &n, sizeof n);
      std::memcpy(answer.data() + sizeof n, &took, sizeof took);
      self->state.lane->send(self->state.reply_to, bench_node,
                             std::make_shared<const messages::buffer>(std::move(answer)));
    },
  };
}

void node_settings(caf::actor_system_config& cfg) {
  // As actors/node/runtime.cpp configures every node.
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads",
          static_cast<size_t>(std::max(2u, std::thread::hardware_concurrency())));
  cfg.set("scheduler.max-throughput", size_t{1});
  actors::tune_scheduler(cfg);
  cfg.set("logger.verbosity", caf::atom("quiet"));
}

messages::lane_options lane_settings(const std::string& node) {
  messages::lane_options o;
  o.cluster_id = cluster_id;
  o.node = node;
  o.secret = "bench";  // as a cluster with a secret: the handshake is checked
  // A burst puts up to 64 messages in flight at once, and each is to arrive:
  // no frame is pushed out of the queue or skipped for its age.
  o.max_queued_messages = 1024;
  o.max_wait_ms = 0;
  return o;
}

/// The second process: a weights lane and a published echo actor as a node
/// has them, and a raw socket server. Prints "ports CAF RAW LANE", reads the
/// bench's lane port from standard input, runs until that closes, then
/// prints "cache REUSED ALLOCATED" (its buffer cache's counts).
int peer() {
  actors::tune_allocator();
  caf::actor_system_config cfg;
  node_settings(cfg);
  caf::actor_system sys{cfg};
  auto lane = std::make_shared<messages::lane>(lane_settings(peer_node));
  auto listener = messages::listen_tcp("127.0.0.1", 0);
  auto raw_port = messages::bound_port(listener.get());
  std::thread raw([l = listener.get()] { serve_raw(l); });
  auto publish = [&](const echo_actor& e) {
    auto port = sys.middleman().publish(e, 0, "127.0.0.1", true);
    if (!port)
      throw std::runtime_error("transport peer: cannot publish: " + sys.render(port.error()));
    return *port;
  };
  std::printf("lane %u\n", static_cast<unsigned>(lane->port()));
  std::fflush(stdout);
  unsigned bench_lane = 0;
  if (std::scanf("%u", &bench_lane) != 1)
    return 1;
  auto e = sys.spawn(echo, lane, messages::lane_endpoint{bench_node, "127.0.0.1",
                                                         static_cast<uint16_t>(bench_lane)});
  auto caf_port = publish(e);
  lane->start([e](const std::string&, const std::string&, shared_bytes m) {
    caf::anon_send(e, actors::gossip_atom::value, std::move(m));
  });
  std::printf("ports %u %u\n", static_cast<unsigned>(caf_port), static_cast<unsigned>(raw_port));
  std::fflush(stdout);
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  ::shutdown(listener.get(), SHUT_RDWR);
  raw.detach();
  lane->stop();
  auto cache = messages::buffer_cache();
  std::printf("cache %zu %zu\n", cache.reused, cache.allocated);
  std::fflush(stdout);
  caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
  std::_Exit(0);  // the raw thread may still block in read
}

/// Starts the peer process; returns its pid, the write end of its stdin and
/// the ports.
struct peer_process {
  pid_t pid = -1;
  int stdin_fd = -1;
  int stdout_fd = -1;
  uint16_t caf_port = 0;
  uint16_t raw_port = 0;
  uint16_t lane_port = 0;
};

void check(bool ok, const char* what) {
  if (!ok)
    throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

std::string read_line(int fd) {
  std::string line;
  for (char c; ::read(fd, &c, 1) == 1 && c != '\n';)
    line += c;
  return line;
}

peer_process start_peer(uint16_t bench_lane) {
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
  peer_process p;
  p.pid = pid;
  p.stdin_fd = in[1];
  auto line = read_line(out[0]);
  unsigned a = 0, b = 0;
  if (std::sscanf(line.c_str(), "lane %u", &a) != 1)
    throw std::runtime_error("transport peer did not start: '" + line + "'");
  p.lane_port = static_cast<uint16_t>(a);
  auto mine = std::to_string(bench_lane) + "\n";
  messages::write_all(p.stdin_fd, mine.data(), mine.size());
  line = read_line(out[0]);
  p.stdout_fd = out[0];
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
  std::vector<double> raw, lane, caf, encode, decode;
};

/// The answers that come back on the bench process's lane.
struct answers {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<shared_bytes> queue;

  void put(shared_bytes m) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(m));
    arrived.notify_one();
  }
  /// The next answer: tensor bytes and decode seconds (throws after 60 s).
  std::pair<uint64_t, double> take() {
    std::unique_lock<std::mutex> lock(mutex);
    if (!arrived.wait_for(lock, std::chrono::seconds(60), [&] { return !queue.empty(); }))
      throw std::runtime_error("transport: no answer on the weights lane within 60 s");
    auto m = std::move(queue.front());
    queue.erase(queue.begin());
    uint64_t n = 0;
    double took = 0;
    if (m->size() == sizeof n + sizeof took) {
      std::memcpy(&n, m->data(), sizeof n);
      std::memcpy(&took, m->data() + sizeof n, sizeof took);
    }
    return {n, took};
  }
};

void expect(const model_bytes& m, uint64_t got, const char* path) {
  if (got != m.bytes())
    throw std::runtime_error(std::string("transport (") + path + "): the peer decoded "
                             + std::to_string(got) + " of " + std::to_string(m.bytes())
                             + " bytes");
}

/// The bench process's ends of the three ways to the peer, and bursts of
/// messages over each.
struct ways {
  messages::lane& lane;
  answers& back;
  const messages::lane_endpoint& to_peer;
  caf::actor_system& sys;
  const echo_actor& remote;
  messages::socket_fd& raw;
  caf::scoped_actor& self;
  // The model's tensors are lent to the messages as a platform lends its
  // parameters (train/loans.hpp); they do not change during a burst, so
  // nothing is copied: a platform pays one copy only for a message still
  // queued when it next writes its parameters.
  learning::parameter_loans loans;

  // A burst: `count` gossip messages as the nodes send them (each encoded
  // in pieces that reference the tensors, queued on the weights lane and
  // written with one gather write, the sender going on at once), decoded one by one by an actor on the peer, each answered
  // on the peer's lane; done when the last answer is in. With count 1 it
  // is one round trip.
  void lane_burst(const model_bytes& m, int count, round_times& r) {
    auto start = clock_type::now();
    for (int k = 0; k < count; ++k) {
      auto t = clock_type::now();
      auto buf = std::make_shared<const messages::gathered>(messages::encode_gathered(
        as_weights(m, static_cast<uint64_t>(k)), loans.lend(m.tensors)));
      r.encode.push_back(seconds_since(t));
      if (!lane.send(to_peer, "echo", std::move(buf)))
        throw std::runtime_error("transport: the weights lane dropped a message");
    }
    for (int k = 0; k < count; ++k) {
      auto [got, decode_seconds] = back.take();
      r.decode.push_back(decode_seconds);
      expect(m, got, "weights lane");
    }
    r.lane.push_back(seconds_since(start) / count);
  }
  // The same through the CAF middleman (cluster.transport = "middleman"):
  // the echo actor's answers come back as messages.
  void caf_burst(const model_bytes& m, int count, round_times& r) {
    auto start = clock_type::now();
    for (int k = 0; k < count; ++k)
      self->send(remote, actors::gossip_atom::value,
                 messages::encode(as_weights(m, static_cast<uint64_t>(k))));
    for (int k = 0; k < count; ++k) {
      uint64_t got = 0;
      self->receive([&](uint64_t n, double) { got = n; },
                    [&](caf::error& e) { throw std::runtime_error("transport: " + sys.render(e)); },
                    caf::after(std::chrono::seconds(60)) >>
                      [&] { throw std::runtime_error("transport: no answer through CAF"); });
      expect(m, got, "middleman");
    }
    r.caf.push_back(seconds_since(start) / count);
  }
  // The same bytes over a plain socket: length and the tensors' bytes per
  // message, written back to back; the peer answers each with its length.
  void raw_burst(const model_bytes& m, int count, round_times& r) {
    auto start = clock_type::now();
    uint64_t n = m.bytes();
    std::vector<iovec> iov{{&n, sizeof n}};
    for (auto& x : m.tensors)
      iov.push_back({x.data_ptr(), static_cast<size_t>(x.nbytes())});
    for (int k = 0; k < count; ++k)
      messages::writev_all(raw.get(), iov);
    for (int k = 0; k < count; ++k) {
      uint64_t ack = 0;
      if (!messages::read_all(raw.get(), &ack, sizeof ack) || ack != n)
        throw std::runtime_error("transport: raw peer went away");
    }
    r.raw.push_back(seconds_since(start) / count);
  }
  // Alternate which goes first so drift of the machine hits all alike.
  void measure(const model_bytes& m, int count, int repeats, round_times& r) {
    round_times warm;  // connections, buffers and the allocator's pools
    raw_burst(m, count, warm);
    lane_burst(m, count, warm);
    caf_burst(m, count, warm);
    for (int i = 0; i < repeats; ++i)
      switch (i % 3) {
      case 0: raw_burst(m, count, r); lane_burst(m, count, r); caf_burst(m, count, r); break;
      case 1: lane_burst(m, count, r); caf_burst(m, count, r); raw_burst(m, count, r); break;
      default: caf_burst(m, count, r); raw_burst(m, count, r); lane_burst(m, count, r);
      }
  }
};

struct size_case {
  model_bytes model;
  int burst;    // messages in flight at once
  int repeats;  // bursts measured
};

/// LeNet-5 and 4, 40 and 250 MB, each with its burst and repeats.
std::vector<size_case> size_cases(const transport_options& t) {
  // A burst of 4 MB messages is 64 of them (about 80 ms): in bursts of 16
  // (20 ms) the ratio swung from 0.58 to 1.50 between runs, as stalls of
  // the machine of a few ms fell on one way or another.
  std::vector<size_case> cases;
  cases.push_back({lenet5(), 32, t.rounds > 0 ? t.rounds : 20});
  cases.push_back({synthetic(size_t{4} << 20, "4 MB"), 64, t.rounds > 0 ? t.rounds : 10});
  cases.push_back({synthetic(size_t{40} << 20, "40 MB"), 4, t.rounds > 0 ? t.rounds : 6});
  cases.push_back({synthetic(size_t{250} << 20, "250 MB"), 2, t.rounds > 0 ? t.rounds : 3});
  return cases;
}

/// Throughput of each case in bursts, a row each; returns the summary's
/// parts and the worst lane / raw ratio of 4 MB and up in `worst_large`.
std::string throughput(ways& w, const std::vector<size_case>& cases, double& worst_large) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::printf("transport: weights between two processes on 127.0.0.1: the weights lane (Cap'n "
              "Proto codec, as the nodes send gossip) and the CAF 0.17 middleman, against a "
              "plain TCP socket; throughput from bursts of messages sent back to back, medians "
              "of bursts taken in turn; GLIBC_TUNABLES=%s\n",
              tunables ? tunables : "(unset)");
  std::printf("%-8s %11s %11s %10s %10s %7s %10s %7s %11s %11s\n", "model", "bytes",
              "burst x n", "raw MB/s", "lane MB/s", "ratio", "CAF MB/s", "ratio", "encode ms",
              "decode ms");
  std::string summary;
  worst_large = 1e9;
  for (auto& c : cases) {
    round_times r;
    w.measure(c.model, c.burst, c.repeats, r);
    const double mb = static_cast<double>(c.model.bytes()) / 1e6;
    const double raw_s = median(r.raw), lane_s = median(r.lane), caf_s = median(r.caf);
    const double ratio = raw_s / lane_s;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%d x %d", c.burst, c.repeats);
    std::printf("%-8s %11zu %11s %10.0f %10.0f %7.2f %10.0f %7.2f %11.3f %11.3f\n",
                c.model.label.c_str(), c.model.bytes(), shape, mb / raw_s, mb / lane_s, ratio,
                mb / caf_s, raw_s / caf_s, 1e3 * median(r.encode), 1e3 * median(r.decode));
    std::fflush(stdout);
    char part[96];
    std::snprintf(part, sizeof part, " %s %.2f (middleman %.2f);", c.model.label.c_str(), ratio,
                  raw_s / caf_s);
    summary += part;
    if (c.model.bytes() >= (size_t{4} << 20) - (size_t{64} << 10))
      worst_large = std::min(worst_large, ratio);
  }
  return summary;
}

/// Round trips, one message at a time: latency, and what throughput a
/// sender that waits for each answer sees. Returns LeNet-5's times.
round_times round_trips(ways& w, const std::vector<size_case>& cases) {
  std::printf("one message at a time (round trips, medians):\n");
  round_times lenet_times;
  for (auto& c : cases) {
    round_times r;
    w.measure(c.model, 1, &c == &cases.front() ? 10 * c.repeats : c.repeats, r);
    std::printf("  %-8s raw %9.3f ms, lane %9.3f ms (ratio %.2f), middleman %9.3f ms (%.2f)\n",
                c.model.label.c_str(), 1e3 * median(r.raw), 1e3 * median(r.lane),
                median(r.raw) / median(r.lane), 1e3 * median(r.caf),
                median(r.raw) / median(r.caf));
    if (&c == &cases.front())
      lenet_times = r;
  }
  std::printf("round trip, LeNet-5 weights there and an answer back: lane median %.0f us (p90 "
              "%.0f us), middleman %.0f us, raw socket %.0f us (p90 %.0f us)\n",
              1e6 * median(lenet_times.lane), 1e6 * percentile(lenet_times.lane, 0.9),
              1e6 * median(lenet_times.caf), 1e6 * median(lenet_times.raw),
              1e6 * percentile(lenet_times.raw, 0.9));
  return lenet_times;
}

/// Closes the ways to the peer, waits for it and prints its buffer cache.
void finish_peer(messages::socket_fd& raw, const peer_process& p, messages::lane& lane) {
  raw.close();
  ::close(p.stdin_fd);
  unsigned long long peer_reused = 0, peer_allocated = 0;
  const auto last = read_line(p.stdout_fd);
  ::close(p.stdout_fd);
  int status = 0;
  ::waitpid(p.pid, &status, 0);
  lane.stop();
  if (std::sscanf(last.c_str(), "cache %llu %llu", &peer_reused, &peer_allocated) == 2)
    std::printf("peer process: buffer cache %llu reused, %llu allocated (what the lane and "
                "the raw socket read messages of 1 MB and more into)\n",
                peer_reused, peer_allocated);
}

} // namespace

int transport(const options& opt, const transport_options& t) {
  if (t.peer)
    return peer();
  actors::tune_allocator();  // the same allocator settings as the nodes
  at::set_num_threads(1);
  messages::lane lane(lane_settings(bench_node));
  answers back;
  lane.start([&back](const std::string&, const std::string&, shared_bytes m) {
    back.put(std::move(m));
  });
  auto p = start_peer(lane.port());
  const messages::lane_endpoint to_peer{peer_node, "127.0.0.1", p.lane_port};

  caf::actor_system_config cfg;
  node_settings(cfg);
  caf::actor_system sys{cfg};
  auto remote = sys.middleman().remote_actor<echo_actor>("127.0.0.1", p.caf_port);
  if (!remote)
    throw std::runtime_error("cannot reach the transport peer: " + sys.render(remote.error()));
  auto raw = messages::connect_tcp("127.0.0.1", p.raw_port);
  caf::scoped_actor self{sys};
  ways w{lane, back, to_peer, sys, *remote, raw, self, {}};

  const auto cases = size_cases(t);
  double worst_large = 1e9;
  const auto summary = throughput(w, cases, worst_large);
  const auto lenet_times = round_trips(w, cases);
  auto ls = lane.stats();
  auto cache = messages::buffer_cache();
  std::printf("bench process: lane %llu frames sent, %llu lost; buffer cache %zu reused, %zu "
              "allocated\n",
              static_cast<unsigned long long>(ls.frames_sent),
              static_cast<unsigned long long>(ls.frames_lost), cache.reused, cache.allocated);

  finish_peer(raw, p, lane);
  std::printf("summary: weights lane throughput / raw socket:%s LeNet-5 round trip %.0f us vs "
              "%.0f us raw; %s (goal >= 0.8 for 4 MB and up, worst %.2f)\n",
              summary.c_str(), 1e6 * median(lenet_times.lane), 1e6 * median(lenet_times.raw),
              worst_large >= 0.8 ? "goal met" : "goal missed", worst_large);
  (void)opt;
  return 0;
}

} // namespace eg::bench
