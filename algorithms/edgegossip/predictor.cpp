#include "algorithms/edgegossip/predictor.hpp"
#include "common/error.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace eg::learning {

// --- contention_sampler --------------------------------------------------------

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

double jiffies_per_second() {
  static const double hz = [] {
    const long v = sysconf(_SC_CLK_TCK);
    return v > 0 ? static_cast<double>(v) : 100.0;
  }();
  return hz;
}

// Reads up to `n` numbers from `in` into `out`; fields a kernel does not
// have stay 0.
void read_numbers(std::istream& in, double* out, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!(in >> out[i])) {
      out[i] = 0;
      return;
    }
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool only(const std::string& s, size_t from, const char* allowed) {
  return s.size() > from && s.find_first_not_of(allowed, from) == std::string::npos;
}

// Whole physical disks only: a partition (sda1, vdb2, nvme0n1p1, mmcblk0p1)
// repeats its disk's I/O, and loop, ram, zram, dm-* and md* devices sit on
// top of the physical disks or in memory. So sd/vd/hd/xvd names count when
// they do not end in a digit, NVMe names when they are exactly nvmeXnY, and
// MMC names when they are exactly mmcblkX.
bool whole_disk(const std::string& name) {
  for (const char* prefix : {"sd", "vd", "hd", "xvd"})
    if (starts_with(name, prefix))
      return name.size() > std::char_traits<char>::length(prefix) &&
             !std::isdigit(static_cast<unsigned char>(name.back()));
  if (starts_with(name, "nvme"))
    return only(name, 4, "0123456789n") && name.find('n', 4) != std::string::npos;
  if (starts_with(name, "mmcblk"))
    return only(name, 6, "0123456789");
  return false;
}

// /proc/stat, first line: user nice system idle iowait irq softirq steal.
// Idle and iowait are not work; guest time is already inside user.
double read_busy_jiffies() {
  std::ifstream f("/proc/stat");
  std::string line;
  if (!std::getline(f, line) || !starts_with(line, "cpu"))
    return 0;
  std::istringstream in(line.substr(3));
  double v[8] = {};
  read_numbers(in, v, 8);
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

// /proc/self/stat: utime and stime are fields 14 and 15. The command name
// (field 2) is in parentheses and may hold spaces, so count after the last ')'.
double read_self_jiffies() {
  std::ifstream f("/proc/self/stat");
  std::string line;
  if (!std::getline(f, line))
    return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream in(line.substr(close + 1));
  std::string skip;
  for (int field = 3; field < 14; ++field)
    in >> skip;
  double v[2] = {};
  read_numbers(in, v, 2);
  return v[0] + v[1];
}

// /proc/net/dev: received and transmitted bytes of every interface. Loopback
// counts too: co-located programs talking to each other load the machine.
double read_net_bytes() {
  std::ifstream f("/proc/net/dev");
  std::string line;
  double bytes = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos)
      continue;  // the two header lines
    std::istringstream in(line.substr(colon + 1));
    double v[9] = {};
    read_numbers(in, v, 9);
    bytes += v[0] + v[8];
  }
  return bytes;
}

// /proc/diskstats: major minor name reads merged sectors_read ms writes merged
// sectors_written ...; sectors are 512 bytes whatever the device's own size.
double read_disk_bytes() {
  std::ifstream f("/proc/diskstats");
  std::string line;
  double sectors = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string major, minor, name;
    if (!(in >> major >> minor >> name) || !whole_disk(name))
      continue;
    double v[7] = {};
    read_numbers(in, v, 7);
    sectors += v[2] + v[6];
  }
  return sectors * 512;
}

// /proc/self/task/<tid>/schedstat: nanoseconds on a CPU, nanoseconds
// runnable but waiting in a run queue, time slices. Summed over the threads
// alive now (a thread that ended takes its share along; the deltas are
// clamped at 0).
void read_schedstat(double& run_ns, double& wait_ns) {
  run_ns = wait_ns = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::ifstream f(it->path() / "schedstat");
    double v[2] = {};
    read_numbers(f, v, 2);
    run_ns += v[0];
    wait_ns += v[1];
  }
}

} // namespace

contention_sampler::contention_sampler() : last_(read()) {}

contention_sampler::counters contention_sampler::read() {
  counters c;
  c.wall = steady_seconds();
  c.busy_jiffies = read_busy_jiffies();
  c.self_jiffies = read_self_jiffies();
  c.net_bytes = read_net_bytes();
  c.disk_bytes = read_disk_bytes();
  read_schedstat(c.run_ns, c.wait_ns);
  return c;
}

contention contention_sampler::sample() {
  const counters now = read();
  const double wall = now.wall - last_.wall;
  // Counters can go back (an interface or disk removed): count no traffic then.
  auto delta = [](double later, double earlier) { return std::max(0.0, later - earlier); };
  contention u;
  if (wall > 0) {
    const double others = delta(now.busy_jiffies, last_.busy_jiffies) -
                          delta(now.self_jiffies, last_.self_jiffies);
    u.core = std::max(0.0, others / jiffies_per_second() / wall);
    u.net = delta(now.net_bytes, last_.net_bytes) / 1e6 / wall;
    u.disk = delta(now.disk_bytes, last_.disk_bytes) / 1e6 / wall;
    // Waiting per second run; a process that hardly ran (under 10 ms) says
    // little about the CPUs: the last reading stands.
    const double run = delta(now.run_ns, last_.run_ns);
    u.wait = run >= 1e7 ? delta(now.wait_ns, last_.wait_ns) / run : last_wait_;
    last_wait_ = u.wait;
  }
  last_ = now;
  return u;
}

// --- contention_history ----------------------------------------------------------

contention_history::contention_history(double keep_seconds) : keep_(keep_seconds) {}

void contention_history::add(double start, double end, const contention& u) {
  if (!(end > start))
    return;
  spans_.push_back({start, end, u});
  while (!spans_.empty() && spans_.front().end < end - keep_)
    spans_.pop_front();
}

contention contention_history::mean(double from, double to) const {
  contention sum;
  double weight = 0;
  for (auto& s : spans_) {
    double overlap = std::min(to, s.end) - std::max(from, s.start);
    if (overlap <= 0)
      continue;
    sum.core += overlap * s.u.core;
    sum.net += overlap * s.u.net;
    sum.disk += overlap * s.u.disk;
    sum.wait += overlap * s.u.wait;
    weight += overlap;
  }
  if (weight <= 0)
    return spans_.empty() ? contention{} : spans_.back().u;
  sum.core /= weight;
  sum.net /= weight;
  sum.disk /= weight;
  sum.wait /= weight;
  return sum;
}

// --- contention_monitor ----------------------------------------------------------

void contention_monitor::refresh() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (steady_seconds() - sampler_.sampled_at() >= sample_period) {
    double from = sampler_.sampled_at();
    auto u = sampler_.sample();
    history_.add(from, sampler_.sampled_at(), u);
  }
}

contention contention_monitor::last(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  double now = steady_seconds();
  return history_.mean(now - seconds, now);
}

// --- slowdown_model ------------------------------------------------------------

namespace {

bool valid_sample(const contention& u, double t) {
  return std::isfinite(u.core) && std::isfinite(u.net) && std::isfinite(u.disk) &&
         std::isfinite(u.wait) && std::isfinite(t) && t > 0;
}

// The fit's U = (core, net, disk); U_wait is not fitted (slowdown_model).
constexpr size_t features_count = 3;

// A training thread's wall time is the time it runs and the time it waits
// for a CPU: run time = t / (1 + U_wait).
double run_time(double t, const contention& u) { return t / (1 + std::max(0.0, u.wait)); }

// Solves a x = b in place for n <= features_count by Gaussian elimination
// with partial pivoting; a is symmetric positive definite here thanks to the
// ridge term.
void solve(double a[features_count][features_count], double b[features_count], size_t n) {
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col]))
        pivot = r;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c < n; ++c)
        a[r][c] -= f * a[col][c];
      b[r] -= f * b[col];
    }
  }
  for (size_t col = n; col-- > 0;) {
    for (size_t c = col + 1; c < n; ++c)
      b[col] -= a[col][c] * b[c];
    b[col] /= a[col][col];
  }
}

// Version 2 adds U_wait; version 1 text (without it) is still read, with
// U_wait = 0.
constexpr const char* model_header = "edgegossip-slowdown-model 2";
constexpr const char* model_header_v1 = "edgegossip-slowdown-model 1";

} // namespace

std::optional<observation_meter::observation> observation_meter::add(double seconds,
                                                                     uint64_t samples) {
  open_.seconds += seconds;
  open_.samples += samples;
  if (open_.seconds < period_)
    return std::nullopt;
  return flush();
}

std::optional<observation_meter::observation> observation_meter::flush() {
  if (open_.samples == 0 || !(open_.seconds > 0)) {
    open_ = {};
    return std::nullopt;
  }
  auto o = open_;
  open_ = {};
  return o;
}

slowdown_model::slowdown_model(double forgetting, size_t window, double tracking,
                               size_t min_fit_samples, double change)
    : forgetting_(forgetting), window_(window), tracking_(tracking),
      min_fit_samples_(std::max<size_t>(2, min_fit_samples)), change_(change) {
  if (!(change > 1))
    throw argument_error("slowdown_model: change " + std::to_string(change) +
                                " is not above 1");
  if (!(forgetting > 0 && forgetting <= 1))
    throw argument_error("slowdown_model: forgetting " + std::to_string(forgetting) +
                                " is not in (0, 1]");
  if (!(tracking > 0 && tracking <= 1))
    throw argument_error("slowdown_model: tracking " + std::to_string(tracking) +
                                " is not in (0, 1]");
  if (window == 0)
    throw argument_error("slowdown_model: the window must hold at least one sample");
}

void slowdown_model::observe(const contention& u, double seconds_per_point) {
  if (!valid_sample(u, seconds_per_point))
    throw argument_error("slowdown_model::observe: needs finite contention and a positive "
                                "time per point, got " + std::to_string(seconds_per_point));
  samples_.push_back({u, seconds_per_point});
  if (samples_.size() > window_)
    samples_.pop_front();
  refit();
}

void slowdown_model::refit() {
  fit_slopes();
  find_base();
  track_t0();
}

void slowdown_model::fit_slopes() {
  std::fill(std::begin(beta_), std::end(beta_), 0.0);
  const size_t n = samples_.size();
  if (n == 0)
    return;

  // The newest sample weighs 1, each older one `forgetting_` times less.
  std::vector<double> w(n);
  double weight = 1;
  for (size_t k = n; k-- > 0; weight *= forgetting_)
    w[k] = weight;
  auto features = [](const sample& s) {
    return std::array<double, features_count>{s.u.core, s.u.net, s.u.disk};
  };
  auto target = [](const sample& s) { return run_time(s.t, s.u); };

  double sw = 0, mean_t = 0, mean_x[features_count] = {};
  for (size_t k = 0; k < n; ++k) {
    const auto x = features(samples_[k]);
    sw += w[k];
    mean_t += w[k] * target(samples_[k]);
    for (size_t a = 0; a < features_count; ++a)
      mean_x[a] += w[k] * x[a];
  }
  mean_t /= sw;
  for (double& m : mean_x)
    m /= sw;
  beta_[0] = mean_t;
  if (n < min_fit_samples_)
    return;

  // A feature that never changed in the window says nothing about the
  // slowdown: its coefficient stays 0 and the intercept absorbs its level.
  // Samples whose weight underflowed to 0 do not count as a change.
  std::vector<size_t> used;
  for (size_t a = 0; a < features_count; ++a) {
    const double newest = features(samples_.back())[a];
    for (size_t k = n; k-- > 0 && w[k] > 0;)
      if (features(samples_[k])[a] != newest) {
        used.push_back(a);
        break;
      }
  }

  // Centred weighted normal equations: centring separates the intercept, so
  // the slopes solve an m x m system (m <= 4). A slope below 0 (more
  // contention, faster training) is noise: that feature is dropped and the
  // rest fitted again, until every slope left is at least 0.
  double slopes[features_count] = {};
  while (!used.empty()) {
    const size_t m = used.size();
    double c[features_count][features_count] = {}, r[features_count] = {};
    for (size_t k = 0; k < n; ++k) {
      const auto x = features(samples_[k]);
      for (size_t i = 0; i < m; ++i) {
        const double xi = x[used[i]] - mean_x[used[i]];
        r[i] += w[k] * xi * (target(samples_[k]) - mean_t);
        for (size_t j = 0; j < m; ++j)
          c[i][j] += w[k] * xi * (x[used[j]] - mean_x[used[j]]);
      }
    }
    // A tiny ridge, relative to each feature's own spread so that it biases
    // none of them, keeps collinear features (core and disk rising together)
    // solvable.
    for (size_t i = 0; i < m; ++i)
      c[i][i] *= 1 + 1e-9;
    solve(c, r, m);
    size_t most_negative = m;
    for (size_t i = 0; i < m; ++i)
      if (r[i] < 0 && (most_negative == m || r[i] < r[most_negative]))
        most_negative = i;
    if (most_negative == m) {
      for (size_t i = 0; i < m; ++i)
        slopes[used[i]] = r[i];
      break;
    }
    used.erase(used.begin() + static_cast<std::ptrdiff_t>(most_negative));
  }
  for (size_t a = 0; a < features_count; ++a) {
    beta_[1 + a] = slopes[a];
    beta_[0] -= slopes[a] * mean_x[a];
  }
  // The most contention the slopes were fitted on (the samples that still weigh).
  for (size_t a = 0; a < features_count; ++a)
    highest_[a] = -std::numeric_limits<double>::infinity();
  for (size_t k = n; k-- > 0 && w[k] > 0;) {
    const auto x = features(samples_[k]);
    for (size_t a = 0; a < features_count; ++a)
      highest_[a] = std::max(highest_[a], x[a]);
  }
}

void slowdown_model::find_base() {
  base_ = beta_[0];
  if (!(base_ > 0)) {
    // The fit crossed zero (few samples, or noise at low contention): the
    // fastest time actually observed is the best guess of the quiet machine.
    base_ = std::numeric_limits<double>::infinity();
    for (const auto& s : samples_)
      base_ = std::min(base_, run_time(s.t, s.u));
  }
  if (!(base_ > 0) || !std::isfinite(base_))
    base_ = 0;
}

double slowdown_model::slowdown(const contention& u) const {
  if (!(base_ > 0))
    return 1;
  // No more contention than the fit saw: a slope fitted on the network's
  // 0.1 MB/s of a platform's own sparse messages, read at the 10 MB/s of
  // its node's models at an epoch's end, predicted a platform 40x slower
  // than it trained (bench tta, wan, AlexNet). Above the samples the
  // slowdown is the one at their highest; t0 follows what the next
  // observations show. Down to none it holds: the intercept is the quiet
  // machine.
  auto within = [this](double x, size_t a) {
    return std::max(0.0, highest_[a] >= 0 ? std::min(x, highest_[a]) : x);
  };
  const double t = beta_[0] + beta_[1] * within(u.core, 0) + beta_[2] * within(u.net, 1)
                 + beta_[3] * within(u.disk, 2);
  return std::max(1.0, t / base_) * (1 + std::max(0.0, u.wait));
}

void slowdown_model::track_t0() {
  // t0 as the newest samples show it: each time per point divided by the
  // slowdown its contention explains, the newest weighing most.
  // The mean stops at a sample a factor `change_` away from the newer ones'
  // mean when the one before it is too: the level changed there
  // (slowdown_model). One such sample between two that agree is an outlier
  // and left out.
  auto estimate = [this](size_t k) { return samples_[k].t / slowdown(samples_[k].u); };
  auto apart = [this](double a, double b) { return a > b * change_ || a * change_ < b; };
  double sum = 0, weights = 0, weight = 1;
  for (size_t k = samples_.size(); k-- > 0 && weight > 1e-6; weight *= tracking_) {
    const double e = estimate(k);
    if (weights > 0 && apart(e, sum / weights)) {
      if (k == 0 || apart(estimate(k - 1), sum / weights))
        break;
      continue;
    }
    sum += weight * e;
    weights += weight;
  }
  t0_ = weights > 0 ? sum / weights : 0;
}

double slowdown_model::t0() const { return t0_; }

double slowdown_model::seconds_per_point(const contention& u) const {
  return t0() * slowdown(u);
}

double slowdown_model::throughput(const contention& u, int executors) const {
  const double t = seconds_per_point(u);
  return t > 0 && executors > 0 ? executors / t : 0;
}

std::string slowdown_model::serialize() const {
  std::string out = model_header;
  out += '\n';
  char buf[32];
  for (const auto& s : samples_) {
    const char* sep = "";
    for (double v : {s.u.core, s.u.net, s.u.disk, s.u.wait, s.t}) {
      // Shortest form that reads back to the same double.
      const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
      out += sep;
      out.append(buf, end);
      sep = " ";
    }
    out += '\n';
  }
  return out;
}

void slowdown_model::restore(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || (line != model_header && line != model_header_v1))
    throw storage_failure("slowdown_model::restore: line 1 is not '" +
                             std::string(model_header) + "'");
  const bool v1 = line == model_header_v1;
  const size_t fields = v1 ? 4 : 5;
  const char* layout = v1 ? "core net disk seconds" : "core net disk wait seconds";
  std::deque<sample> parsed;
  for (size_t number = 2; std::getline(in, line); ++number) {
    auto malformed = [&] {
      return std::runtime_error("slowdown_model::restore: line " + std::to_string(number) +
                                " is not '" + layout + "': '" + line + "'");
    };
    double v[5] = {};
    const char* p = line.data();
    const char* end = line.data() + line.size();
    for (size_t i = 0; i < fields; ++i) {
      if (i > 0 && (p == end || *p != ' '))
        throw malformed();
      while (p < end && *p == ' ')
        ++p;
      const auto [next, ec] = std::from_chars(p, end, v[i]);
      if (ec != std::errc())
        throw malformed();
      p = next;
    }
    const contention u{v[0], v[1], v[2], v1 ? 0.0 : v[3]};
    const double t = v[fields - 1];
    if (p != end || !valid_sample(u, t))
      throw malformed();
    parsed.push_back({u, t});
    if (parsed.size() > window_)
      parsed.pop_front();
  }
  samples_ = std::move(parsed);
  refit();
}

// -- link_model -------------------------------------------------------------------------

link_model::link_model(uint64_t min_bytes, double tracking, double change)
    : min_bytes_(std::max<uint64_t>(min_bytes, 1)), tracking_(std::clamp(tracking, 0.0, 1.0)),
      change_(std::max(change, 1.0)) {}

void link_model::observe(double send_seconds, uint64_t bytes_sent, double receive_seconds,
                         uint64_t bytes_received) {
  learn(send_, send_seconds, bytes_sent);
  learn(receive_, receive_seconds, bytes_received);
}

void link_model::learn(direction& d, double seconds, uint64_t bytes) const {
  if (bytes < min_bytes_ || !std::isfinite(seconds) || seconds < 0)
    return;
  const double x = seconds / static_cast<double>(bytes);
  if (d.epochs == 0 || x > d.estimate * change_ || x * change_ < d.estimate)
    d.estimate = x;  // the first epoch, or a new level: followed at once
  else
    d.estimate = tracking_ * d.estimate + (1 - tracking_) * x;
  ++d.epochs;
}

} // namespace eg::learning
