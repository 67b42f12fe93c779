#pragma once
// Compressed gossip, actor-free: top-k sparsification per tensor, sparse
// parts encoded and checked, and the per-edge public copies with error
// feedback that Sparse-Push and SCSP send through (docs/ALGORITHMS.md,
// "Sparse-Push").

#include "messages/codec.hpp"

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace eg::learning {

/// A model's parameters as one flat vector, the tensors one after another:
/// tensor l holds entries [offsets[l], offsets[l + 1]). Sparse messages
/// index this vector; `fingerprint` (of the names and shapes) travels with
/// them so that a message for another model is refused.
struct flat_layout {
  std::vector<int64_t> offsets{0};
  uint64_t fingerprint = 0;
  int64_t numel() const { return offsets.back(); }
  size_t tensors() const { return offsets.size() - 1; }
  /// Throws std::invalid_argument when names and tensors disagree in number.
  static flat_layout of(const std::vector<std::string>& names,
                        const std::vector<torch::Tensor>& params);
};

/// out <- scale * (the tensors one after another), float32; `out` is
/// allocated on first use.
void flatten_into(const std::vector<torch::Tensor>& params, double scale, torch::Tensor& out);
/// Each tensor of `params` <- scale * its slice of `flat`, in place.
void unflatten_into(const torch::Tensor& flat, double scale,
                    const std::vector<torch::Tensor>& params);

/// Entries of a flat vector: ascending indices and their values.
struct sparse_entries {
  std::vector<uint32_t> indices;
  std::vector<float> values;
};

/// The entries each tensor sends: max(1, round(density * numel)), at most
/// numel.
int64_t entries_for(int64_t numel, double density);

/// Top-k of `flat` per tensor of `layout` (entries_for each): the entries of
/// largest magnitude, as ascending indices into the flat vector. Per tensor
/// rather than over the whole model, so every layer moves (a global top-k
/// would send the layers with the largest values and starve the rest).
sparse_entries top_k(const torch::Tensor& flat, const flat_layout& layout, double density);

/// One sparse message part, encoded: index and value bytes owned here.
struct encoded_part {
  uint64_t layout = 0;
  uint64_t numel = 0;
  uint32_t count = 0;
  messages::index_coding coding = messages::index_coding::delta_varint;
  messages::value_type values = messages::value_type::float16;
  std::vector<uint8_t> index_bytes;
  std::vector<uint8_t> value_bytes;
  /// A view for the codec (points into this part).
  messages::sparse_part view() const;
};

/// Each value <- the value a receiver decodes when it is sent as `type`
/// (float16, float8: rounded to nearest; sign: its sign times its tensor's
/// scale, the mean magnitude of the tensor's entries rounded to binary16).
/// encode() of rounded entries sends exactly them.
void round_as_sent(sparse_entries& e, const flat_layout& layout, messages::value_type type);

/// Encodes entries of a flat vector of `layout` (values as `type`).
encoded_part encode(const sparse_entries& e, const flat_layout& layout, messages::value_type type);
/// Decodes and checks a received part against `layout`: std::invalid_argument
/// naming what is wrong (another model's layout, a length, an index out of
/// range or out of order, a value that is not a finite number).
sparse_entries decode(const messages::sparse_part& part, const flat_layout& layout);

/// The public copies of one flat quantity v (the model z) on the edges of
/// one platform: for each peer it sends to, the
/// copy that peer holds of it, and for each peer it hears from, its copy of
/// that peer's. Every message on an edge moves both ends' copy by the same
/// q = top-k(v - copy): what is not sent stays in v - copy and goes later
/// (error feedback). Copies start at the common initial model, or at 0 for
/// a keyframe, whose q is the whole of v.
class edge_copies {
public:
  edge_copies(flat_layout layout, double density, messages::value_type values);
  /// Where every copy starts (the initial model every platform builds).
  void start(const torch::Tensor& initial);
  /// The part for the edge to `to`: q = top-k(v - copy) rounded as sent;
  /// copy += q. A keyframe restarts the copy at 0 and sends all of v.
  /// `captured` (if given) gets |q|^2 / |v - copy|^2 (1 when v = copy): how
  /// much of what the copy lacked the message carries.
  encoded_part send(const std::string& to, const torch::Tensor& v, bool keyframe,
                    double* captured = nullptr);
  /// Takes a part sent on the edge to `to` back out of its copy (the
  /// message was never sent): copy -= q, exact up to float rounding.
  void withdraw(const std::string& to, const sparse_entries& e);
  /// The copy of the edge from `from` moved by a received part (checked by
  /// decode()): restarted at 0 first for a keyframe, or at the initial model
  /// when `fresh` (the sender's first message of a new generation).
  const torch::Tensor& receive(const std::string& from, const sparse_entries& e, bool keyframe,
                               bool fresh);
  /// The copy held of the edge from `from` (the initial model if none yet).
  const torch::Tensor& received_copy(const std::string& from);
  /// The copy of the edge to `to` (after send()).
  const torch::Tensor& sent_copy(const std::string& to) const { return out_.at(to); }
  /// The copy held of the edge from `from` (after receive()).
  const torch::Tensor& received_copy(const std::string& from) const { return in_.at(from); }
  /// What the out-edges' copies lack of v, seen from the edge to `to` (after
  /// send() to it): `left` = |v - copy_to|^2, and `cross` = the sum over the
  /// other out-edges f of <v - copy_f, v - copy_to>, `others` of them.
  struct residuals {
    double left = 0;
    double cross = 0;
    size_t others = 0;
  };
  residuals residuals_after(const std::string& to, const torch::Tensor& v) const;
  const flat_layout& layout() const { return layout_; }
  size_t edges_out() const { return out_.size(); }
  size_t edges_in() const { return in_.size(); }

private:
  flat_layout layout_;
  double density_;
  messages::value_type values_;
  torch::Tensor initial_;
  std::map<std::string, torch::Tensor> out_, in_;
};

} // namespace eg::learning
