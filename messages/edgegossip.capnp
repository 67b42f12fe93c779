@0x8bb1eaf6c2527e87;
# Everything that crosses nodes or lands on disk. Field numbers are the wire
# format: never renumber; bump messages::protocol_version on incompatible changes.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("eg::messages::wire");

enum DType {
  float32 @0;
  float64 @1;
  int64 @2;
  int32 @3;
  uint8 @4;
}

# Raw contiguous (row-major) tensor bytes.
struct Tensor {
  name @0 :Text;
  dtype @1 :DType;
  shape @2 :List(Int64);
  data @3 :Data;
}

# How the indices of a sparse part are coded (messages/sparse.hpp).
enum IndexCoding {
  deltaVarint @0;  # LEB128 varints of the gaps idx[k] - idx[k-1] - 1, idx[-1] = -1
  fixedBits @1;    # ceil(log2(numel)) bits each, packed LSB-first
  rice @2;         # a parameter byte b, then the gaps Golomb-Rice coded (messages/sparse.hpp)
}

enum ValueType {
  float32 @0;
  float16 @1;  # IEEE binary16
  float8 @2;   # the high byte of an IEEE binary16: 1 sign, 5 exponent, 2 mantissa bits (E5M2)
  sign @3;     # a binary16 scale per tensor with entries, then one sign bit a value (codec.hpp)
}

# A sparse vector over the flattened model (all parameters in order):
# `count` entries of `numel`, values in the order of the indices.
struct SparsePart {
  layout @0 :UInt64;  # fingerprint of the model layout the indices refer to
  numel @1 :UInt64;
  count @2 :UInt32;
  coding @3 :IndexCoding;
  valueType @4 :ValueType;
  indices @5 :Data;
  values @6 :Data;    # count values of valueType, little-endian
}

# Gossip (GoSGD, EdgeGossip, push-sum, Sparse-Push, SCSP): a platform's model
# and its weight, from one platform to a peer.
struct Weights {
  gossipWeight @0 :Float64;
  epoch @1 :UInt64;
  iteration @2 :UInt64;
  tensors @3 :List(Tensor);
  rate @4 :Float64;  # share of its data the sender trains per epoch (r_i); 0: not given
  sparse @5 :List(SparsePart);  # instead of (or beside) dense tensors
  # Sparse-Push: the sender's run of messages on this edge (1, 2, ...), the
  # sender's generation (new at each start), and whether the receiver's copy
  # of the edge restarts from zero with this message (the whole model).
  edgeSeq @6 :UInt64;
  generation @7 :UInt64;
  keyframe @8 :Bool;
  # Sparse-Push: messages on this edge that the sender took back (never
  # sent: its weights lane skipped or lost them) before this one, as far as
  # it knew; and a request, with no model, that the receiver's next message
  # on the edge back to the sender be a keyframe (its copy is out of step).
  withdrawn @9 :UInt64;
  keyframeRequest @10 :Bool;
}

# A parameter-server worker's update (bsp, ssp, async, adacomm, adsp): the
# change of its model since it last pulled the global model.
struct Commit {
  number @0 :UInt64;         # the worker's commit number: pairs the update with the commit's typed half
  tensors @1 :List(Tensor);  # the update, one tensor a parameter
}

# The parameter server's global model, as a worker pulls it.
struct GlobalModel {
  version @0 :UInt64;        # commits the server has applied to it
  tensors @1 :List(Tensor);
}

# Which way a batch goes between two adjacent stages of a split model.
enum StageDirection {
  forward @0;   # activations and labels, up
  backward @1;  # the gradient of the loss in the activations, down
  infer @2;     # test activations and labels, up (no gradient comes back)
}

# One batch between two adjacent stages of a split model.
struct StageBatch {
  direction @0 :StageDirection;
  batch @1 :UInt64;          # the batch's number in the run (the first stage counts)
  tensors @2 :List(Tensor);  # forward, infer: input and labels; backward: gradient
  last @3 :Bool;             # forward: nothing follows until every batch out came back
}

struct Component {
  role @0 :Text;
  name @1 :Text;
  node @2 :Text;
  data @3 :Text;      # a platform's data: sample shape and classes
  samples @4 :UInt64; # a platform's training samples
  stats @5 :Text;     # a platform's node's data statistics (count, sums, sums of squares)
  run @6 :Text;       # a platform's node's run settings (model, strategy, run fingerprint)
}

struct Hello {
  node @0 :Text;
  secretDigest @1 :Text;  # proof() of the cluster secret over the nonces
  components @2 :List(Component);
  lanePort @3 :UInt16;  # the node's weights lane (messages/lane.hpp); 0: none
  nonce @4 :Text;       # the sender's fresh nonce (messages/secret.hpp)
  challenge @5 :Text;   # the other side's nonce this hello answers
}

struct Plan {
  epoch @0 :UInt32;
  ratio @1 :Float64;
  lastEpoch @2 :UInt32;
  adopt @3 :List(Text);
  adoptPart @4 :UInt32;
  adoptParts @5 :UInt32;
  rounds @6 :UInt32;
}

struct Prediction {
  platform @0 :Text;
  throughput @1 :Float64;
  secondsPerPoint @2 :Float64;
  t0 @3 :Float64;
  core @4 :Float64;
  net @5 :Float64;
  disk @6 :Float64;
  observations @7 :UInt64;
  wait @8 :Float64;
  sendSecondsPerByte @9 :Float64;
  receiveSecondsPerByte @10 :Float64;
}

struct PeerTraffic {
  peer @0 :Text;
  messages @1 :UInt64;
  bytes @2 :UInt64;
}

# Bytes of gossip messages by what they carry: the parts of the unpacked
# messages, less what packing saved, are the bytes on the wire.
struct Traffic {
  values @0 :UInt64;   # tensor bytes and sparse values
  indices @1 :UInt64;  # sparse indices
  weights @2 :UInt64;  # the gossip / push-sum weight
  headers @3 :UInt64;  # the rest of the unpacked messages
  packingSaved @4 :Int64;  # bytes the packed encoding saved (negative: it cost)
}

struct EpochReport {
  platform @0 :Text;
  node @1 :Text;
  epoch @2 :UInt32;
  ratio @3 :Float64;
  wallSeconds @4 :Float64;
  computeSeconds @5 :Float64;
  samples @6 :UInt64;
  iterations @7 :UInt64;
  trainLoss @8 :Float64;
  testLoss @9 :Float64;
  testAccuracy @10 :Float64;
  gossipWeight @11 :Float64;
  bytesSent @12 :UInt64;
  bytesReceived @13 :UInt64;
  messagesSent @14 :UInt64;
  messagesReceived @15 :UInt64;
  messagesRefused @16 :UInt64;
  receivedFrom @17 :List(PeerTraffic);
  plannedSamples @18 :UInt64;
  predictedSeconds @19 :Float64;
  classSamples @20 :List(UInt64);
  trafficSent @21 :Traffic;
  trafficReceived @22 :Traffic;
  commits @23 :UInt64;
  staleness @24 :Float64;
  serverVersion @25 :UInt64;
  # The node's weights lane in the epoch: bytes and busy seconds each way.
  linkBytesSent @26 :UInt64;
  linkSendSeconds @27 :Float64;
  linkBytesReceived @28 :UInt64;
  linkReceiveSeconds @29 :Float64;
  # Times the platform went back to its checkpoint in the epoch (its model
  # ran away; train.max_rollbacks).
  rollbacks @30 :UInt32;
}

struct Control {
  command @0 :Text;
  argument @1 :Text;
}

struct Envelope {
  clusterId @0 :Text;
  version @1 :UInt32;
  sender @2 :Text;
  body :union {
    weights @3 :Weights;
    hello @4 :Hello;
    plan @5 :Plan;
    epochReport @6 :EpochReport;
    control @7 :Control;
    prediction @8 :Prediction;
    commit @9 :Commit;
    globalModel @10 :GlobalModel;
    stageBatch @11 :StageBatch;
  }
}

# The body of a stored checkpoint record (storage/ frames it with a magic,
# a format version and a CRC-32).
struct Checkpoint {
  platform @0 :Text;
  epoch @1 :UInt64;
  iteration @2 :UInt64;
  gossipWeight @3 :Float64;
  model @4 :Data;
  optimizer @5 :Data;
  savedUnix @6 :Float64;    # wall-clock time of saving, seconds since 1970
}

# One epoch of the whole cluster, as the balancer saw it.
struct ClusterEpoch {
  epoch @0 :UInt32;
  elapsedSeconds @1 :Float64;
  epochSeconds @2 :Float64;
  samples @3 :UInt64;
  averagedLoss @4 :Float64;
  averagedAccuracy @5 :Float64;
  platformsUp @6 :UInt32;
  trainingSeconds @7 :Float64;
  predictionError @8 :Float64;
  wallSeconds @9 :Float64;
  networkSeconds @10 :Float64;
  evaluationSeconds @11 :Float64;
  tests @12 :List(NodeTest);  # each node's test of the averaged model on its own test data
}

struct NodeTest {
  node @0 :Text;
  correct @1 :UInt64;
  samples @2 :UInt64;
  loss @3 :Float64;
}

# The balancer's record of a run, kept in every node's store so that a
# restarted or successor balancer continues the run (storage/ frames it as
# "EGRS").
struct RunState {
  fingerprint @0 :Text;
  run @1 :Text;
  finished @2 :Bool;
  epochs @3 :List(ClusterEpoch);
  reports @4 :List(Data);   # encoded Envelopes holding EpochReports
  startedUnix @5 :Float64;  # wall-clock start of the run, seconds since 1970
  normalisation @6 :Text;   # the cluster's normalisation ("mean ...; std ..."), "" none
}
