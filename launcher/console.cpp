#include "launcher/console.hpp"

#include "actors/balancer/inspection.hpp"
#include "actors/interfaces.hpp"
#include "actors/node/network.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

namespace eg::launcher {
namespace {

using eg::actors::challenge_atom;
using eg::actors::inspect_atom;
using eg::actors::node_actor;
namespace in = eg::inspection;
using clock = std::chrono::steady_clock;

// -- text views of a snapshot ---------------------------------------------------

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

/// Bytes that may be negative (what packing saved, when it cost instead).
std::string signed_bytes(int64_t b) {
  return b < 0 ? "-" + human_bytes(static_cast<uint64_t>(-b)) : human_bytes(static_cast<uint64_t>(b));
}

std::string clock_text(double seconds) {
  auto s = static_cast<long>(std::max(0.0, seconds));
  return s >= 3600 ? fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60)
                   : fmt::format("{}:{:02d}", s / 60, s % 60);
}

std::string number(double v, int decimals) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : std::string{"nan"};
}

std::vector<std::string> header_lines(const in::snapshot& s, const std::string& address) {
  auto& c = s.cluster;
  std::vector<std::string> out;
  out.push_back(fmt::format("edgegossip console | cluster {} | run {} | {} ({}) | via node {} ({})",
                            c.id, c.run.empty() ? "-" : c.run, c.strategy, c.schedule,
                            c.via.empty() ? "?" : c.via, address));
  std::string acc = c.evaluated_epoch >= 0
                      ? fmt::format("{} (epoch {}{}{})", number(c.averaged_accuracy, 4),
                                    c.evaluated_epoch + 1, c.accuracy_by_node.empty() ? "" : "; ",
                                    c.accuracy_by_node)
                      : std::string{"-"};
  const bool split = in::is_split(c);
  out.push_back(fmt::format("state {} | elapsed {} | epoch {}/{} | {} {} | {} {} up, {} down{}",
                            c.state, clock_text(c.elapsed_seconds), c.epoch + 1, c.epochs,
                            split ? "test accuracy" : "averaged model accuracy", acc,
                            split ? "stages" : "platforms", c.platforms_up, c.platforms_down,
                            c.balancer_reachable || c.balancer.empty()
                              ? std::string{}
                              : " | balancer on node " + c.balancer + " UNREACHABLE"));
  if (!c.server.empty())
    out.push_back(fmt::format("parameter server on node {} | model version {} (the newest a "
                              "worker pulled)",
                              c.server, c.server_version));
  return out;
}

/// The cells of a platform's row that both tables show.
struct row_cells {
  std::string state, epoch, done, loss, accuracy, checkpoint;
};

row_cells cells_of(const in::platform_row& p, uint32_t epochs) {
  const bool joined = p.state != "waiting";
  return {p.state + (p.paused ? ",paused" : ""),
          joined ? fmt::format("{}/{}", p.epoch + 1, epochs) : "-",
          joined ? fmt::format("{:.0f}%", 100 * p.progress) : "-",
          joined ? number(p.train_loss, 4) : "-",
          p.test_accuracy >= 0 ? number(p.test_accuracy, 4) : "-",
          p.checkpoint_epochs >= 0 ? fmt::format("after e{}", p.checkpoint_epochs)
                                   : std::string{"-"}};
}

/// Parameter-server strategies: each worker's commits instead of gossip.
std::vector<std::string> worker_lines(const in::snapshot& s) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<10} {:<8} {:<10} {:>5} {:>5} {:>7} {:>5} {:>7} {:>8} {:>8} "
                            "{:>9} {:>9} {:>12}",
                            "WORKER", "NODE", "STATE", "EPOCH", "DONE", "ITER", "RATIO", "LOSS",
                            "TEST ACC", "COMMITS", "COMMITS/S", "STALENESS", "CHECKPOINT"));
  for (auto& p : s.platforms) {
    const auto c = cells_of(p, s.cluster.epochs);
    out.push_back(fmt::format(
      "{:<10} {:<8} {:<10} {:>5} {:>5} {:>7} {:>5} {:>7} {:>8} {:>8} {:>9} {:>9} {:>12}", p.name,
      p.node, c.state, c.epoch, c.done, p.iterations, number(p.ratio, 2), c.loss, c.accuracy,
      p.commits, number(p.commit_rate, 2), number(p.staleness, 1), c.checkpoint));
  }
  return out;
}

/// A split run: one row per stage; no predictions, ratios or gossip, the
/// bytes are the activations and labels a stage sent up.
std::vector<std::string> stage_lines(const in::snapshot& s) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<10} {:<8} {:<10} {:>5} {:>7} {:>8} {:>10} {:>12}", "STAGE",
                            "NODE", "STATE", "EPOCH", "LOSS", "TEST ACC", "SENT UP",
                            "CHECKPOINT"));
  for (auto& p : s.platforms) {
    const auto c = cells_of(p, s.cluster.epochs);
    out.push_back(fmt::format("{:<10} {:<8} {:<10} {:>5} {:>7} {:>8} {:>10} {:>12}", p.name,
                              p.node, c.state, c.epoch,
                              p.checkpoint_epochs >= 0 ? c.loss : "-",  // only reported epochs
                              c.accuracy,
                              p.bytes_out > 0 ? human_bytes(p.bytes_out) : "-", c.checkpoint));
  }
  return out;
}

std::vector<std::string> platform_lines(const in::snapshot& s) {
  if (!s.cluster.server.empty())
    return worker_lines(s);
  if (in::is_split(s.cluster))
    return stage_lines(s);
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<10} {:<8} {:<10} {:>5} {:>5} {:>7} {:>9} {:>5} {:>7} {:>8} "
                            "{:>10} {:>10} {:>7} {:>12}",
                            "PLATFORM", "NODE", "STATE", "EPOCH", "DONE", "ITER", "PRED PT/S",
                            "RATIO", "LOSS", "TEST ACC", "GOSSIP IN", "GOSSIP OUT", "EXCH/IT",
                            "CHECKPOINT"));
  for (auto& p : s.platforms) {
    const auto c = cells_of(p, s.cluster.epochs);
    out.push_back(fmt::format(
      "{:<10} {:<8} {:<10} {:>5} {:>5} {:>7} {:>9} {:>5} {:>7} {:>8} {:>10} {:>10} {:>7} {:>12}",
      p.name, p.node, c.state, c.epoch, c.done, p.iterations,
      p.throughput > 0 ? number(p.throughput, 0) : "-", number(p.ratio, 2), c.loss, c.accuracy,
      human_bytes(p.bytes_in), human_bytes(p.bytes_out), number(p.exchange_rate, 3),
      c.checkpoint));
  }
  return out;
}

std::vector<std::string> node_lines(const in::snapshot& s) {
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<10} {:<22} {:<8} {:<9} {}", "NODE", "ADDRESS", "STATE",
                            "BALANCER", in::is_split(s.cluster) ? "STAGES" : "PLATFORMS"));
  for (auto& n : s.nodes) {
    std::string ps;
    for (auto& p : n.platforms)
      ps += (ps.empty() ? "" : " ") + p;
    out.push_back(fmt::format("{:<10} {:<22} {:<8} {:<9} {}{}", n.name,
                              fmt::format("{}:{}", n.host, n.port), n.state,
                              n.balancer ? "yes" : "", ps,
                              n.name == s.cluster.via ? "   (attached)" : ""));
    if (!n.store.empty())
      out.push_back(fmt::format("{:<10} store cannot write, checkpoints not saved: {}", "",
                                n.store));
  }
  return out;
}

std::vector<std::string> topology_lines(const in::snapshot& s) {
  if (in::is_split(s.cluster))
    return {"no gossip: the stages send activations up and gradients down on the weights lane"};
  std::vector<std::string> out;
  out.push_back("gossip received over the completed epochs (sender -> receiver)");
  if (!s.cluster.server.empty()) {
    out.push_back("(none: the workers commit to the parameter server)");
    return out;
  }

  out.push_back(fmt::format("{:<10}    {:<10} {:>9} {:>11}", "FROM", "TO", "MESSAGES", "BYTES"));
  for (auto& l : s.topology)
    out.push_back(
      fmt::format("{:<10} -> {:<10} {:>9} {:>11}", l.from, l.to, l.messages, human_bytes(l.bytes)));
  if (s.topology.empty())
    out.push_back("(no epoch completed yet)");
  return out;
}

std::vector<std::string> history_lines(const in::history& h) {
  std::vector<std::string> out;
  out.push_back(fmt::format("history of platform {}: one row per completed epoch", h.platform));
  out.push_back(fmt::format("{:>5} {:>5} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7} {:>10} {:>10} "
                            "{:<48} {}",
                            "EPOCH", "RATIO", "SAMPLES", "WALL S", "SAMPLES/S", "LOSS",
                            "TEST LOSS", "TEST ACC", "WEIGHT", "SENT", "RECEIVED",
                            "SENT: VALUES/INDICES/WEIGHTS/HEADERS -PACKING SAVED", "HEARD FROM"));
  for (auto& r : h.epochs) {
    std::string heard;
    for (auto& t : r.received_from)
      heard += (heard.empty() ? "" : " ") + t.peer;
    // The unpacked parts less what packing saved: the bytes in SENT.
    const auto parts = fmt::format("{}/{}/{}/{} -{}", human_bytes(r.sent.values),
                                   human_bytes(r.sent.indices), human_bytes(r.sent.weights),
                                   human_bytes(r.sent.headers), signed_bytes(r.sent.packing_saved));
    out.push_back(fmt::format(
      "{:>5} {:>5} {:>8} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7} {:>10} {:>10} {:<48} {}", r.epoch + 1,
      number(r.ratio, 2), r.samples, number(r.wall_seconds, 1),
      number(r.wall_seconds > 0 ? r.samples / r.wall_seconds : 0.0, 0), number(r.train_loss, 4),
      number(r.test_loss, 4), number(r.test_accuracy, 4), number(r.gossip_weight, 3),
      human_bytes(r.bytes_sent), human_bytes(r.bytes_received), parts, heard));
  }
  if (h.epochs.empty())
    out.push_back("(no epoch completed yet)");
  return out;
}

std::vector<std::string> event_lines(const in::snapshot& s, size_t last) {
  std::vector<std::string> out;
  size_t from = s.events.size() > last ? s.events.size() - last : 0;
  for (size_t i = from; i < s.events.size(); ++i) {
    auto& e = s.events[i];
    out.push_back(fmt::format("{:>7}  {:<10} {}", clock_text(e.at), e.kind, e.text));
  }
  if (out.empty())
    out.push_back("(none)");
  return out;
}

std::vector<std::string> help_lines() {
  return {"commands (type one, then Enter):",
          "  platforms        one row per platform of the cluster (the default view)",
          "  nodes            the nodes, their addresses and state",
          "  topology         who received gossip from whom, with bytes",
          "  history NAME     one platform's per-epoch metrics",
          "  events           the recent events",
          "  checkpoint       every platform checkpoints now",
          "  pause / resume   stop / restart training on every platform",
          "  help             this list",
          "  quit             leave the console (training goes on)"};
}

/// The whole snapshot as text (--once without --json).
std::string full_text(const in::snapshot& s, const std::string& address) {
  std::string out;
  auto add = [&](const std::vector<std::string>& lines) {
    for (auto& l : lines)
      out += l + "\n";
    out += "\n";
  };
  add(header_lines(s, address));
  add(platform_lines(s));
  add(node_lines(s));
  add(topology_lines(s));
  out += "recent events\n";
  add(event_lines(s, 20));
  return out;
}

// -- the connection to a node ----------------------------------------------------

struct address {
  std::string host;
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

std::optional<address> parse_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return std::nullopt;
  try {
    size_t used = 0;
    auto port = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || port == 0 || port > 65535)
      return std::nullopt;
    return address{text.substr(0, colon), static_cast<uint16_t>(port)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

enum class outcome { ok, refused, rejected, lost };

struct reply {
  outcome what = outcome::ok;
  std::string text;  ///< the JSON, or what went wrong
};

class connection {
public:
  connection(caf::actor_system& sys, const std::string& secret, messages::door_routes& routes)
      : sys_(sys), secret_(secret), routes_(routes) {}

  /// Attaches to the node at `a` (through its front door); false (and why
  /// in `error`) when none answers.
  bool attach(const address& a, std::string& error) {
    uint16_t port = 0;
    try {
      port = routes_.route("", a.host, a.port);
    } catch (const messages::door_error& e) {
      error = e.what();
      return false;
    }
    auto node = sys_.has_openssl_manager()
                  ? caf::openssl::remote_actor<node_actor>(sys_, "127.0.0.1", port)
                  : sys_.middleman().remote_actor<node_actor>("127.0.0.1", port);
    if (!node) {
      error = routes_.last_failure(a.host, a.port);
      if (error.empty())
        error = sys_.render(node.error());
      return false;
    }
    node_ = *node;
    at_ = a;
    return true;
  }

  const address& at() const { return at_; }

  reply ask(const std::string& command, std::chrono::seconds timeout = std::chrono::seconds(6)) {
    reply r;
    if (!node_)
      return {outcome::lost, "not attached"};
    caf::scoped_actor self{sys_};
    // A fresh challenge for every command: what crosses the network cannot
    // be replayed.
    std::string challenge;
    bool lost = false;
    self->request(node_, timeout, challenge_atom::value)
      .receive([&](std::string& c) { challenge = std::move(c); },
               [&](caf::error& err) {
                 r = {outcome::lost, sys_.render(err)};
                 lost = true;
               });
    if (lost) {
      node_ = node_actor{};
      return r;
    }
    self->request(node_, timeout, inspect_atom::value,
                  in::console_credentials(secret_, challenge), command)
      .receive([&](std::string& json) { r.text = std::move(json); },
               [&](caf::error& err) {
                 namespace ea = eg::actors;
                 std::string why;
                 if (ea::is(err, ea::ec::refused, &why)) {
                   r.what = outcome::refused;
                   r.text = why;
                 } else if (ea::is(err, ea::ec::bad_request, &why)
                            || ea::is(err, ea::ec::unknown_platform, &why)) {
                   r.what = outcome::rejected;  // the node's own words
                   r.text = why;
                 } else {
                   r.what = outcome::lost;
                   r.text = sys_.render(err);
                 }
               });
    if (r.what == outcome::lost)
      node_ = node_actor{};  // asked again only once attached again
    return r;
  }

private:
  caf::actor_system& sys_;
  std::string secret_;  ///< the cluster secret (only proofs of it are sent)
  messages::door_routes& routes_;
  node_actor node_;
  address at_;
};

// -- the live terminal view -------------------------------------------------------

std::atomic<bool> interrupted{false};

void on_interrupt(int) {
  interrupted = true;
}

class terminal {
public:
  terminal() {
    tty_ = isatty(STDIN_FILENO) != 0;
    if (tty_ && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSANOW, &raw);
      restored_ = false;
    }
  }
  ~terminal() { restore(); }
  void restore() {
    if (!restored_)
      tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    restored_ = true;
  }
  std::pair<int, int> size() const {
    winsize ws{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
      return {ws.ws_col, ws.ws_row};
    return {140, 45};
  }

private:
  bool tty_ = false;
  bool restored_ = true;
  termios saved_{};
};

class live_console {
public:
  live_console(connection& conn, const console_options& opts, address first)
    : conn_(conn), opts_(opts), first_(std::move(first)) {}

  int run(in::snapshot first_snapshot) {
    snapshot_ = std::move(first_snapshot);
    has_snapshot_ = true;
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
    terminal term;
    size_ = term.size();
    std::fputs("\033[2J", stdout);
    status_ = "attached to node " + snapshot_.cluster.via + " (" + conn_.at().text()
              + "); type help for the commands";
    auto next = clock::now();
    while (!quit_ && !interrupted) {
      if (clock::now() >= next) {
        refresh();
        draw();
        next = clock::now()
               + std::chrono::milliseconds(static_cast<int64_t>(opts_.interval * 1000));
      }
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - clock::now());
      pollfd pfd{STDIN_FILENO, POLLIN, 0};
      int n = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, wait.count())));
      if (n > 0 && (pfd.revents & (POLLIN | POLLHUP))) {
        char buf[256];
        auto got = read(STDIN_FILENO, buf, sizeof buf);
        if (got <= 0) {
          if (got == 0 && !(pfd.revents & POLLIN))
            break;  // stdin closed
          if (got == 0)
            break;
          continue;
        }
        for (ssize_t i = 0; i < got && !quit_; ++i)
          key(buf[i]);
        size_ = term.size();
        draw();
      }
    }
    term.restore();
    std::fputs("\r\n", stdout);
    std::fflush(stdout);
    return 0;
  }

private:
  enum class view { platforms, nodes, topology, history, events, help };

  void key(char c) {
    if (skip_escape_ > 0) {
      // The rest of an escape sequence (arrow keys ...): ignored.
      if (skip_escape_ == 2 && c != '[' && c != 'O')
        skip_escape_ = 0;
      else if (skip_escape_ == 1 && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '~'))
        skip_escape_ = 0;
      else
        skip_escape_ = 1;
      return;
    }
    if (c == '\033') {
      skip_escape_ = 2;
    } else if (c == '\r' || c == '\n') {
      auto line = input_;
      input_.clear();
      execute(line);
    } else if (c == 127 || c == '\b') {
      if (!input_.empty())
        input_.pop_back();
    } else if (c == 21) {  // Ctrl-U
      input_.clear();
    } else if (c == 4) {  // Ctrl-D
      if (input_.empty())
        quit_ = true;
    } else if (static_cast<unsigned char>(c) >= 32) {
      input_ += c;
    }
  }

  void execute(const std::string& line) {
    std::istringstream ss(line);
    std::string verb, arg;
    ss >> verb >> arg;
    if (verb.empty())
      return;
    if (verb == "quit" || verb == "q" || verb == "exit") {
      quit_ = true;
    } else if (verb == "help" || verb == "?") {
      view_ = view::help;
    } else if (verb == "platforms") {
      view_ = view::platforms;
    } else if (verb == "nodes") {
      view_ = view::nodes;
    } else if (verb == "topology") {
      view_ = view::topology;
    } else if (verb == "events") {
      view_ = view::events;
    } else if (verb == "history") {
      if (arg.empty()) {
        status_ = "history needs a platform name, e.g. history " + first_platform();
        return;
      }
      history_of_ = arg;
      view_ = view::history;
      fetch_history();
    } else if (verb == "pause" || verb == "resume" || verb == "checkpoint") {
      auto r = conn_.ask(verb);
      if (r.what == outcome::ok) {
        try {
          auto a = in::answer_from_json(r.text);
          status_ = (a.ok ? "" : "not done: ") + a.text;
        } catch (const std::exception& e) {
          status_ = e.what();
        }
        refresh();
      } else if (r.what == outcome::lost) {
        status_ = verb + " not sent: " + r.text;
        lost(r.text);
      } else {
        status_ = verb + " refused: " + r.text;
      }
    } else {
      status_ = "unknown command '" + verb + "'; type help";
    }
  }

  std::string first_platform() const {
    return snapshot_.platforms.empty() ? std::string{"NAME"} : snapshot_.platforms.front().name;
  }

  void fetch_history() {
    auto r = conn_.ask("history " + history_of_);
    if (r.what == outcome::ok) {
      try {
        history_ = in::history_from_json(r.text);
        history_error_.clear();
      } catch (const std::exception& e) {
        history_error_ = e.what();
      }
    } else {
      history_error_ = r.text;
    }
  }

  void refresh() {
    auto r = conn_.ask("snapshot");
    if (r.what == outcome::ok) {
      try {
        snapshot_ = in::snapshot_from_json(r.text);
        has_snapshot_ = true;
      } catch (const std::exception& e) {
        status_ = e.what();
      }
      if (view_ == view::history)
        fetch_history();
      return;
    }
    if (r.what == outcome::lost)
      lost(r.text);
    else
      status_ = r.text;
  }

  /// The attached node went away: shown as down, then another node of the
  /// cluster (from the last snapshot's node list), or the same again.
  void lost(const std::string& why) {
    auto gone = snapshot_.cluster.via;
    auto gone_at = conn_.at();
    for (auto& n : snapshot_.nodes)
      if (n.name == gone)
        n.state = "down";
    for (auto& p : snapshot_.platforms)
      if (p.node == gone)
        p.state = "down";
    status_ = fmt::format("lost node {} ({}): {}; reconnecting ...", gone, gone_at.text(), why);
    draw();
    std::vector<address> candidates;
    // The nodes after the lost one first, so that each node gets its turn.
    size_t start = 0;
    for (size_t i = 0; i < snapshot_.nodes.size(); ++i)
      if (snapshot_.nodes[i].name == gone)
        start = i + 1;
    for (size_t k = 0; k < snapshot_.nodes.size(); ++k) {
      auto& n = snapshot_.nodes[(start + k) % snapshot_.nodes.size()];
      if (n.name != gone)
        candidates.push_back(address{n.host, n.port});
    }
    candidates.push_back(gone_at);
    if (first_.text() != gone_at.text())
      candidates.push_back(first_);
    for (auto& a : candidates) {
      std::string error;
      if (!conn_.attach(a, error))
        continue;
      auto r = conn_.ask("snapshot", std::chrono::seconds(5));
      if (r.what != outcome::ok)
        continue;
      try {
        snapshot_ = in::snapshot_from_json(r.text);
      } catch (const std::exception&) {
        continue;
      }
      status_ = fmt::format("lost node {} ({}); reconnected through node {} ({})", gone,
                            gone_at.text(), snapshot_.cluster.via, a.text());
      return;
    }
    status_ = snapshot_.cluster.state == "finished"
                ? fmt::format("run {} is over: its nodes have left (quit to leave)",
                              snapshot_.cluster.run)
                : fmt::format("lost node {} ({}): no node of the cluster answers; retrying",
                              gone, gone_at.text());
  }

  void draw() {
    auto [width, height] = size_;
    std::vector<std::string> lines;
    auto add = [&](const std::vector<std::string>& more) {
      lines.insert(lines.end(), more.begin(), more.end());
    };
    add(header_lines(snapshot_, conn_.at().text()));
    lines.emplace_back();
    size_t events = 6;
    switch (view_) {
      case view::platforms:
        add(platform_lines(snapshot_));
        break;
      case view::nodes:
        add(node_lines(snapshot_));
        break;
      case view::topology:
        add(topology_lines(snapshot_));
        break;
      case view::history:
        if (history_error_.empty())
          add(history_lines(history_));
        else
          lines.push_back("history " + history_of_ + ": " + history_error_);
        break;
      case view::events:
        events = static_cast<size_t>(std::max(4, height - 10));
        break;
      case view::help:
        add(help_lines());
        break;
    }
    // Fit the screen: the events and the two last lines always show.
    auto budget = static_cast<size_t>(std::max(6, height - 4 - static_cast<int>(std::min<size_t>(events, 6)) - 2));
    if (view_ != view::events && lines.size() > budget) {
      auto hidden = lines.size() - budget + 1;
      lines.resize(budget - 1);
      lines.push_back(fmt::format("... {} more lines (a taller terminal shows them)", hidden));
    }
    lines.emplace_back();
    lines.push_back("recent events");
    add(event_lines(snapshot_, events));
    lines.emplace_back();
    lines.push_back(status_);
    std::string out = "\033[H";
    for (auto& l : lines) {
      out += l.size() > static_cast<size_t>(width) ? l.substr(0, static_cast<size_t>(width)) : l;
      out += "\033[K\r\n";
    }
    out += "console> " + input_ + "\033[K\033[J";
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }

  connection& conn_;
  const console_options& opts_;
  address first_;
  in::snapshot snapshot_;
  bool has_snapshot_ = false;
  in::history history_;
  std::string history_of_;
  std::string history_error_;
  std::string status_;
  std::string input_;
  view view_ = view::platforms;
  bool quit_ = false;
  int skip_escape_ = 0;
  std::pair<int, int> size_{140, 45};
};

} // namespace

int run_console(const console_options& opts) {
  auto where = parse_address(opts.address);
  if (!where) {
    std::fprintf(stderr, "edgegossip console: '%s' is not HOST:PORT (e.g. 127.0.0.1:47101)\n",
                 opts.address.c_str());
    return 2;
  }
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  eg::actors::announce_types(cfg);  // the node's interface names the project's types
  cfg.set("scheduler.max-threads", size_t{2});
  if (opts.tls.enabled()) {
    try {
      eg::actors::configure_tls(cfg, eg::actors::tls_of(opts.tls, "console"));
    } catch (const eg::actors::network_error& e) {
      std::fprintf(stderr, "edgegossip console: %s\n", e.what());
      return 2;
    }
  }
  messages::door_options door;
  door.identity = {opts.cluster_id, "console", opts.secret, {}};
  door.check_lengths = !opts.tls.enabled();
  door.max_message_bytes = messages::max_message_bytes;
  messages::door_routes routes(door);
  caf::actor_system sys{cfg};
  connection conn(sys, opts.secret, routes);
  std::string error;
  if (!conn.attach(*where, error)) {
    if (error.rfind("refused the handshake", 0) == 0)
      std::fprintf(stderr,
                   "edgegossip console: node at %s refused the cluster secret or id: %s (give "
                   "them with --config F, or --cluster ID and --secret S)\n",
                   where->text().c_str(), error.c_str());
    else
      std::fprintf(stderr, "edgegossip console: no edgegossip node answers at %s: %s\n",
                   where->text().c_str(), error.c_str());
    return 2;
  }
  auto first = conn.ask(opts.command.empty() ? "snapshot" : opts.command);
  switch (first.what) {
    case outcome::ok:
      break;
    case outcome::refused:
      std::fprintf(stderr,
                   "edgegossip console: node at %s refused the cluster secret (give it with "
                   "--secret S or --config F)\n",
                   where->text().c_str());
      return 2;
    case outcome::rejected:
      std::fprintf(stderr, "edgegossip console: %s\n", first.text.c_str());
      return 1;
    case outcome::lost:
      std::fprintf(stderr, "edgegossip console: node at %s did not answer: %s\n",
                   where->text().c_str(), first.text.c_str());
      return 2;
  }
  try {
    if (!opts.command.empty()) {
      if (opts.json) {
        std::printf("%s\n", first.text.c_str());
      } else if (opts.command.rfind("history", 0) == 0) {
        for (auto& l : history_lines(in::history_from_json(first.text)))
          std::printf("%s\n", l.c_str());
      } else {
        auto a = in::answer_from_json(first.text);
        std::printf("%s\n", a.text.c_str());
        return a.ok ? 0 : 1;
      }
      return 0;
    }
    if (opts.once) {
      if (opts.json)
        std::printf("%s\n", first.text.c_str());
      else
        std::fputs(full_text(in::snapshot_from_json(first.text), where->text()).c_str(), stdout);
      return 0;
    }
    live_console live(conn, opts, *where);
    return live.run(in::snapshot_from_json(first.text));
  } catch (const in::inspection_error& e) {
    std::fprintf(stderr, "edgegossip console: %s\n", e.what());
    return 1;
  }
}

} // namespace eg::launcher
