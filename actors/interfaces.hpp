#pragma once
// Every actor interface of edgegossip in one place, so the whole protocol can
// be read here. Messages are typed: the structs of messages/codec.hpp (plan,
// epoch_report, prediction, hello, control, and one message per training
// protocol: held_weights for gossip, held_commit and held_global_model for
// the parameter server, held_stage_batch for split models) travel between
// the actors of one node as they are; when the middleman carries one to
// another node it goes as a Cap'n Proto envelope, checked once at the door
// (actors/wire.hpp). Tensors between nodes go on the weights lane
// (messages/lane.hpp), not through the middleman: the node's lane callback
// decodes each frame once and hands it on by its body (node_lane.cpp).

#include "actors/wire.hpp"
#include "messages/buffer.hpp"
#include "messages/codec.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::actors {

using messages::control;
using messages::epoch_report;
using messages::held_commit;
using messages::held_global_model;
using messages::held_stage_batch;
using messages::held_weights;
using messages::hello;
using messages::plan;
using messages::prediction;

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
using restore_atom = caf::atom_constant<caf::atom("restore")>;
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
using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;
using rescale_atom = caf::atom_constant<caf::atom("rescale")>;
using overlap_atom = caf::atom_constant<caf::atom("overlap")>;
using withdraw_atom = caf::atom_constant<caf::atom("withdraw")>;
using where_atom = caf::atom_constant<caf::atom("where")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using server_atom = caf::atom_constant<caf::atom("server")>;
using pull_atom = caf::atom_constant<caf::atom("pull")>;
using test_atom = caf::atom_constant<caf::atom("test")>;
using testers_atom = caf::atom_constant<caf::atom("testers")>;
using norm_atom = caf::atom_constant<caf::atom("norm")>;
using classes_atom = caf::atom_constant<caf::atom("classes")>;
/// A node joins a running cluster (edgegossip node --join), and what the
/// nodes tell each other and their balancer of it.
using member_atom = caf::atom_constant<caf::atom("member")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using unsent_atom = caf::atom_constant<caf::atom("unsent")>;

// -- store: the node's RocksDB --------------------------------------------------
using store_actor = caf::typed_actor<
  // Saves a platform checkpoint: platform, epochs done, iterations done,
  // gossip weight, model bytes, optimizer bytes. Answers whether it was saved.
  caf::replies_to<checkpoint_atom, std::string, uint64_t, uint64_t, double, std::string,
                  std::string>::with<bool>,
  // A platform's newest checkpoint that passes its checksum (a rollback):
  // whether there is one, epochs done, iterations done, gossip weight,
  // when it was saved (Unix seconds), model bytes, optimizer bytes.
  caf::replies_to<restore_atom, std::string>::with<bool, uint64_t, uint64_t, double, double,
                                                   std::string, std::string>,
  // Stores a platform's epoch report (platform, epoch, the report).
  caf::reacts_to<metrics_atom, std::string, uint64_t, epoch_report>,
  // Stores a record: column family name ("rankings", "predictor", ...), key, value.
  caf::reacts_to<store_atom, std::string, std::string, std::string>,
  // Flushes to disk; answers once done.
  caf::replies_to<flush_atom>::with<bool>>;

// -- mixer: the gossip endpoint of one platform ---------------------------------
using mixer_actor = caf::typed_actor<
  // From its platform: send these weights (views of its parameters, held by
  // a loan) to that peer platform: on the weights lane to a peer on another
  // node, as a copy to one in this process, through the middleman else.
  caf::reacts_to<send_atom, std::string, held_weights>,
  // From a peer mixer, or the node's weights lane (decoded there): weights
  // to count and pass on to the platform.
  caf::reacts_to<gossip_atom, held_weights>,
  // From its platform: its model for the balancer's average, to send on the
  // weights lane to the balancer's node (argument: that node's lane,
  // messages::to_string(lane_endpoint)), not counted as gossip. Answered
  // with the message's header alone (no tensors) once it is on its way, or
  // with the whole model where it cannot go on the lane (this node has
  // none, the endpoint does not parse, the lane took nothing).
  caf::replies_to<weights_atom, std::string, held_weights>::with<held_weights>,
  // From the node: the peer mixers (platform names, handles, and the weights
  // lane of each one's node as messages::to_string(lane_endpoint), "" for
  // none or this process).
  caf::reacts_to<peers_atom, std::vector<std::string>, std::vector<caf::actor>,
                 std::vector<std::string>>,
  // From its platform, parameter-server strategies: its update (sender the
  // platform) for the server on the node of this weights lane endpoint
  // (messages::to_string(lane_endpoint)); sent on the lane, counted as
  // traffic.
  caf::reacts_to<commit_atom, std::string, held_commit>,
  // From the node's weights lane: the global model the server on that node
  // sent, to count and pass on to the platform.
  caf::reacts_to<pull_atom, std::string, held_global_model>,
  // Traffic since the last call (the counters of an epoch report).
  caf::replies_to<stats_atom>::with<epoch_report>>;

// -- predictor: the performance predictor of one platform ----------------------
using predictor_actor = caf::typed_actor<
  // From its platform: wall seconds (idle included) spent on that many points.
  caf::reacts_to<observe_atom, double, uint64_t>,
  // From its platform: its node's weights lane in the epoch (send seconds,
  // bytes sent, receive seconds, bytes received: messages::link_timing).
  caf::reacts_to<observe_atom, double, uint64_t, double, uint64_t>,
  // To itself: sample the contention of co-running programs (twice a second).
  caf::reacts_to<tick_atom>,
  // The predicted throughput now, and the link's time per byte.
  caf::replies_to<predict_atom>::with<prediction>>;

// -- platform: model, optimizer and local shard of one platform -----------------
using platform_actor = caf::typed_actor<
  // From the balancer: the plan of an epoch (epoch, ratio, last epoch).
  caf::reacts_to<plan_atom, plan>,
  // From the balancer, before every plan: the cluster's normalisation
  // (data::to_text), combined from every node's statistics; the platform
  // trains and ranks with it from then on.
  caf::reacts_to<norm_atom, std::string>,
  // From the balancer, to a platform joining a run in progress: the last
  // averaged model (learning::save_model), which it starts from unless it
  // trained already (a checkpoint of its own restored, or back after a cut).
  caf::reacts_to<adopt_atom, std::string>,
  // To itself: one training iteration.
  caf::reacts_to<step_atom>,
  // To itself: the tau-overlap wait before step k + 1 (argument k) ran out.
  caf::reacts_to<overlap_atom, uint64_t>,
  // From its mixer: weights received from a peer, to merge.
  caf::reacts_to<merge_atom, held_weights>,
  // From its mixer: a message of its own to that peer that was not sent
  // (the weights lane skipped or lost it, or the peer was gone), without
  // its dense tensors: the gossip weight it carried comes back.
  caf::reacts_to<unsent_atom, std::string, held_weights>,
  // From its mixer: the peer platforms reachable now (the topology picks
  // among them).
  caf::reacts_to<peers_atom, std::vector<std::string>>,
  // The current parameters, a copy (averaging, inspection).
  caf::replies_to<weights_atom>::with<held_weights>,
  // From a balancer on another node: the same copy, for its average, sent
  // on the weights lane to the balancer's node (argument: that node's
  // lane), not through the middleman: CAF sends a node's messages to
  // another one after the other on one connection, so a model on a slow
  // link held the heartbeats behind it past cluster.peer_timeout and the
  // platform's node was taken for dead. Answered through the mixer with the
  // header alone (the model follows on the lane), or with the whole model
  // where it cannot go on the lane.
  caf::replies_to<weights_atom, std::string>::with<held_weights>,
  // From the balancer: the run is over (argument: run name).
  caf::reacts_to<done_atom, std::string>,
  // From the balancer: the deadline of this epoch passed; end it now and
  // report what was trained (ignored for any other epoch).
  caf::reacts_to<cut_atom, uint32_t>,
  // From the balancer, push-sum only: multiply the push-sum weight by this
  // factor (the de-biased model is unchanged), so that the live platforms'
  // weights sum to their number again after one was lost or came back.
  caf::reacts_to<rescale_atom, double>,
  // From its node, parameter-server strategies: the server to commit to
  // (a null handle: none is reachable now; commits wait for one) and the
  // weights lane endpoint of its node ("": the server is in this process or
  // its node has no lane; the weights then go in the typed messages).
  caf::reacts_to<server_atom, caf::actor, std::string>,
  // From its mixer: the global model the server sent on the weights lane
  // (from that node), the answer to a commit.
  caf::reacts_to<pull_atom, std::string, held_global_model>,
  // To itself: the model answering the commit of this generation did not
  // come on the weights lane in time.
  caf::reacts_to<pull_atom, uint64_t>,
  // Control: pause, resume, checkpoint, stop. Answers once done (checkpoint
  // and stop: once the store has the checkpoint); ec::bad_request for
  // another verb.
  caf::replies_to<control_atom, control>::with<bool>>;

// -- parameter server: the global model of bsp, ssp, async, adacomm, adsp -----
using server_actor = caf::typed_actor<
  // From a worker (a platform): its update U = (its model) - (the model it
  // last pulled), the mean training loss of its steps since its last
  // commit, what its last commit cost it (seconds to the answer), and
  // whether it ends its epoch with this commit. Answered with the global
  // model and when to commit next (after this many steps, or seconds: one
  // of them > 0), at once or when the synchronisation model lets the
  // worker go on; ec::bad_request for an update that does not fit.
  caf::replies_to<commit_atom, held_commit, double, double, bool>::with<held_global_model,
                                                                        int64_t, double>,
  // The same commit from a worker on another node, whose update travels on
  // the weights lane (it arrives as the next message): the worker, the
  // commit's number, loss, overhead, whether it ends the epoch. Answered
  // with the global model's version and when to commit next; the model
  // itself goes to the worker on the lane just before. ec::lost when the
  // update did not arrive in time (nothing of it was applied: the worker
  // commits it again with its next).
  caf::replies_to<commit_atom, std::string, uint64_t, double, double, bool>::with<uint64_t, int64_t,
                                                                                    double>,
  // From its node's weights lane: a worker's update (sender: the worker),
  // checked there to come from the worker's own node.
  caf::reacts_to<commit_atom, held_commit>,
  // From its node: the platforms live now (expected workers not among them
  // hold no one back), the weights lane endpoint of each one's node
  // (messages::to_string(lane_endpoint); "": in this process, or no lane),
  // and every node's store (where it checkpoints).
  caf::reacts_to<peers_atom, std::vector<std::string>, std::vector<std::string>,
                 std::vector<store_actor>>,
  // The global model, a copy (inspection).
  caf::replies_to<weights_atom>::with<held_global_model>>;

// -- evaluator: the balancer's model averaging -------------------------------------
using evaluator_actor = caf::typed_actor<
  // The platforms' models with each one's weight in the average and its
  // per-class weights of the output layer (empty: by weight alone): the
  // averaged model (no tensors when no model could be averaged).
  caf::replies_to<evaluate_atom, std::vector<held_weights>, std::vector<double>,
                  std::vector<std::vector<double>>>::with<held_weights>>;

// -- tester: a node's test of the averaged model on its own test data ------------
using tester_actor = caf::typed_actor<
  // The averaged model and the cluster's normalisation (data::to_text; "":
  // the node's own): the summed cross-entropy, the correct answers and the
  // samples of this node's test data (no sample leaves the node).
  caf::replies_to<test_atom, held_weights, std::string>::with<double, uint64_t, uint64_t>>;

// -- balancer: one per cluster; plans epochs, gathers reports -------------------
/// The balancer's name on the weights lane: the target of the platforms'
/// models for the average (no platform's name starts with '@').
inline constexpr std::string_view balancer_name = "@balancer";

using balancer_actor = caf::typed_actor<
  // From a node: a platform joined (name, node name, platform handle, its
  // predictor's handle, its data's signature (data::signature), its
  // samples, and its node's data statistics (data::to_text of
  // data::moments; "": none) for the cluster's normalisation, and its
  // node's run settings (config::join_settings; "": not said). One whose
  // data or settings are not the balancer's is refused (verb::refuse).
  caf::reacts_to<join_atom, std::string, std::string, caf::actor, caf::actor, std::string,
                 uint64_t, std::string, std::string>,
  // From a node: its store cannot write (node name, why), for the console.
  caf::reacts_to<failed_atom, std::string, std::string>,
  // From a node: another node could not start (its own data is unusable:
  // another shape than the cluster's, a class outside data.classes, a
  // missing directory): its name, its platforms and why. They are refused as
  // at join, so the run does not wait for them.
  caf::reacts_to<withdraw_atom, std::string, std::vector<std::string>, std::string>,
  // From its node: a node joined the cluster (name, host, port, its
  // platforms); the barrier expects them from the epoch they join in.
  caf::reacts_to<member_atom, std::string, std::string, uint16_t, std::vector<std::string>>,
  // From its node: the node hosting the parameter server now ("": none
  // reachable), for the console.
  caf::reacts_to<server_atom, std::string>,
  // From its node: the nodes whose test data the averaged model is tested
  // on, their testers and their test samples.
  caf::reacts_to<testers_atom, std::vector<std::string>, std::vector<caf::actor>,
                 std::vector<uint64_t>>,
  // From a platform: its report at the end of an epoch.
  caf::reacts_to<report_atom, epoch_report>,
  // From its node's weights lane (target balancer_name): a platform's model
  // for the average, the second half of a weights request that was
  // answered with a header; checked there to come from the platform's node.
  caf::reacts_to<weights_atom, held_weights>,
  // From a platform: its report of the epoch so far.
  caf::reacts_to<progress_atom, epoch_report>,
  // To itself: refresh the progress display.
  caf::reacts_to<tick_atom>,
  // To itself: start (or, resuming, go on with) the run with the platforms
  // that joined so far.
  caf::reacts_to<start_atom>,
  // To itself: the deadline of this epoch (edgegossip.deadline) passed.
  caf::reacts_to<deadline_atom, uint32_t>,
  // From a node, for the inspection console: a command (snapshot, history
  // of a platform, pause, resume, checkpoint) and the asking node's name;
  // answered in JSON (actors/balancer/inspection.hpp).
  caf::replies_to<inspect_atom, control, std::string>::with<std::string>>;

// -- node: one per process; peering, directory, lifetime -------------------------
using node_actor = caf::typed_actor<
  // From a peer node: its hello and component handles (in the order of
  // hello.components); answered with ours, or ec::refused.
  caf::replies_to<hello_atom, hello, std::vector<caf::actor>>::with<hello,
                                                                    std::vector<caf::actor>>,
  // To itself: dial the peer node of that name (retried until it answers).
  caf::reacts_to<dial_atom, std::string>,
  // From a local platform or the balancer: it finished the run (its role,
  // the platform's name (empty for the balancer), run name).
  caf::reacts_to<done_atom, messages::role, std::string, std::string>,
  // From a peer node that just peered with this one: the run this node saw
  // end ("" while it goes on, and to strangers). A node that saw the run end
  // also sends it (role node, its name, the run) to each node peering later.
  caf::replies_to<done_atom>::with<std::string>,
  // From a local platform: its epoch report, for the node's metrics file.
  caf::reacts_to<report_atom, epoch_report>,
  // From the launcher: answers with the run name once every local platform
  // is done (or the node was stopped).
  caf::replies_to<wait_atom>::with<std::string>,
  // Control for the whole node: stop (final checkpoints, clean shutdown).
  caf::reacts_to<control_atom, control>,
  // From the balancer: its run state (storage::frame_run_state), to keep in
  // the store of every node of the cluster.
  caf::reacts_to<run_atom, std::string>,
  // To itself: host the balancer if no live node before this one in the
  // succession (cluster.balancer first, then file order) does.
  caf::reacts_to<elect_atom>,
  // From a peer node about to host the balancer: the node hosting the
  // balancer this node follows ("" if none; "" to strangers as well).
  caf::replies_to<where_atom>::with<std::string>,
  // From a peer node whose balancer regained a majority, before it resumes
  // (argument: the asking node): a node hosting a balancer this node knows
  // of other than the asker ("" if none).
  caf::replies_to<where_atom, std::string>::with<std::string>,
  // From a node with data of its own and no data.classes, before it reads
  // its data (and so before it is a peer): its credentials
  // (inspection::console_credentials, answering a challenge of this node);
  // answered with the cluster's class list (the balancer node's data's, or
  // the list this node was given by another), empty while it knows none,
  // with the shape of the cluster's samples (data::sample_shape::to_string;
  // "" while it knows none) so that a node whose own data has another shape
  // stops before it joins; or refused with ec::refused.
  caf::replies_to<classes_atom, std::string>::with<std::vector<std::string>, std::string>,
  // From a node asking to join the running cluster (edgegossip node
  // --join), before it is a peer: its credentials
  // (inspection::console_credentials, answering a challenge of this node)
  // and its description (config::member_toml). Answered with the cluster
  // file it is to run with (config::to_toml, itself in it as a node that
  // joined), or refused with ec::refused saying why (a wrong secret, a name
  // in use, a strategy whose members are fixed).
  caf::replies_to<member_atom, std::string, std::string>::with<std::string>,
  // From a node of the cluster that cannot start (its data is unusable),
  // before it exits with code 2: its credentials (as member_atom's), its
  // name, its platforms and why. Handed to the balancer hosted here or known
  // here (true), so that the run does not wait for its platforms; false
  // when this node knows no balancer yet; refused with ec::refused.
  caf::replies_to<withdraw_atom, std::string, std::string, std::vector<std::string>,
                  std::string>::with<bool>,
  // From a peer node: the nodes that joined the cluster as it knows them
  // (config::member_toml of each, concatenated); those new here are taken in.
  caf::reacts_to<member_atom, std::string>,
  // From this process's store: it cannot write any more (disk full,
  // read-only, removed); the text says why and what is at risk. Reported
  // once; the node goes on or stops as cluster.on_store_failure says.
  caf::reacts_to<failed_atom, std::string>,
  // From a peer node or the console, before its hello or command: a fresh
  // nonce it must answer (messages/secret.hpp); each is valid once.
  caf::replies_to<challenge_atom>::with<std::string>,
  // From the inspection console (another process, not a node): its
  // credentials (inspection::console_credentials, answering a challenge of
  // this node) and a command as text; answered in JSON by the balancer
  // (forwarded), or refused with ec::refused / ec::bad_request.
  caf::replies_to<inspect_atom, std::string, std::string>::with<std::string>>;

} // namespace eg::actors

// Local only (the weights lane's frames).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(eg::messages::shared_buffer)
