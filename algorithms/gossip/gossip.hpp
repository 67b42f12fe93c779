#pragma once
// Gossip arithmetic on model parameters, actor-free. A strategy decides what
// a platform sends after a local step and how a received model is merged.

#include "algorithms/gossip/compression.hpp"
#include "config/registry.hpp"
#include "messages/codec.hpp"

#include <torch/types.h>

#include <functional>
#include <memory>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace eg::learning {

/// One message to send after a step: the current parameters with this
/// gossip weight, to `peer`: an index into the targets the topology gave
/// for this iteration (algorithms/gossip/topology.hpp).
struct send_order {
  size_t peer = 0;
  double weight = 0;
};

/// One push-sum round's split to `targets` peers: each 1 / (targets + 1) of
/// the weight, the last share kept.
std::vector<double> equal_split(size_t targets);

/// Several push-sum rounds made in one step (a platform on a small share
/// has fewer steps than the epoch's rounds): the distinct peers of all the
/// rounds, in the order they first appear, and the fraction of the held
/// weight each is sent. The rounds split one after the other, as if made at
/// once: round j, to d_j peers, sends each 1 / (d_j + 1) of what the rounds
/// before it kept, so after m rounds to one peer each 2^-m is kept. One
/// split of 1 / (d + 1) for all the rounds together kept far more: the
/// platform took in every round's messages but gave out once a step, and
/// hoarded the weight of the cluster (docs/ALGORITHMS.md, "Rounds, not
/// steps"). Rounds after the kept fraction falls below a millionth add
/// nothing.
struct rounds_split {
  std::vector<std::string> peers;
  std::vector<double> fractions;  ///< one per peer, their sum below 1
};
rounds_split split_rounds(const std::vector<std::vector<std::string>>& rounds);

/// What one message carries: dense tensors (views of the parameters, which
/// the platform lends while the message is on its way) or sparse parts
/// (whose bytes `hold` keeps alive).
struct gossip_payload {
  std::vector<messages::tensor_view> tensors;
  std::vector<messages::sparse_part> sparse;
  std::shared_ptr<const void> hold;  ///< null: views of the parameters
  uint64_t edge_seq = 0;             ///< sparse: the message's number on its edge
  uint64_t generation = 0;           ///< sparse: the sender's generation
  bool keyframe = false;             ///< sparse: restarts the edge's copies
  double weight = 0;                 ///< sparse (hold set): the weight share sent, maybe less than the order's
  uint64_t withdrawn = 0;            ///< sparse: messages on its edge taken back before it
};

class gossip_strategy {
public:
  virtual ~gossip_strategy() = default;
  virtual std::string name() const = 0;
  /// The gossip weight this platform holds (GoSGD's a_i, push-sum's w_i);
  /// every message carries part of it, and a merge adds the received part,
  /// so the cluster's total stays constant (1 for GoSGD, n for push-sum).
  virtual double weight() const = 0;
  virtual void set_weight(double w) = 0;
  /// Merges a received model (x_s, a_s) into `params`. `own_rate` and
  /// `received_rate` (r_i and r_s: the share of its data each platform
  /// trains per epoch) scale how much each model counts in the mix; the
  /// gossip weights add up as they always do. 1 and 1: the plain rule.
  virtual void merge(const std::vector<torch::Tensor>& params,
                     const std::vector<torch::Tensor>& received, double received_weight,
                     double own_rate = 1, double received_rate = 1) = 0;
  /// Called after each local step with the number of peers the topology
  /// gives for this iteration (0: none, and then nothing is sent and no
  /// weight leaves); may rescale `params` and the held weight, and returns
  /// the messages to send (each carries the params as they are after this
  /// call), each to one of those peers. One round: each peer is offered
  /// 1 / (targets + 1) of the weight (equal_split).
  std::vector<send_order> after_step(const std::vector<torch::Tensor>& params, size_t targets,
                                     std::mt19937_64& rng) {
    return after_step(params, equal_split(targets), rng);
  }
  /// The same with the fraction of the held weight offered to each peer
  /// given (`split[i]` for peer i, their sum below 1, the rest kept):
  /// several push-sum rounds made in one step (split_rounds). The push-sum
  /// family splits so; GoSGD reads only how many peers there are.
  virtual std::vector<send_order> after_step(const std::vector<torch::Tensor>& params,
                                             const std::vector<double>& split,
                                             std::mt19937_64& rng) = 0;
  /// Whether after_step() reads or writes `params` (false: it decides from
  /// the weight and the random draw alone, and the parameters it is given
  /// may be out of date).
  virtual bool after_step_reads_parameters() const { return true; }
  /// Scales how often this platform exchanges per iteration (1: as
  /// configured). A platform that runs r_i of its iterations in an epoch
  /// exchanges 1 / r_i times as often, so every platform sends as many
  /// messages per epoch: otherwise the slow ones, stepping less, hoard
  /// gossip weight, and their lagging models dominate every merge.
  virtual void scale_exchange(double factor) = 0;
  /// What the message of `order` to peer `to` carries. Dense strategies
  /// send every parameter as it is, named as in `names` (the default); a
  /// sparse one sends the parts its last after_step() made.
  virtual gossip_payload payload(const send_order& order, const std::string& to,
                                 const std::vector<std::string>& names,
                                 const std::vector<torch::Tensor>& params);
  /// Merges a received sparse message from platform `from`. The default
  /// refuses it (std::invalid_argument): a dense strategy takes whole models.
  virtual void merge_sparse(const std::vector<torch::Tensor>& params, const std::string& from,
                            const messages::weights& message, double own_rate = 1,
                            double received_rate = 1);
  /// A message of this platform's to peer `to` that was never sent (the
  /// weights lane skipped or lost it, or the peer was gone): `message` as
  /// it went, without dense tensors. The weight it carried comes back, so
  /// the cluster's total stays what it was (the default: w <- w + s, the
  /// model as it is: the message's model was this platform's a few steps
  /// ago). A push-sum message lost on the way took its share of the total
  /// with it: push-sum's average then leans to the platforms that lost
  /// least, and its weights drift from n.
  virtual void withdraw(const std::vector<torch::Tensor>& params, const std::string& to,
                        const messages::weights& message);
  /// Peers whose edge to this platform is out of step (sparse strategies):
  /// each is asked, once, for a keyframe on it (a message with
  /// messages::weights::keyframe_request). Clears the list.
  virtual std::vector<std::string> keyframe_requests() { return {}; }
  /// Peer `from` asked for a keyframe on this platform's edge to it.
  virtual void keyframe_requested(const std::string& /*from*/) {}
  /// Called after a checkpoint's model was loaded into the parameters.
  virtual void restored(const std::vector<torch::Tensor>& /*params*/) {}
  /// The peers that are live now (after every change).
  virtual void peers_changed(const std::vector<std::string>& /*live*/) {}
  /// Messages merged by their weight alone because they arrived out of step
  /// with their edge (sparse strategies), since the start.
  virtual uint64_t out_of_step() const { return 0; }
  /// Called once the parameters are the ones training starts from (the
  /// initial model, or a restored checkpoint's) and the weight is set.
  virtual void start(const std::vector<torch::Tensor>& /*params*/) {}
};

/// GoSGD (Blot et al.): sum-weight gossip. Start weight 1/M; merge
/// x <- (a x + a_s x_s) / (a + a_s), a <- a + a_s; after a step, with
/// probability p: a <- a / 2 and send (x, a) to one of the peers the
/// topology gives (uniformly among them when it gives several).
class gosgd : public gossip_strategy {
public:
  gosgd(double initial_weight, double exchange_probability);
  std::string name() const override { return "gosgd"; }
  double weight() const override { return weight_; }
  void set_weight(double w) override { weight_ = w; }
  void merge(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& received,
             double received_weight, double own_rate = 1, double received_rate = 1) override;
  using gossip_strategy::after_step;
  std::vector<send_order> after_step(const std::vector<torch::Tensor>& params,
                                     const std::vector<double>& split,
                                     std::mt19937_64& rng) override;
  bool after_step_reads_parameters() const override { return false; }
  void scale_exchange(double factor) override;

private:
  double weight_;
  double configured_p_;
  double p_;
};

/// Stochastic Gradient Push (Assran, Loizou, Ballas, Rabbat, ICML 2019):
/// SGD over push-sum gossip (Kempe, Dobra, Gehrke, FOCS 2003), for
/// directed and time-varying graphs (docs/ALGORITHMS.md, "Push-sum SGD").
/// Each platform holds the numerator x and the push-sum weight w (1 at the
/// start, so the weights sum to the number of platforms); the parameters
/// hold the de-biased model z = x / w, on which gradients are taken and
/// which is evaluated. After every local step to d out-peers it keeps
/// 1 / (d + 1) of (x, w) and sends each peer a share (w / (d + 1) with z);
/// a received share s with z_s is added: z <- (w z + s z_s) / (w + s),
/// w <- w + s. The local step moves z by lr * gradient (x by
/// lr * w * gradient). Synchronous SGP steps x by lr * gradient (z by
/// lr / w), which assumes every platform mixes before each step so that w
/// stays near 1; here platforms run freely, and one that runs ahead halves
/// its w at every step (2^-k after k steps unanswered): lr / w blew the
/// model up to NaN within the first epoch of the default run. Momentum,
/// when configured, is the optimizer's, local and never sent, as in SGP.
class push_sum : public gossip_strategy {
public:
  explicit push_sum(double initial_weight = 1);
  std::string name() const override { return "sgp"; }
  double weight() const override { return weight_; }
  void set_weight(double w) override;
  /// z <- (w r z + s r_s z_s) / (w r + s r_s), w <- w + s. With rates 1
  /// (the default) push-sum's sum, which keeps sum_i w_i z_i exact. Under
  /// EdgeGossip (edgegossip.merge = "rate") the rates are the platforms'
  /// shares, as in GoSGD's merging by rate: a platform that trains less
  /// counts less in each mix. The weights still add up exactly; the mix
  /// leans to the platforms that train more, which is the point
  /// (docs/ALGORITHMS.md, "EdgeGossip over push-sum").
  void merge(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& received,
             double received_weight, double own_rate = 1, double received_rate = 1) override;
  using gossip_strategy::after_step;
  std::vector<send_order> after_step(const std::vector<torch::Tensor>& params,
                                     const std::vector<double>& split,
                                     std::mt19937_64& rng) override;
  bool after_step_reads_parameters() const override { return false; }
  /// Push-sum sends after every step: nothing to scale.
  void scale_exchange(double) override {}

private:
  double weight_;
};

/// Sparse-Push's settings (config: strategy.density, consensus_step,
/// sparse_values, drift_memory).
struct sparse_push_options {
  double density = 0.01;
  double consensus_step = 1;
  messages::value_type values = messages::value_type::float16;
  /// SCSP (skew compensation on): how much of the previous steps the
  /// correction keeps (beta) and how far it answers the pull of the
  /// messages (g: a share g / (1 + g) of a steady drift is removed).
  bool compensate = false;
  double drift_memory = 0.98;
  double drift_gain = 2.5;
};

/// Sparse-Push (Aketi, Singh, Rabaey 2021) as push-sum whose messages carry
/// top-k parts of the model (docs/ALGORITHMS.md, "Sparse-Push"). Each edge
/// i -> j has a public copy z^ of z_i that both ends hold (edge_copies);
/// every message moves it by q = top-k(z_i - z^) and carries the push-sum
/// share s exactly: gamma w_i / (d + 1), or less when the copy lags (see
/// share_bound). The numerator s z^ moves from
/// sender to receiver: the receiver merges the copy as push-sum merges a
/// model, z_j <- (w_j z_j + s z^) / (w_j + s) (by rate under EdgeGossip,
/// push_sum::merge), and the sender keeps the rest, z_i <- (w_i z_i -
/// s z^) / (w_i - s), so with rates 1 the sum of w z over the platforms and
/// the messages in flight changes only by the local steps.
/// What a message leaves out stays in z_i - z^ for the next one on that
/// edge; the sender's step away from z^ scales that residual by
/// w / (w - s), so s is bounded by what the message captured of it.
/// Edge sequence numbers and the sender's generation keep both ends'
/// copies equal. A message the sender's lane did not send comes back
/// (withdraw()): its weight and its numerator return to the sender and its
/// part leaves the edge's copy, and the next messages on the edge count it
/// as withdrawn, so the receiver, missing it, stays in step. A message out
/// of step (lost on the way unknown to the sender, or a peer restarted)
/// merges its weight only; the receiver asks the sender for a keyframe
/// (the whole model), which restarts the edge, and the sender sends one as
/// well when it sees the peer come back. A keyframe goes on the lane before
/// the frames waiting for that peer and is never skipped (messages::lane's
/// urgent frames): a withdrawn keyframe would leave the messages after it
/// to a copy that never restarted. The messages it overtook merge their
/// weight alone.
/// With `compensate` (SCSP), each step is also corrected by k, a leaky
/// integral of what moved z between two steps other than the steps
/// themselves (merges, and the rest kept after a send):
///   k <- beta k - (1 - beta) g (z before this step - z after the last),
///   z <- z - k after the step, |k| at most the steps' (moving) norm.
/// Under consensus every model moves as the average does, so the messages
/// keep pulling a platform whose own steps drift (label skew) the other
/// way; k turns that pull into its own steps, removing g / (1 + g) of a
/// steady drift, with no byte sent (docs/ALGORITHMS.md, "SCSP"). A message
/// that restarts its edge (a keyframe, or the first of a restarted sender)
/// moves z once, and is no drift: it is left out of the pull.
class sparse_push : public gossip_strategy {
public:
  sparse_push(flat_layout layout, sparse_push_options options, double initial_weight = 1);
  std::string name() const override { return options_.compensate ? "scsp" : "sparse-push"; }
  double weight() const override { return weight_; }
  void set_weight(double w) override;
  /// Refuses a dense model: Sparse-Push merges sparse parts only.
  void merge(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& received,
             double received_weight, double own_rate = 1, double received_rate = 1) override;
  /// Merges by rate as push_sum::merge does, the received model being the
  /// edge's copy.
  void merge_sparse(const std::vector<torch::Tensor>& params, const std::string& from,
                    const messages::weights& message, double own_rate = 1,
                    double received_rate = 1) override;
  using gossip_strategy::after_step;
  std::vector<send_order> after_step(const std::vector<torch::Tensor>& params,
                                     const std::vector<double>& split,
                                     std::mt19937_64& rng) override;
  void scale_exchange(double) override {}
  gossip_payload payload(const send_order& order, const std::string& to,
                         const std::vector<std::string>& names,
                         const std::vector<torch::Tensor>& params) override;
  /// Every edge's copies start at `params`: call it with the initial model,
  /// the same on every platform (before a checkpoint is restored).
  void start(const std::vector<torch::Tensor>& params) override;
  /// The restored model is where the next step starts from.
  void restored(const std::vector<torch::Tensor>& params) override;
  /// A peer that comes back after it was gone gets a keyframe next.
  void peers_changed(const std::vector<std::string>& live) override;
  uint64_t out_of_step() const override { return out_of_step_; }
  /// The edges' copies (inspection).
  const edge_copies& copies() const { return model_copies_; }
  /// Takes the message back: w z <- w z + s c, w <- w + s, where c is the
  /// edge's copy as it is now (the copy the message went with, when no
  /// later message on that edge went before it came back), then the copy
  /// loses the message's part (up to float rounding) and the edge counts
  /// one more message withdrawn. A withdrawn keyframe is sent again; a
  /// message older than the edge's last keyframe returns its weight and
  /// numerator alone.
  void withdraw(const std::vector<torch::Tensor>& params, const std::string& to,
                const messages::weights& message) override;
  std::vector<std::string> keyframe_requests() override;
  void keyframe_requested(const std::string& from) override;
  /// Messages in a row that a receiver takes while some of the messages
  /// before them on their edge neither arrived nor were withdrawn: a
  /// withdrawal the sender learnt of after it sent them explains a few;
  /// more mean a message was lost, and the edge is out of step.
  static constexpr uint64_t max_unexplained = 8;

  /// The largest share of weight w a message may take, from what the
  /// sender's out-edges' copies lack of z (the residuals r_f = z - z^_f):
  /// `lacked` = |r_e|^2 of this edge e before the message, and, after it
  /// (d = r_e - q), `left` = |d|^2, `cross` = sum over the `others` other
  /// out-edges f of <r_f, d>. Keeping the rest moves z by e d, e = s / (w -
  /// s): r_e becomes (1 + e) d and each other r_f becomes r_f + e d, so the
  /// residuals' energy sum_f |r_f|^2 changes by
  ///   (1 + e)^2 L + 2 e X + (E - 1) e^2 L - R    (R lacked, L left, X cross, E edges)
  /// which at s = 0 is what the message removed, -(R - L). The bound is the
  /// largest e at which `kept` of that removal remains (a quarter, so that
  /// a message always shrinks the residuals by at least a quarter of what
  /// it carried) (docs/ALGORITHMS.md, "The share bound").
  static double share_bound(double w, double lacked, double left, double cross, size_t others);
  /// What share_bound keeps of a message's removal.
  static constexpr double kept = 0.25;

private:
  struct out_edge {
    uint64_t seq = 0;
    bool keyframe = false;
    uint64_t withdrawn = 0;      ///< messages taken back since the edge began
    uint64_t keyframe_seq = 0;   ///< the last keyframe's number (0: none)
  };
  struct in_edge {
    uint64_t generation = 0;
    /// The messages taken in step since the edge (re)started, counted as
    /// seq - withdrawn would count them: a message in step has
    /// seq - withdrawn = taken + 1.
    uint64_t taken = 0;
    bool valid = false;
    uint64_t unexplained = 0;    ///< messages in a row taken over a gap
    uint64_t since_request = 0;  ///< out-of-step messages since the last request
    /// The number of the keyframe that last restarted the edge: messages
    /// sent before it, which it overtook on the lane, count their weight
    /// alone.
    uint64_t restart_seq = 0;
  };
  sparse_push_options options_;
  double weight_;
  uint64_t generation_;
  edge_copies model_copies_;
  std::map<std::string, out_edge> out_;
  std::map<std::string, in_edge> in_;
  std::set<std::string> live_;
  std::vector<std::string> requests_;  // peers to ask for a keyframe
  uint64_t out_of_step_ = 0;
  /// The receiver's side of an edge that went out of step: ask its sender
  /// for a keyframe now, and again every 16 out-of-step messages.
  void out_of_step_on(const std::string& from, in_edge& edge);
  torch::Tensor z_;  // the model as sent and merged, flat
  // SCSP: the correction k, z as the last step left it, and the moving
  // average of the steps' norm that bounds k.
  torch::Tensor correction_, last_step_;
  double step_norm_ = 0;
  torch::Tensor scratch_;
};

/// What a gossip strategy is built from.
struct gossip_setup {
  int64_t platforms = 1;              ///< in the cluster (GoSGD's start weight 1 / platforms)
  double exchange_probability = 0.05; ///< GoSGD's p
  flat_layout layout;                 ///< the model's parameters, flattened (sparse messages)
  sparse_push_options sparse;         ///< strategy.density, consensus_step, ...
};
using gossip_factory = std::function<std::unique_ptr<gossip_strategy>(const gossip_setup&)>;

/// The rule of each strategy of the gossip and push-sum families, by the
/// strategy's name (config::strategies() holds its traits).
config::registry<gossip_factory>& gossip_rules();

/// Registers a strategy of the gossip or push-sum family: its traits for
/// config and the actors, its rule for the platform's worker. A static
/// object of this type beside the strategy's code is all a new strategy
/// needs (tests/unit/test_registry.cpp adds one so).
struct gossip_registration {
  gossip_registration(const std::string& name, config::strategy_traits traits,
                      gossip_factory make);
};

/// Builds the rule of strategy `name` ("gosgd": GoSGD, start weight
/// 1 / platforms; "sgp": push-sum, start weight 1; "sparse-push" or "scsp"
/// over `layout`, with `sparse`; EdgeGossip and gosgd-async gossip as
/// GoSGD); throws std::invalid_argument for a name with no rule.
std::unique_ptr<gossip_strategy> make_strategy(const std::string& name, int64_t platforms,
                                               double exchange_probability,
                                               const flat_layout& layout = {},
                                               const sparse_push_options& sparse = {});

/// Views of the tensors (names from `names`), contiguous, for encoding. The
/// tensors must stay alive and unchanged while the views are used.
std::vector<messages::tensor_view> to_views(const std::vector<std::string>& names,
                                            const std::vector<torch::Tensor>& tensors);

/// Tensors over decoded views (no copy). Throws std::invalid_argument naming
/// the first tensor whose name, dtype or shape differs from `like`.
std::vector<torch::Tensor> from_views(const std::vector<messages::tensor_view>& views,
                                      const std::vector<std::string>& names,
                                      const std::vector<torch::Tensor>& like);

/// The element-wise mean of several models' parameter lists; with `weights`
/// (one per model, not all 0) the weighted mean, sum_k w_k x_k / sum_k w_k.
std::vector<torch::Tensor> average(const std::vector<std::vector<torch::Tensor>>& models,
                                   const std::vector<double>& weights = {});

/// average(), except in the output layer (the last `output_tensors` tensors,
/// one row per class: LeNet-5's fc3 weight and bias): there the row of
/// class c is the mean weighted by `class_weights[k][c]` (the points of class
/// c model k trained), a row no model has a weight for by `weights`. With
/// label skew a platform that trained a class (perhaps on a small share of
/// its data) owns that class's logit; weighted by points alone, the rows of
/// the platforms that never saw the class (pushed down by every batch)
/// outweighed it. With IID data the rows' weights are the points' in
/// proportion, and this is average().
std::vector<torch::Tensor> average_by_class(const std::vector<std::vector<torch::Tensor>>& models,
                                            const std::vector<double>& weights,
                                            const std::vector<std::vector<double>>& class_weights,
                                            size_t output_tensors = 2);

} // namespace eg::learning
