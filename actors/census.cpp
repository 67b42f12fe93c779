#include "actors/census.hpp"

#include <caf/abstract_actor.hpp>

#include <cstdint>
#include <map>
#include <mutex>

namespace eg::actors::census {

namespace {

struct book {
  std::mutex mutex;
  uint64_t next = 0;
  std::map<uint64_t, std::string> running;  // by entry, oldest first
};

book& the_book() {
  static book b;
  return b;
}

} // namespace

void enter(caf::abstract_actor* self, std::string what) {
  auto& b = the_book();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    id = b.next++;
    b.running.emplace(id, std::move(what));
  }
  self->attach_functor([id] {
    auto& b = the_book();
    std::lock_guard<std::mutex> lock(b.mutex);
    b.running.erase(id);
  });
}

std::vector<std::string> running() {
  auto& b = the_book();
  std::lock_guard<std::mutex> lock(b.mutex);
  std::vector<std::string> out;
  out.reserve(b.running.size());
  for (auto& [id, what] : b.running)
    out.push_back(what);
  return out;
}

} // namespace eg::actors::census
