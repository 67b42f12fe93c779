#include "actors/node/metrics.hpp"
#include "common/error.hpp"

#include "messages/codec.hpp"
#include "messages/lane.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace eg::actors {

namespace pr = prometheus;

namespace {

pr::MetricFamily family(const char* name, const char* help, pr::MetricType type, double value) {
  pr::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  pr::ClientMetric m;
  if (type == pr::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f;
}

/// The figures read at each scrape.
class live_figures : public pr::Collectable {
public:
  explicit live_figures(metrics_sources s) : sources_(std::move(s)) {}

  void watch_lane(std::weak_ptr<messages::lane> l) {
    std::lock_guard<std::mutex> lock(mutex_);
    lane_ = std::move(l);
  }

  std::vector<pr::MetricFamily> Collect() const override {
    using T = pr::MetricType;
    std::vector<pr::MetricFamily> out;
    if (sources_.cpu_limit_cores)
      out.push_back(family("edgegossip_cpu_limit_cores",
                           "The CPU time the node's process may use, in cores (0: no limit)",
                           T::Gauge, sources_.cpu_limit_cores()));
    if (sources_.store_bytes)
      out.push_back(family("edgegossip_store_size_bytes", "Size of the node's store on disk",
                           T::Gauge, static_cast<double>(sources_.store_bytes())));
    if (sources_.checkpoints) {
      const auto c = sources_.checkpoints();
      out.push_back(family("edgegossip_checkpoints_saved_total", "Checkpoints the store wrote",
                           T::Counter, static_cast<double>(c.saved)));
      out.push_back(family("edgegossip_checkpoint_failures_total",
                           "Checkpoints the store could not write", T::Counter,
                           static_cast<double>(c.failed)));
      out.push_back(family("edgegossip_checkpoint_write_seconds_total",
                           "Time spent writing checkpoints", T::Counter, c.seconds));
      out.push_back(family("edgegossip_checkpoint_last_write_seconds",
                           "Time the newest checkpoint took to write", T::Gauge, c.last_seconds));
    }
    std::shared_ptr<messages::lane> lane;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lane = lane_.lock();
    }
    if (lane) {
      const auto s = lane->stats();
      auto d = [](uint64_t x) { return static_cast<double>(x); };
      out.push_back(family("edgegossip_lane_queued_messages",
                           "Messages waiting in the weights lane's queues now", T::Gauge,
                           d(s.frames_queued)));
      out.push_back(family("edgegossip_lane_queued_bytes",
                           "Bytes waiting in the weights lane's queues now", T::Gauge,
                           d(s.bytes_queued)));
      out.push_back(family("edgegossip_lane_sent_messages_total",
                           "Messages the weights lane sent", T::Counter, d(s.frames_sent)));
      out.push_back(family("edgegossip_lane_received_messages_total",
                           "Messages the weights lane received", T::Counter,
                           d(s.frames_received)));
      out.push_back(family("edgegossip_lane_skipped_messages_total",
                           "Messages the weights lane skipped: waited too long, or pushed out of "
                           "a full queue",
                           T::Counter, d(s.frames_skipped)));
      out.push_back(family("edgegossip_lane_lost_messages_total",
                           "Messages the weights lane could not send (peer unreachable or gone, "
                           "lane full)",
                           T::Counter, d(s.frames_lost)));
      out.push_back(family("edgegossip_lane_refused_messages_total",
                           "Messages received malformed, oversized or cut short", T::Counter,
                           d(s.frames_refused)));
      out.push_back(family("edgegossip_lane_refused_connections_total",
                           "Connections to the weights lane refused at the handshake", T::Counter,
                           d(s.connections_refused)));
    }
    return out;
  }

private:
  metrics_sources sources_;
  mutable std::mutex mutex_;
  std::weak_ptr<messages::lane> lane_;
};

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// One HTTP exchange: a request read within 3 s (8 KiB of headers at most,
/// no body), answered (GET or HEAD of /metrics: the page; else 404 or 405)
/// within 5 s, then the connection is closed.
class exchange : public std::enable_shared_from_this<exchange> {
public:
  exchange(tcp::socket socket, const std::function<std::string()>& page, int& open)
      : stream_(std::move(socket)), page_(page), open_(open) {
    ++open_;
  }
  ~exchange() { --open_; }

  void start() {
    parser_.header_limit(8 * 1024);
    parser_.body_limit(0);
    stream_.expires_after(std::chrono::seconds(3));
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec)
                         self->answer();
                     });
  }

private:
  void answer() {
    const auto& req = parser_.get();
    const auto target = std::string(req.target());
    response_.version(req.version());
    response_.keep_alive(false);
    response_.set(http::field::server, "edgegossip");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      response_.result(http::status::method_not_allowed);
      response_.set(http::field::allow, "GET, HEAD");
    } else if (target != "/metrics" && target.rfind("/metrics?", 0) != 0) {
      response_.result(http::status::not_found);
      response_.body() = "edgegossip serves /metrics only\n";
    } else {
      response_.result(http::status::ok);
      response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      if (req.method() == http::verb::get)
        response_.body() = page_();
    }
    response_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(5));
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{16 * 1024};  // its max_size: a longer request is refused
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> response_;
  const std::function<std::string()>& page_;
  int& open_;
};

/// /metrics over HTTP/1.1 with Boost.Beast, on a thread of its own (with
/// the default stack: civetweb, prometheus-cpp's own exposer, starts its
/// threads with a 100 KiB stack, smaller than the static TLS of a process
/// that loads LibTorch and OpenBLAS, and cannot start in a node). At most
/// 16 exchanges at once; more connections are closed at once.
class http_endpoint {
public:
  http_endpoint(const std::string& host, uint16_t port, std::function<std::string()> page)
      : page_(std::move(page)) {
    const std::string address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                                ":" + std::to_string(port);
    try {
      tcp::resolver resolver(io_);
      const tcp::endpoint at = *resolver.resolve(host, std::to_string(port)).begin();
      acceptor_.open(at.protocol());
      acceptor_.set_option(asio::socket_base::reuse_address(true));
      acceptor_.bind(at);
      acceptor_.listen(64);
    } catch (const std::exception& e) {
      throw failure<errc::network_failed>("cannot serve metrics on " + address + " (nodes.metrics_port): " +
                               e.what());
    }
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~http_endpoint() {
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
    });
    io_.stop();
    if (thread_.joinable())
      thread_.join();
  }
  uint16_t port() const { return port_; }

private:
  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted)
        return;
      if (!ec && open_ < 16)
        std::make_shared<exchange>(std::move(socket), page_, open_)->start();
      accept();
    });
  }

  // Outlive io_: the exchanges it still holds when destroyed use them.
  std::function<std::string()> page_;
  int open_ = 0;  // exchanges in progress (on the endpoint's thread only)
  uint16_t port_ = 0;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::thread thread_;
};

} // namespace

struct node_metrics::impl {
  std::shared_ptr<pr::Registry> registry = std::make_shared<pr::Registry>();
  std::shared_ptr<live_figures> live;
  std::unique_ptr<http_endpoint> endpoint;

  pr::Family<pr::Gauge>& gauge(const char* name, const char* help) {
    return pr::BuildGauge().Name(name).Help(help).Register(*registry);
  }
  pr::Family<pr::Counter>& counter(const char* name, const char* help) {
    return pr::BuildCounter().Name(name).Help(help).Register(*registry);
  }

  pr::Family<pr::Gauge>& info = gauge("edgegossip_node_info", "The node: its cluster, name, "
                                                              "version, strategy and model");
  pr::Family<pr::Gauge>& peers =
    gauge("edgegossip_peers", "Peer nodes by state: up (reachable) or down");
  pr::Family<pr::Gauge>& epoch =
    gauge("edgegossip_epoch", "The newest epoch a platform finished (from 1)");
  pr::Family<pr::Counter>& samples =
    counter("edgegossip_samples_trained_total", "Samples a platform trained on");
  pr::Family<pr::Counter>& steps =
    counter("edgegossip_steps_trained_total", "SGD steps a platform took");
  pr::Family<pr::Gauge>& loss =
    gauge("edgegossip_train_loss", "A platform's mean training loss in its newest epoch");
  pr::Family<pr::Gauge>& accuracy = gauge(
    "edgegossip_test_accuracy_ratio", "A platform's model's accuracy on the node's test data, "
                                      "when it was last tested (0 to 1)");
  pr::Family<pr::Gauge>& epoch_seconds =
    gauge("edgegossip_epoch_duration_seconds", "A platform's newest epoch's training time");
  pr::Family<pr::Gauge>& ratio = gauge(
    "edgegossip_plan_ratio", "The share of its data the balancer gave a platform for its "
                             "newest epoch (0 to 1)");
  pr::Family<pr::Gauge>& predicted = gauge(
    "edgegossip_predicted_throughput_samples_per_second",
    "The balancer's prediction of a platform's throughput in its newest epoch");
  pr::Family<pr::Counter>& messages_sent =
    counter("edgegossip_gossip_sent_messages_total", "Gossip messages a platform sent");
  pr::Family<pr::Counter>& messages_received =
    counter("edgegossip_gossip_received_messages_total", "Gossip messages a platform received");
  pr::Family<pr::Counter>& messages_refused = counter(
    "edgegossip_gossip_refused_messages_total", "Gossip messages a platform refused (malformed, "
                                               "another cluster's, of another model)");
  pr::Family<pr::Counter>& rollbacks =
    counter("edgegossip_platform_rollbacks_total",
            "Times a platform went back to its checkpoint because its model ran away");
  pr::Family<pr::Counter>& bytes_sent =
    counter("edgegossip_gossip_sent_bytes_total", "Bytes of gossip a platform sent");
  pr::Family<pr::Counter>& bytes_received =
    counter("edgegossip_gossip_received_bytes_total", "Bytes of gossip a platform received");
};

node_metrics::node_metrics(const std::string& host, uint16_t port, const metrics_identity& who,
                           metrics_sources sources)
    : impl_(std::make_unique<impl>()) {
  impl_->info
    .Add({{"cluster", who.cluster},
          {"node", who.node},
          {"version", who.version},
          {"strategy", who.strategy},
          {"model", who.model}})
    .Set(1);
  impl_->peers.Add({{"state", "up"}}).Set(0);
  impl_->peers.Add({{"state", "down"}}).Set(0);
  impl_->live = std::make_shared<live_figures>(std::move(sources));
  impl_->endpoint = std::make_unique<http_endpoint>(host, port, [this] { return text(); });
}

node_metrics::~node_metrics() = default;

uint16_t node_metrics::port() const { return impl_->endpoint->port(); }

void node_metrics::report(const messages::epoch_report& r) {
  auto& m = *impl_;
  const pr::Labels l{{"platform", r.platform}};
  m.epoch.Add(l).Set(r.epoch);
  m.samples.Add(l).Increment(static_cast<double>(r.samples));
  m.steps.Add(l).Increment(static_cast<double>(r.iterations));
  m.loss.Add(l).Set(r.train_loss);
  if (r.test_accuracy >= 0)
    m.accuracy.Add(l).Set(r.test_accuracy);
  m.epoch_seconds.Add(l).Set(r.wall_seconds);
  m.ratio.Add(l).Set(r.ratio);
  if (r.predicted_seconds > 0)
    m.predicted.Add(l).Set(static_cast<double>(r.planned_samples) / r.predicted_seconds);
  m.messages_sent.Add(l).Increment(static_cast<double>(r.messages_sent));
  m.messages_received.Add(l).Increment(static_cast<double>(r.messages_received));
  m.messages_refused.Add(l).Increment(static_cast<double>(r.messages_refused));
  m.rollbacks.Add(l).Increment(static_cast<double>(r.rollbacks));
  m.bytes_sent.Add(l).Increment(static_cast<double>(r.bytes_sent));
  m.bytes_received.Add(l).Increment(static_cast<double>(r.bytes_received));
}

void node_metrics::peers(size_t up, size_t down) {
  impl_->peers.Add({{"state", "up"}}).Set(static_cast<double>(up));
  impl_->peers.Add({{"state", "down"}}).Set(static_cast<double>(down));
}

void node_metrics::watch_lane(std::weak_ptr<messages::lane> lane) {
  impl_->live->watch_lane(std::move(lane));
}

std::string node_metrics::text() const {
  auto all = impl_->registry->Collect();
  auto live = impl_->live->Collect();
  all.insert(all.end(), live.begin(), live.end());
  return pr::TextSerializer().Serialize(all);
}

} // namespace eg::actors
