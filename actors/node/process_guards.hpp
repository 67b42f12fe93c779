#pragma once
// What keeps a node's process in order around its actors (used by
// runtime.cpp only): SIGINT and SIGTERM taken by a thread of their own, the
// store's failure relayed to the node, the front door closed at the end, and
// a watchdog should the actor system not shut down.

#include "actors/interfaces.hpp"
#include "messages/door.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace eg::actors::runtime_detail {

/// At the end of a node's run: its front door's counts (when it refused
/// anything), then the door and the routes closed.
struct doors_closer {
  std::unique_ptr<messages::front_door>& door;
  std::shared_ptr<messages::door_routes>& routes;
  ~doors_closer() {
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
  }
};

/// SIGINT / SIGTERM are taken by a thread of their own (sigwait), which asks
/// the node to stop; no work happens in a signal handler.
class signal_watch {
public:
  signal_watch(bool enabled, caf::actor_system& sys, node_actor node) : enabled_(enabled) {
    if (!enabled_)
      return;
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    thread_ = std::thread([this, &sys, node] {
      timespec tick{0, 200'000'000};
      while (!over_) {
        if (sigtimedwait(&set_, nullptr, &tick) > 0) {
          received_ = true;
          spdlog::info("signal received: stopping cleanly");
          // From a local actor: the node takes control only from its cluster.
          caf::scoped_actor asker{sys};
          asker->send(node, control_atom::value, control{messages::verb::stop, {}});
        }
      }
    });
  }
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

/// Once the run is over and the store flushed, the actor system is shut
/// down; should that hang (an actor that does not end), the process exits
/// after 30 s with the run's exit code instead of staying up: nothing is
/// left to save by then.
class shutdown_watchdog {
public:
  void arm(int exit_code) {
    thread_ = std::thread([this, exit_code] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [this] { return over_; })) {
        spdlog::error("shutting down the actor system takes more than 30 s: exiting");
        spdlog::default_logger()->flush();
        std::_Exit(exit_code);
      }
    });
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
  std::mutex mutex_;
  std::condition_variable cv_;
  bool over_ = false;
  std::thread thread_;
};

} // namespace eg::actors::runtime_detail
