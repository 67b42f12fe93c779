#pragma once
// Every timeout and interval of the actors in one place. Settings a user may
// change are in the cluster file (config.hpp: heartbeat_interval,
// peer_timeout, gossip_max_wait ...); these are the fixed ones.

#include <chrono>

namespace eg::defaults {

using namespace std::chrono_literals;

// -- the balancer ----------------------------------------------------------------
/// Predictions gathered to plan an epoch (a dead predictor is left out).
inline constexpr std::chrono::milliseconds prediction_timeout = 5s;
/// Predictions gathered for a console snapshot.
inline constexpr std::chrono::milliseconds console_prediction_timeout = 2s;
/// Models gathered for the averaged model of an epoch.
inline constexpr std::chrono::milliseconds weights_timeout = 30s;
/// A control request to a platform (pause, resume, checkpoint, stop).
inline constexpr std::chrono::milliseconds control_timeout = 30s;
/// Progress line redrawn (terminal) or start retried.
inline constexpr std::chrono::milliseconds progress_interval = 1s;
/// A progress log line (no terminal) at most this often.
inline constexpr std::chrono::milliseconds progress_log_interval = 10s;
/// A continuing balancer starts with the platforms that joined by then.
inline constexpr std::chrono::milliseconds resume_grace = 3s;

// -- the node --------------------------------------------------------------------
/// Each step of the handshake (challenge, hello) and of dialling.
inline constexpr std::chrono::milliseconds handshake_timeout = 10s;
/// A TLS probe of a peer's certificate.
inline constexpr std::chrono::milliseconds tls_probe_timeout = 5s;
/// How long a dial waits for a TCP connection to a peer before trying again
/// (actors/node/node_peering.cpp: CAF's own connect would block for minutes on a
/// host that does not answer).
inline constexpr std::chrono::milliseconds probe_timeout = 3s;
/// A node that lost all its peers and then finds every other node's port
/// closed (refused) for this long ends: the run ended while it was cut off,
/// or the cluster was stopped (actors/node/node_peering.cpp).
inline constexpr std::chrono::milliseconds alone_timeout = 20s;
/// Between two dials of an unreachable peer.
inline constexpr std::chrono::milliseconds redial_interval = 1s;
/// How long a node dials back a peer whose old connection ended just after
/// it dialled again (node_state::dial_back).
inline constexpr std::chrono::milliseconds dial_back_window = 5s;
/// After start, before a node without the balancer elects one.
inline constexpr std::chrono::milliseconds first_election = 3s;
/// After the balancer's node went down, before electing a successor.
inline constexpr std::chrono::milliseconds succession_delay = 2s;
/// Between two elections while peers are still being dialled.
inline constexpr std::chrono::milliseconds election_retry = 1s;
/// The run is over: local platforms that did not say so by then do not keep
/// the node up.
inline constexpr std::chrono::milliseconds over_grace = 30s;
/// The store's final flush.
inline constexpr std::chrono::milliseconds flush_timeout = 30s;
/// After the flush, for the last messages to peers to leave.
inline constexpr std::chrono::milliseconds release_delay = 500ms;
/// A console request forwarded to the balancer.
inline constexpr std::chrono::milliseconds console_forward_timeout = 3s;

// -- platforms and predictors ---------------------------------------------------
/// A checkpoint saved by the store.
inline constexpr std::chrono::milliseconds checkpoint_timeout = 60s;
/// A worker's commit to the parameter server, answered when the
/// synchronisation model lets it go on (BSP: the round's slowest worker);
/// past this the worker trains on without the answer.
inline constexpr std::chrono::milliseconds commit_timeout = 60s;
/// The parameter server checkpoints its model (when it changed) this often
/// to every node's store: a successor loses at most this much of the run.
inline constexpr std::chrono::milliseconds server_checkpoint_interval = 2s;
/// A parameter-server commit from another node travels in two halves (the
/// typed message, the update on the weights lane); each waits this long for
/// the other, and the worker this long for the model on the lane after the
/// answer. A frame waits at most cluster.gossip_max_wait (2 s by default)
/// in a lane queue before it is skipped, so this is the lane's worst case
/// and some slack.
inline constexpr std::chrono::milliseconds lane_commit_wait = 5s;
/// A platform's progress report to the balancer, at most this often.
inline constexpr std::chrono::milliseconds progress_report_interval = 1s;
/// Push-sum's tau-overlap wait for an in-neighbour's message (algorithms/gossip/
/// topology.hpp, overlap_gate): a source silent this long is not waited for
/// again this epoch.
inline constexpr std::chrono::milliseconds overlap_wait = 1s;
/// The predictor samples the machine's contention this often.
inline constexpr std::chrono::milliseconds contention_sampling = 500ms;

} // namespace eg::defaults
