#pragma once
// What the first stage of a split model does besides its layers: it drives
// the run (docs/SPLIT.md). No torch and no actors here: the stage actor asks
// the driver what to send, tells it what came back, and measures time.
//
// Each epoch is a shuffled plan of the training set (the shuffle drawn from
// the seed and the epoch, so an epoch started again after a restart sees the
// same batches). At most `window` training batches are in the pipeline at
// once: 1 in backprop mode (each batch's gradient must be back at the first
// stage before the next batch goes), up to `in_flight` in every other mode
// (synthetic, delayed, corrected). A batch is done when the last stage reports it finished and,
// where the driver waits for gradients, its gradient came back. When every
// batch of the epoch is done, the test set goes up the pipeline in batches
// of `test_batch`; once the last of those is reported, the epoch's figures
// are ready.
//
// Batches can be lost (a stage's node went down; a message dropped on the
// way): `pause()` stops sending, and `resume()` (also when nothing came
// back for too long) sends the batches not done again under new ids.
// Reports for ids the driver no longer waits for are ignored, and every id
// is larger than all before it, so `first_live_id()` tells the stages which
// batches they may forget.

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

namespace eg::learning {

/// One epoch of a split run, as the first stage saw it.
struct split_epoch {
  uint32_t epoch = 0;
  double train_loss = 0;      ///< mean over the epoch's batches (at the last stage)
  double train_accuracy = 0;  ///< of the batches as trained
  double test_accuracy = 0;   ///< the chained stages on the test set after the epoch
  double seconds = 0;         ///< training time since the run began (filled in by the caller)
};

struct split_driver_options {
  int64_t batch = 64;         ///< training batch size
  int64_t window = 1;         ///< training batches in the pipeline at once
  bool wait_for_gradient = true;  ///< a batch is done only when its gradient is back
  int64_t test_batch = 1000;  ///< evaluation batch size
  uint64_t seed = 1;          ///< the epochs' shuffles
};

class split_driver {
public:
  /// `train_size` / `test_size`: rows of the training and test sets.
  /// Throws std::invalid_argument for empty sets or non-positive sizes.
  split_driver(int64_t train_size, int64_t test_size, split_driver_options opt);

  /// A batch to send up the pipeline: rows of the training set (test
  /// false) or of the test set.
  struct order {
    uint64_t id = 0;
    bool test = false;
    std::vector<int64_t> rows;
    /// A training batch after which nothing is sent until every batch out
    /// is done (the last of an epoch, or of what was sent again at its end).
    bool last = false;
  };

  /// Runs epochs `first` .. `epochs - 1` (first > 0: a run resumed after
  /// `first` epochs). Batch ids start at `first_id`.
  void start(uint32_t epochs, uint32_t first = 0, uint64_t first_id = 0);
  /// What to send now: nothing while paused, over, or the window is full.
  std::vector<order> next();

  /// The last stage finished batch `id`: for a training batch, the sum of
  /// its samples' losses, its correct answers and its samples.
  void finished(uint64_t id, bool test, double loss_sum, int64_t correct, int64_t samples);
  /// The gradient of batch `id` came back to the first stage.
  void returned(uint64_t id);

  /// Stops sending; what is in the pipeline may be lost.
  void pause();
  /// Sends again (under new ids) every batch not done, then goes on; also
  /// without a pause, when the batches not done are taken as lost.
  void resume();

  /// The epoch being trained starts again from its first batch (the same
  /// shuffle) under new ids, its figures so far dropped: the stages went
  /// back to their checkpoint of the epoch before (a runaway); during the
  /// epoch's evaluation too. Paused or not, as before.
  void restart_epoch();

  /// An epoch whose evaluation just ended (once each).
  std::optional<split_epoch> take_epoch();

  bool paused() const { return paused_; }
  bool over() const { return started_ && epoch_ >= epochs_; }
  /// Training (not evaluating, not over, not paused): the caller counts
  /// training time while this holds.
  bool training() const { return started_ && !over() && !evaluating_ && !paused_; }
  bool evaluating() const { return evaluating_; }
  /// Epochs fully done (trained and evaluated).
  uint32_t epochs_done() const { return epoch_; }
  /// Batches sent and not yet done.
  size_t outstanding() const { return outstanding_.size(); }
  /// Every id below this was sent before the last resume() (or is done):
  /// stages may drop what they hold of them.
  uint64_t first_live_id() const { return first_live_; }
  /// The next id the driver will use.
  uint64_t next_id() const { return next_id_; }

private:
  struct batch {
    bool test = false;
    std::vector<int64_t> rows;
    bool finished = false;
    bool returned = false;
    bool counted = false;  // its figures are in already (sent again for its gradient)
  };
  void begin_epoch();
  void begin_evaluation();
  bool done(const batch& b) const;
  void settle();

  int64_t train_size_;
  int64_t test_size_;
  split_driver_options opt_;
  bool started_ = false;
  bool paused_ = false;
  bool evaluating_ = false;
  uint32_t epochs_ = 0;
  uint32_t epoch_ = 0;
  std::vector<std::vector<int64_t>> queue_;  // batches of this phase not yet sent
  size_t queued_ = 0;                        // next of queue_ to send
  std::map<uint64_t, batch> outstanding_;
  std::vector<batch> again_;                 // lost, to send first
  uint64_t next_id_ = 0;
  uint64_t first_live_ = 0;
  double loss_sum_ = 0;
  int64_t correct_ = 0;
  int64_t samples_ = 0;
  int64_t test_correct_ = 0;
  int64_t test_samples_ = 0;
  std::optional<split_epoch> ready_;
};

} // namespace eg::learning
