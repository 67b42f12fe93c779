#pragma once
// Every actor interface of edgegossip in one place, so the whole protocol can
// be read here. Payloads that cross nodes are Cap'n Proto buffers (`bytes`,
// see messages/codec.hpp); the remaining elements are CAF built-in types, so
// no message type has to be announced to the middleman. Gossip messages
// leave a platform as `shared_gathered` (pieces that reference its
// parameters), travel between nodes on the weights lane (messages/lane.hpp),
// not through the middleman, and are `shared_bytes` once received.

#include "messages/buffer.hpp"
#include "messages/codec.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace eg::actors {

/// A Cap'n Proto message (messages::encode / messages::decode).
using bytes = std::vector<char>;
/// A Cap'n Proto message in the process's buffer cache (as the weights lane
/// receives it, or the sending mixer copies it for a peer in this process),
/// passed between the actors of one process without copying. Never
/// serialized: CAF cannot send it to another node.
using shared_bytes = messages::shared_buffer;
/// A gossip message as a platform sends it: in pieces that reference the
/// platform's parameters (messages::encode_gathered), written to the
/// weights lane as they lie. Local only, like shared_bytes.
using shared_gathered = messages::shared_gathered;

// -- atoms (at most 10 characters each) ----------------------------------------
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using plan_atom = caf::atom_constant<caf::atom("plan")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using gossip_atom = caf::atom_constant<caf::atom("gossip")>;
using send_atom = caf::atom_constant<caf::atom("send")>;
using merge_atom = caf::atom_constant<caf::atom("merge")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using weights_atom = caf::atom_constant<caf::atom("weights")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using wait_atom = caf::atom_constant<caf::atom("wait")>;
using control_atom = caf::atom_constant<caf::atom("control")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpt")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using dial_atom = caf::atom_constant<caf::atom("dial")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using observe_atom = caf::atom_constant<caf::atom("observe")>;
using predict_atom = caf::atom_constant<caf::atom("predict")>;
using store_atom = caf::atom_constant<caf::atom("store")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using elect_atom = caf::atom_constant<caf::atom("elect")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using inspect_atom = caf::atom_constant<caf::atom("inspect")>;
using cut_atom = caf::atom_constant<caf::atom("cut")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using challenge_atom = caf::atom_constant<caf::atom("challenge")>;

// -- store: the node's RocksDB --------------------------------------------------
using store_actor = caf::typed_actor<
  // Saves a platform checkpoint: platform, epochs done, iterations done,
  // gossip weight, model bytes, optimizer bytes. Answers whether it was saved.
  caf::replies_to<checkpoint_atom, std::string, uint64_t, uint64_t, double, std::string,
                  std::string>::with<bool>,
  // Stores a platform's epoch report (messages::epoch_report) under its key.
  caf::reacts_to<metrics_atom, std::string, uint64_t, bytes>,
  // Stores a record: column family name ("rankings", "predictor", ...), key, value.
  caf::reacts_to<store_atom, std::string, std::string, std::string>,
  // Flushes to disk; answers once done.
  caf::replies_to<flush_atom>::with<bool>>;

// -- mixer: the gossip endpoint of one platform ---------------------------------
using mixer_actor = caf::typed_actor<
  // From its platform: send these encoded weights to peer index i (-1: a
  // peer chosen uniformly at random): on the weights lane to a peer on
  // another node, as a local message to one in this process.
  caf::reacts_to<send_atom, int64_t, shared_gathered>,
  // From a peer mixer on a node without a weights lane (through the
  // middleman): encoded weights; checked, counted, passed on.
  caf::reacts_to<gossip_atom, bytes>,
  // The same from the weights lane or a peer in this process.
  caf::reacts_to<gossip_atom, shared_bytes>,
  // From the node: the peer mixers (platform names, handles, and the weights
  // lane of each one's node as messages::to_string(lane_endpoint), "" for
  // none or this process).
  caf::reacts_to<peers_atom, std::vector<std::string>, std::vector<caf::actor>,
                 std::vector<std::string>>,
  // Traffic since the last call, as an encoded epoch_report (counters only).
  caf::replies_to<stats_atom>::with<bytes>>;

// -- predictor: the performance predictor of one platform ----------------------
using predictor_actor = caf::typed_actor<
  // From its platform: wall seconds (idle included) spent on that many points.
  caf::reacts_to<observe_atom, double, uint64_t>,
  // To itself: sample the contention of co-running programs (twice a second).
  caf::reacts_to<tick_atom>,
  // The predicted throughput now, as an encoded messages::prediction.
  caf::replies_to<predict_atom>::with<bytes>>;

// -- platform: model, optimizer and local shard of one platform -----------------
using platform_actor = caf::typed_actor<
  // From the balancer: an encoded plan (epoch, ratio, last epoch).
  caf::reacts_to<plan_atom, bytes>,
  // To itself: one training iteration.
  caf::reacts_to<step_atom>,
  // From its mixer: encoded weights received from a peer, to merge.
  caf::reacts_to<merge_atom, shared_bytes>,
  // The current parameters, encoded (averaging, inspection).
  caf::replies_to<weights_atom>::with<bytes>,
  // From the balancer: the run is over (argument: run name).
  caf::reacts_to<done_atom, std::string>,
  // From the balancer: the deadline of this epoch passed; end it now and
  // report what was trained (ignored for any other epoch).
  caf::reacts_to<cut_atom, uint32_t>,
  // Control: "pause", "resume", "checkpoint", "stop". Answers once done
  // ("checkpoint" and "stop": once the store has the checkpoint).
  caf::replies_to<control_atom, std::string>::with<bool>>;

// -- balancer: one per cluster; plans epochs, gathers reports -------------------
using balancer_actor = caf::typed_actor<
  // From a node: a platform joined (name, node name, platform handle, its
  // predictor's handle).
  caf::reacts_to<join_atom, std::string, std::string, caf::actor, caf::actor>,
  // From a node: its store cannot write (node name, why), for the console.
  caf::reacts_to<failed_atom, std::string, std::string>,
  // From a platform: an encoded epoch_report at the end of an epoch.
  caf::reacts_to<report_atom, bytes>,
  // From a platform: an encoded epoch_report of the epoch so far.
  caf::reacts_to<progress_atom, bytes>,
  // To itself: refresh the progress display.
  caf::reacts_to<tick_atom>,
  // To itself: start (or, resuming, go on with) the run with the platforms
  // that joined so far.
  caf::reacts_to<start_atom>,
  // To itself: the deadline of this epoch (edgegossip.deadline) passed.
  caf::reacts_to<deadline_atom, uint32_t>,
  // From a node, for the inspection console: a command (inspection::command:
  // snapshot, history NAME, pause, resume, checkpoint) and the asking node's
  // name; answered in JSON (actors/inspection.hpp).
  caf::replies_to<inspect_atom, std::string, std::string>::with<std::string>>;

// -- node: one per process; peering, directory, lifetime -------------------------
using node_actor = caf::typed_actor<
  // From a peer node: its encoded hello and component handles (in the
  // order of hello.components); answered with ours.
  caf::replies_to<hello_atom, bytes, std::vector<caf::actor>>::with<bytes,
                                                                  std::vector<caf::actor>>,
  // To itself: dial the peer node of that name (retried until it answers).
  caf::reacts_to<dial_atom, std::string>,
  // From a local platform: it finished the run (platform, run name).
  caf::reacts_to<done_atom, std::string, std::string>,
  // From a local platform: its epoch report, for the node's metrics file.
  caf::reacts_to<report_atom, bytes>,
  // From the launcher: answers with the run name once every local platform
  // is done (or the node was stopped).
  caf::replies_to<wait_atom>::with<std::string>,
  // Control for the whole node: "stop" (clean shutdown).
  caf::reacts_to<control_atom, std::string>,
  // From the balancer: its run state (storage::frame_run_state), to keep in
  // the store of every node of the cluster.
  caf::reacts_to<run_atom, std::string>,
  // To itself: host the balancer if no live node before this one in the
  // succession (cluster.balancer first, then file order) does.
  caf::reacts_to<elect_atom>,
  // From this process's store: it cannot write any more (disk full,
  // read-only, removed); the text says why and what is at risk. Reported
  // once; the node goes on or stops as cluster.on_store_failure says.
  caf::reacts_to<failed_atom, std::string>,
  // From a peer node or the console, before its hello or command: a fresh
  // nonce it must answer (messages/secret.hpp); each is valid once.
  caf::replies_to<challenge_atom>::with<std::string>,
  // From the inspection console: its credentials (inspection::
  // console_credentials, answering a challenge of this node) and a command;
  // answered in JSON by the balancer (forwarded), or refused with an error.
  caf::replies_to<inspect_atom, std::string, std::string>::with<std::string>>;

} // namespace eg::actors

// Local only (see shared_bytes).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(eg::messages::shared_buffer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(eg::messages::shared_gathered)
