#include "actors/node/directory.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <stdexcept>

namespace eg::actors {

void directory::add(messages::component what, caf::actor handle) {
  entries_.push_back({std::move(what), std::move(handle)});
}

void directory::set_samples(messages::role r, const std::string& node, uint64_t samples) {
  for (auto& e : entries_)
    if (e.what.role == r && e.what.node == node)
      e.what.samples = samples;
}

void directory::replace_node(const std::string& node, const std::vector<messages::component>& what,
                             const std::vector<caf::actor>& handles) {
  if (what.size() != handles.size())
    throw argument_error("directory: " + std::to_string(what.size()) + " components but "
                                + std::to_string(handles.size()) + " handles");
  remove_node(node);
  for (size_t i = 0; i < what.size(); ++i)
    entries_.push_back({what[i], handles[i]});
}

void directory::remove_node(const std::string& node) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const directory_entry& e) { return e.what.node == node; }),
                 entries_.end());
}

void directory::remove(messages::role r, const std::string& node) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const directory_entry& e) {
                                  return e.what.role == r && e.what.node == node;
                                }),
                 entries_.end());
}

caf::actor directory::find(messages::role r, const std::string& name) const {
  for (auto& e : entries_)
    if (e.what.role == r && e.what.name == name)
      return e.handle;
  return {};
}

std::vector<directory_entry> directory::of_role(messages::role r) const {
  std::vector<directory_entry> out;
  for (auto& e : entries_)
    if (e.what.role == r)
      out.push_back(e);
  return out;
}

std::vector<directory_entry> directory::hosted_by(const std::string& node) const {
  std::vector<directory_entry> out;
  for (auto& e : entries_)
    if (e.what.node == node)
      out.push_back(e);
  return out;
}

std::string directory::balancer_home() const {
  for (auto& e : entries_)
    if (e.what.role == messages::role::balancer)
      return e.what.node;
  return {};
}

succession::succession(const std::vector<std::string>& file_order,
                       const std::string& balancer_node) {
  order_.push_back(balancer_node);
  for (auto& n : file_order)
    if (n != balancer_node)
      order_.push_back(n);
}

size_t succession::rank(const std::string& node) const {
  return static_cast<size_t>(std::find(order_.begin(), order_.end(), node) - order_.begin());
}

succession::verdict succession::when_none(const std::string& me, bool dialling,
                                          const std::set<std::string>& lost) const {
  if (dialling)
    return verdict::retry;
  for (auto& n : order_) {
    if (n == me)
      return verdict::elect;
    if (!lost.count(n))
      return verdict::wait;
  }
  return verdict::wait;  // not a node of the cluster
}

bool succession::majority(const std::string& me, const std::set<std::string>& reachable,
                          int64_t needed) const {
  size_t reach = 0;
  bool holds_first = false;
  for (size_t i = 0; i < order_.size(); ++i)
    if (order_[i] == me || reachable.count(order_[i])) {
      ++reach;
      holds_first = holds_first || i == 0;
    }
  if (needed > 0)
    return static_cast<int64_t>(reach) >= needed;
  return 2 * reach > order_.size() || (2 * reach == order_.size() && holds_first);
}

bool dials(const std::vector<std::string>& file_order, const std::string& me,
           const std::string& other) {
  for (auto& n : file_order) {
    if (n == me)
      return true;
    if (n == other)
      return false;
  }
  return false;
}

} // namespace eg::actors
