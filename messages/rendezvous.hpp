#pragma once
// Pairs the two halves of a message that travel apart: a parameter-server
// commit's control part (a typed CAF message: the worker's loss, overhead,
// the promise to answer) and its update (the weights, on the weights lane),
// which may arrive in either order. Each half waits at most `wait` seconds
// for the other; expire() hands back the first halves whose second never
// came (to be answered with an error: nothing of them was applied) and
// drops second halves nobody asked for. At most `capacity` halves wait on
// each side: one more pushes the oldest out (a peer that floods the lane
// with updates nobody commits cannot grow the server's memory).

#include <cstddef>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace eg::messages {

template <class Key, class First, class Second>
class rendezvous {
public:
  struct expired {
    std::vector<std::pair<Key, First>> firsts;  ///< their second never came
    size_t seconds = 0;                         ///< seconds nobody asked for, dropped
  };

  explicit rendezvous(double wait, size_t capacity = 1024) : wait_(wait), capacity_(capacity) {}

  /// The first half of `key` arrived at `now`: both halves when the second
  /// is here already, else none (the first waits).
  std::optional<std::pair<First, Second>> first(const Key& key, First f, double now) {
    auto i = seconds_.find(key);
    if (i != seconds_.end()) {
      std::pair<First, Second> both{std::move(f), std::move(i->second.value)};
      seconds_.erase(i);
      return both;
    }
    put_first(key, std::move(f), now);
    return std::nullopt;
  }

  /// The second half of `key` arrived at `now`: both halves when the first
  /// is here already, else none (the second waits).
  std::optional<std::pair<First, Second>> second(const Key& key, Second s, double now) {
    auto i = firsts_.find(key);
    if (i != firsts_.end()) {
      std::pair<First, Second> both{std::move(i->second.value), std::move(s)};
      firsts_.erase(i);
      return both;
    }
    put_second(key, std::move(s), now);
    return std::nullopt;
  }

  /// Takes out every half that waited longer than `wait` by `now`, and the
  /// halves pushed out by capacity since the last call.
  expired expire(double now) {
    expired out;
    for (auto i = firsts_.begin(); i != firsts_.end();)
      if (now - i->second.since > wait_) {
        out.firsts.emplace_back(i->first, std::move(i->second.value));
        i = firsts_.erase(i);
      } else {
        ++i;
      }
    for (auto i = seconds_.begin(); i != seconds_.end();)
      if (now - i->second.since > wait_) {
        ++out.seconds;
        i = seconds_.erase(i);
      } else {
        ++i;
      }
    for (auto& f : pushed_out_)
      out.firsts.push_back(std::move(f));
    pushed_out_.clear();
    out.seconds += std::exchange(seconds_pushed_out_, 0);
    return out;
  }

  /// Takes out the first half of `key` (its asker is gone), if it waits.
  std::optional<First> cancel(const Key& key) {
    auto i = firsts_.find(key);
    if (i == firsts_.end())
      return std::nullopt;
    auto f = std::move(i->second.value);
    firsts_.erase(i);
    return f;
  }

  size_t waiting_firsts() const { return firsts_.size(); }
  size_t waiting_seconds() const { return seconds_.size(); }
  double wait() const { return wait_; }

private:
  template <class T>
  struct held {
    T value;
    double since;
  };

  /// The oldest entry of `side` (the one waiting longest).
  template <class T>
  static auto oldest(std::map<Key, held<T>>& side) {
    auto o = side.begin();
    for (auto i = side.begin(); i != side.end(); ++i)
      if (i->second.since < o->second.since)
        o = i;
    return o;
  }

  void put_first(const Key& key, First value, double now) {
    firsts_.insert_or_assign(key, held<First>{std::move(value), now});
    while (firsts_.size() > capacity_) {
      auto o = oldest(firsts_);
      pushed_out_.emplace_back(o->first, std::move(o->second.value));
      firsts_.erase(o);
    }
  }

  void put_second(const Key& key, Second value, double now) {
    seconds_.insert_or_assign(key, held<Second>{std::move(value), now});
    while (seconds_.size() > capacity_) {
      seconds_.erase(oldest(seconds_));
      ++seconds_pushed_out_;
    }
  }

  double wait_;
  size_t capacity_;
  std::map<Key, held<First>> firsts_;
  std::map<Key, held<Second>> seconds_;
  std::vector<std::pair<Key, First>> pushed_out_;
  size_t seconds_pushed_out_ = 0;
};

} // namespace eg::messages
