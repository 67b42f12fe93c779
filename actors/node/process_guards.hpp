#pragma once
// What keeps a node's process in order around its actors (used by
// runtime.cpp only): SIGINT and SIGTERM taken by a thread of their own, the
// store's failure relayed to the node, the front door closed at the end, and
// a watchdog should the actor system not shut down.

#include "actors/census.hpp"
#include "actors/interfaces.hpp"
#include "messages/door.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace eg::actors::runtime_detail {


/// How long a node may take to stop after SIGINT or SIGTERM before its
/// process exits anyway. The stop's own steps are bounded (the platforms'
/// final checkpoints, 30 s; the store's flush, 30 s; the last messages,
/// 0.5 s); this bounds everything else as well (an actor that does not
/// answer, a network call that hangs). By then what could be saved is.
inline constexpr std::chrono::seconds stop_deadline{75};

/// The exit code of a process that did not stop cleanly in time, or was
/// told twice (as for a node that ended otherwise).
inline constexpr int forced_exit_code = 1;

/// Exits at once, the log flushed: nothing else runs (no destructors, no
/// actor system shutdown). What the store wrote stays (RocksDB's log).
[[noreturn]] inline void exit_now(int code) {
  spdlog::default_logger()->flush();
  std::_Exit(code);
}

/// SIGINT / SIGTERM are taken by a thread of their own (sigwait), which asks
/// the node to stop; no work happens in a signal handler. A node that has
/// not stopped `deadline` after the first signal, or that gets a second
/// one, exits at once (`forced_exit_code`), so a stop always ends.
class signal_watch {
public:
  using exit_fn = std::function<void(int)>;

  /// `ask_stop` runs on the watch's thread at the first signal; `exit`
  /// (by default exit_now) when the stop takes too long or a second
  /// signal comes.
  signal_watch(bool enabled, std::function<void()> ask_stop,
               std::chrono::milliseconds deadline = stop_deadline,
               exit_fn exit = [](int code) { exit_now(code); })
      : enabled_(enabled) {
    if (!enabled_)
      return;
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    thread_ = std::thread([this, ask_stop = std::move(ask_stop), deadline,
                           exit = std::move(exit)] {
      using clock = std::chrono::steady_clock;
      clock::time_point first;
      timespec tick{0, 100'000'000};
      while (!over_) {
        const int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig > 0 && !received_) {
          received_ = true;
          first = clock::now();
          spdlog::info("signal received: stopping cleanly (a second signal, or {:g} s without "
                       "an end, exits at once)",
                       std::chrono::duration<double>(deadline).count());
          ask_stop();
        } else if (sig > 0) {
          spdlog::error("a second signal: exiting now, without waiting for the stop to end; "
                        "what the store saved stays");
          exit(forced_exit_code);
          return;
        } else if (received_ && clock::now() - first > deadline) {
          spdlog::error("the node did not stop within {:g} s of the signal (a platform, the "
                        "store or the network did not answer): exiting now; what the store "
                        "saved stays",
                        std::chrono::duration<double>(deadline).count());
          exit(forced_exit_code);
          return;
        }
      }
    });
  }
  /// The node's: asks `node` to stop (a control message from a local
  /// actor: the node takes control only from its cluster).
  signal_watch(bool enabled, caf::actor_system& sys, node_actor node)
      : signal_watch(enabled, [&sys, node] {
          caf::scoped_actor asker{sys};
          asker->send(node, control_atom::value, control{messages::verb::stop, {}});
        }) {}
  ~signal_watch() {
    over_ = true;
    if (thread_.joinable())
      thread_.join();
  }
  /// True once a signal asked the node to stop.
  bool received() const { return received_; }
  /// Blocks the signals in this thread and every thread it starts later.
  static void block() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }

private:
  bool enabled_;
  sigset_t set_;
  std::atomic<bool> over_{false};
  std::atomic<bool> received_{false};
  std::thread thread_;
};

/// The node, for the store actor's report that the store cannot write: the
/// store starts before the node, so a report made before the node exists
/// waits for it. Called from the store actor's thread.
class failure_relay {
public:
  void report(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (node_)
      caf::anon_send(node_, failed_atom::value, why);
    else
      pending_ = why;
  }
  void connect(node_actor node) {
    std::lock_guard<std::mutex> lock(mutex_);
    node_ = std::move(node);
    if (pending_)
      caf::anon_send(node_, failed_atom::value, *pending_);
    pending_.reset();
  }
  /// Drops the node's handle (the store actor keeps the relay).
  void disconnect() {
    std::lock_guard<std::mutex> lock(mutex_);
    node_ = nullptr;
  }

private:
  std::mutex mutex_;
  node_actor node_;
  std::optional<std::string> pending_;
};

/// Once the run is over and the store flushed, the node is shut down: its
/// port and routes closed, its actors ended, then CAF's network layer.
/// Should that hang (an actor that does not end, a thread that is not
/// joined), the process exits after 30 s with the run's exit code instead of
/// staying up: nothing is left to save by then. It says where it hung: the
/// step under way and the actors still running.
class shutdown_watchdog {
public:
  using exit_fn = std::function<void(int)>;

  /// `exit` (by default exit_now) when the shutdown outlasts `limit` from
  /// arm(), or a step its own limit.
  explicit shutdown_watchdog(std::chrono::milliseconds limit = std::chrono::seconds(30),
                             exit_fn exit = [](int code) { exit_now(code); })
      : limit_(limit), exit_(std::move(exit)) {}

  void arm(int exit_code) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      armed_at_ = clock::now();
      deadline_ = std::min(deadline_, armed_at_ + limit_);
    }
    thread_ = std::thread([this, exit_code] {
      std::unique_lock<std::mutex> lock(mutex_);
      // The deadline may come nearer while it waits (step with a limit).
      while (!over_ && clock::now() < deadline_)
        cv_.wait_until(lock, deadline_);
      if (over_)
        return;
      std::string names;
      for (auto& r : census::running())
        names += (names.empty() ? "" : ", ") + r;
      spdlog::error("the node's shutdown took more than {:.0f} s (at: {}; actors still running: "
                    "{}): exiting",
                    std::chrono::duration<double>(clock::now() - armed_at_).count(),
                    step_ ? step_ : "closing the node", names.empty() ? "none" : names);
      exit_(exit_code);
    });
  }
  /// The step of the shutdown under way (a string that outlives the
  /// watchdog), which it names should the shutdown hang; with `limit`, the
  /// process exits if the step has not ended within it (sooner than the
  /// whole shutdown's limit).
  void step(const char* what, std::optional<std::chrono::milliseconds> limit = std::nullopt) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      step_ = what;
      if (limit)
        deadline_ = std::min(deadline_, clock::now() + *limit);
    }
    cv_.notify_all();
  }
  ~shutdown_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      over_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }

private:
  using clock = std::chrono::steady_clock;
  std::chrono::milliseconds limit_;
  exit_fn exit_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool over_ = false;
  const char* step_ = nullptr;
  clock::time_point armed_at_ = clock::now();
  clock::time_point deadline_ = clock::time_point::max();
  std::thread thread_;
};

/// At the end of a node's run: its front door's counts (when it refused
/// anything), then the door and the routes closed.
struct doors_closer {
  std::unique_ptr<messages::front_door>& door;
  std::shared_ptr<messages::door_routes>& routes;
  shutdown_watchdog& watchdog;
  ~doors_closer() {
    watchdog.step("closing the node's port and its routes to the other nodes");
    if (door) {
      auto s = door->stats();
      if (s.connections_refused + s.messages_refused > 0)
        spdlog::info("node port: {} connections admitted, {} refused, {} closed for an "
                     "oversized message",
                     s.connections_admitted, s.connections_refused, s.messages_refused);
      door->stop();
    }
    if (routes)
      routes->stop();
    watchdog.step("ending the node's signal watch and co-runners");
  }
};

} // namespace eg::actors::runtime_detail
