#pragma once
// A platform's parameters lent to the gossip messages it sends, without
// copying them (copy-on-write).
//
// A gossip message must carry the parameters as they were when it was sent,
// while the platform goes on training: before, every message was a copy of
// the parameters. Now a message references them (messages::encode_gathered)
// and holds a loan token until its bytes are written; before the platform
// changes its parameters in place (an optimizer step, a merge), it calls
// before_write(), which moves the parameters to fresh copies only when a
// token lent since is still held. The holders keep the storage they were
// lent. A message written before the next change costs no copy at all, one
// still queued costs the copy it always did.

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace eg::learning {

class parameter_loans {
public:
  /// A token that keeps the current storage of `params` alive; whoever
  /// reads that storage holds it until done.
  std::shared_ptr<const void> lend(const std::vector<torch::Tensor>& params);

  /// To be called before `params` change in place. When a token lent since
  /// the last call is still held, each parameter gets a copy of its values
  /// as its new storage (same tensor, same optimizer state). Returns
  /// whether it copied.
  bool before_write(const std::vector<torch::Tensor>& params);

  /// Tokens lent, and how many times before_write() had to copy.
  uint64_t lent() const { return lent_; }
  uint64_t copies() const { return copies_; }

private:
  // Tokens lent since the last copy and not yet given back; a token
  // decrements the counter it was lent under (release), before_write()
  // reads it (acquire), so the holder's last read happens before the write.
  std::shared_ptr<std::atomic<int64_t>> outstanding_ = std::make_shared<std::atomic<int64_t>>(0);
  uint64_t lent_ = 0;
  uint64_t copies_ = 0;
};

} // namespace eg::learning
