// The stream runtime (COStream/StreamIt style): typed actors with pop/push rates, Pipeline and
// SplitJoin composites, the steady-state schedule, partitioning onto cores and a pinned executor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cnnbench/step_timeline.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/trace.hpp"

namespace cnnbench::stream {

// ---- tokens and channels ----------------------------------------------------------------------

// What travels with every token besides its payload.
struct TokenHeader {
  std::int64_t sequence = 0;  // which item of the stream (for training: the micro-batch number)
  std::int64_t version = -1;  // oldest weight version used on the token's path, -1 when none yet
  double scalar = 0;          // one number riding along (training: the micro-batch's loss sum)
};

// A token slot inside a channel: its header and payload bytes.
class TokenRef {
 public:
  TokenRef(TokenHeader* header, std::byte* payload, std::size_t bytes)
      : header_(header), payload_(payload), bytes_(bytes) {}
  TokenHeader& header() const { return *header_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(payload_), bytes_ / sizeof(T)};
  }

 private:
  TokenHeader* header_;
  std::byte* payload_;
  std::size_t bytes_;
};

// Bounded lock-free single-producer/single-consumer ring of fixed-size token slots. The producer
// fills slots in place and publishes them with push(); the consumer reads in place and frees them
// with pop(). Producer and consumer positions sit on separate cache lines.
class Channel {
 public:
  Channel(std::size_t capacity, std::size_t payload_bytes);
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  std::size_t capacity() const { return capacity_; }
  std::size_t payload_bytes() const { return payload_bytes_; }

  // Producer side.
  bool has_room(std::size_t n);           // at least n free slots
  std::size_t writable();                 // free slots right now
  TokenRef write_slot(std::size_t k);     // the k-th free slot, after has_room(k + 1)
  void push(std::size_t n);               // publishes the first n free slots
  // Consumer side.
  bool has_tokens(std::size_t n);         // at least n tokens ready
  std::size_t readable();                 // tokens ready right now
  TokenRef read_slot(std::size_t k);      // the k-th oldest token, after has_tokens(k + 1)
  void pop(std::size_t n);                // frees the n oldest tokens

 private:
  TokenRef slot(std::uint64_t position);

  std::size_t capacity_;
  std::size_t payload_bytes_;
  std::size_t slot_stride_;
  std::vector<TokenHeader> headers_;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> payload_;
  // Producer-owned line: where it writes next, and its last view of the consumer.
  alignas(64) std::atomic<std::uint64_t> write_position_{0};
  std::uint64_t producer_seen_read_ = 0;
  // Consumer-owned line.
  alignas(64) std::atomic<std::uint64_t> read_position_{0};
  std::uint64_t consumer_seen_write_ = 0;
  // Keeps the next object off the consumer line; never read, only there for the layout.
  [[maybe_unused]] alignas(64) char tail_padding_[1] = {};
};

// ---- actors -----------------------------------------------------------------------------------

// One input or output of an actor: the element type and count of one token, and how many tokens
// the actor pops/pushes per firing (and peeks at, for inputs that look ahead).
struct Port {
  std::string element = "f32";
  std::size_t element_bytes = sizeof(float);
  std::size_t elements = 0;  // per token
  int rate = 1;              // tokens popped (input) or pushed (output) per firing
  int peek = 0;              // inputs: tokens visible per firing (>= rate); 0 means rate
  // Tokens the channel must hold before it reuses a slot: an actor that keeps reading a token
  // after popping (input) or pushing (output) it, until `retain - 1` more have passed, asks for
  // this, and the executor sizes the channel to at least that many slots.
  int retain = 0;
  // Connected by a Link (see flatten) rather than by the pipeline or splitjoin around the actor:
  // an actor's linked ports come after its one stream input or output.
  bool linked = false;
  std::size_t token_bytes() const { return element_bytes * elements; }
  int window() const { return peek > rate ? peek : rate; }
  std::string type() const;  // "f32[400]"
};
Port f32_port(std::size_t elements, int rate = 1, int peek = 0);
Port retained(Port port, int tokens);  // port with retain = tokens
Port linked(Port port);                // port with linked = true

class Firing;

// A filter of the dataflow graph. fire() reads input(p, k) for k < window and fills output(p, k)
// for k < rate; the executor then pops/pushes the declared rates. An actor fires when every input
// holds its window and every output has room for its rate, and on nothing else: flow control is a
// feedback edge (see Link), never a shared flag. All firings of an actor happen on one thread, so
// an actor's own state needs no locks.
class Actor {
 public:
  Actor(std::string name, std::vector<Port> inputs, std::vector<Port> outputs);
  virtual ~Actor() = default;
  virtual void fire(Firing& firing) = 0;
  virtual std::string kind() const { return "filter"; }

  const std::string& name() const { return name_; }
  const std::vector<Port>& inputs() const { return inputs_; }
  const std::vector<Port>& outputs() const { return outputs_; }
  // Seconds per firing: a static guess first, then what profiling measured.
  double work_estimate() const { return work_estimate_; }
  void set_work_estimate(double seconds) { work_estimate_ = seconds; }
  // Actors with the same non-empty key are placed on one core (e.g. the forward and backward
  // actors that share one block of parameters).
  const std::string& placement() const { return placement_; }
  void set_placement(std::string key) { placement_ = std::move(key); }
  // What the time breakdown counts the actor's firings as, and the timed layer they belong to
  // (an index into the model's timed layers; -1: none).
  TimeCategory time_category() const { return time_category_; }
  int time_layer() const { return time_layer_; }
  void set_timing(TimeCategory category, int layer = -1) {
    time_category_ = category;
    time_layer_ = layer;
  }

 private:
  std::string name_;
  std::vector<Port> inputs_;
  std::vector<Port> outputs_;
  double work_estimate_ = 1e-6;
  std::string placement_;
  TimeCategory time_category_ = TimeCategory::compute;
  int time_layer_ = -1;
};

// The view an actor gets of its channels during one firing.
class Firing {
 public:
  Firing(std::span<Channel* const> inputs, std::span<Channel* const> outputs)
      : inputs_(inputs), outputs_(outputs) {}
  TokenRef input(std::size_t port, std::size_t k = 0) const { return inputs_[port]->read_slot(k); }
  TokenRef output(std::size_t port, std::size_t k = 0) const {
    return outputs_[port]->write_slot(k);
  }
  // Seconds of this firing that were `category` rather than the actor's own (a parameter
  // block's update inside a layer's firing); one category per firing.
  void count_as(TimeCategory category, double seconds) {
    carved_category_ = category;
    carved_seconds_ += seconds;
  }
  TimeCategory carved_category() const { return carved_category_; }
  double carved_seconds() const { return carved_seconds_; }
  // Where the carved time lay (the last part counted), for the trace's nested span.
  void carved_span(ClockTicks start, ClockTicks end) {
    carved_start_ = start;
    carved_end_ = end;
  }
  ClockTicks carved_start() const { return carved_start_; }
  ClockTicks carved_end() const { return carved_end_; }
  // Seconds of this firing that were compute outside the actor's layer (an injected slowdown);
  // one part per firing.
  void count_as_part(ComputePart part, double seconds) {
    part_ = part;
    part_seconds_ += seconds;
  }
  ComputePart part() const { return part_; }
  double part_seconds() const { return part_seconds_; }

 private:
  std::span<Channel* const> inputs_;
  std::span<Channel* const> outputs_;
  TimeCategory carved_category_ = TimeCategory::other;
  double carved_seconds_ = 0;
  ClockTicks carved_start_ = 0, carved_end_ = 0;
  ComputePart part_ = ComputePart::injected;
  double part_seconds_ = 0;
};

// ---- composites -------------------------------------------------------------------------------

// How a splitjoin hands a token to its branches. Weights count elements per round: a round-robin
// split deals w0 elements to branch 0, w1 to branch 1, ... and repeats until the token is used up
// (per-sample slicing of a (B, C, H, W) micro-batch is weights C_i*H*W, B rounds). No weights means
// one round of each branch's whole token.
struct Split {
  enum class Kind { duplicate, round_robin } kind = Kind::duplicate;
  std::vector<std::size_t> weights;
  static Split duplicate() { return {Kind::duplicate, {}}; }
  static Split round_robin(std::vector<std::size_t> weights = {}) {
    return {Kind::round_robin, std::move(weights)};
  }
};
// How a splitjoin merges its branches: round-robin concatenation (weights as for Split) or the
// element-wise sum of equally sized tokens.
struct Join {
  enum class Kind { concatenate, sum } kind = Kind::concatenate;
  std::vector<std::size_t> weights;
  static Join concatenate(std::vector<std::size_t> weights = {}) {
    return {Kind::concatenate, std::move(weights)};
  }
  static Join sum() { return {Kind::sum, {}}; }
};

// A stream: one actor, a pipeline of streams, or a splitjoin of streams. Nest freely.
class Node {
 public:
  enum class Kind { actor, pipeline, splitjoin };
  static Node filter(std::shared_ptr<Actor> actor);
  static Node pipeline(std::string name, std::vector<Node> stages);
  static Node splitjoin(std::string name, Split split, std::vector<Node> branches, Join join);

  Kind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  const std::shared_ptr<Actor>& actor() const { return actor_; }
  const std::vector<Node>& children() const { return children_; }
  const Split& split() const { return split_; }
  const Join& join() const { return join_; }

 private:
  Kind kind_ = Kind::actor;
  std::string name_;
  std::shared_ptr<Actor> actor_;
  std::vector<Node> children_;
  Split split_;
  Join join_;
};

// ---- the flat graph ---------------------------------------------------------------------------

struct Edge {
  int from = 0, from_port = 0;  // producer actor, output port
  int to = 0, to_port = 0;      // consumer actor, input port
  // A feedback edge closes a cycle (StreamIt's feedback loop, FastFlow's wrap-around): it starts
  // with `initial_tokens` tokens (zero payload, default header) in its channel, so that its
  // consumer can fire before its producer first has. Schedules, stages and the topological order
  // treat it as absent; the balance equations and the executor treat it as any other edge.
  bool feedback = false;
  int initial_tokens = 0;
};

struct Graph {
  std::vector<std::shared_ptr<Actor>> actors;
  std::vector<std::string> paths;  // composite path of each actor, e.g. "lenet5/c2/k0"
  std::vector<Edge> edges;
  std::string edge_name(const Edge& edge) const;  // "c1/conv -> c1/pool"
  // Every actor after its producers, feedback edges left out; Error when the other edges cycle.
  std::vector<int> topological_order() const;
};

// An edge the composites can't express, between linked ports of two actors of the stream: a
// forward link (e.g. a side result skipping the stages between), or a feedback link from a later
// actor back to an earlier one, which must hold at least its consumer's window of initial tokens.
struct Link {
  std::shared_ptr<Actor> from;
  int from_port = 0;
  std::shared_ptr<Actor> to;
  int to_port = 0;
  bool feedback = false;
  int initial_tokens = 0;
  static Link forward(std::shared_ptr<Actor> from, int from_port, std::shared_ptr<Actor> to,
                      int to_port);
  static Link back(std::shared_ptr<Actor> from, int from_port, std::shared_ptr<Actor> to,
                   int to_port, int initial_tokens);
};

// Flattens a stream into actors and edges, creating the split and join actors, then adds the
// links' edges after the stream's. Every connection is type-checked; a mismatch throws Error
// naming the edge, what one side pushes and the other pops. Splitjoins of one branch add no
// actors.
Graph flatten(const Node& root, std::span<const Link> links = {});

// ---- scheduling -------------------------------------------------------------------------------

// Firings per actor: the steady state (the smallest repetition that returns every channel to its
// starting fill) and the initialisation schedule that first fills the look-ahead of peeking inputs.
struct Schedule {
  std::vector<std::int64_t> steady;
  std::vector<std::int64_t> init;
};
// Error naming the edge whose rates don't balance.
Schedule make_schedule(const Graph& graph);

// Work units for partitioning: seconds per steady-state iteration, and traffic in bytes per
// iteration between pairs of units.
struct Traffic {
  int a = 0, b = 0;
  double bytes = 0;
};
// Greedy longest-processing-time onto `cores`, then single moves and pairwise swaps that cut
// cross-core traffic while the busiest core stays within (1 + tolerance) of the greedy result.
// Returns the core of each unit.
std::vector<int> assign_cores(std::span<const double> work, std::span<const Traffic> traffic,
                              int cores, double tolerance = 0.05);
double busiest_core_work(std::span<const double> work, std::span<const int> core_of, int cores);
double cross_core_bytes(std::span<const Traffic> traffic, std::span<const int> core_of);

struct Partition {
  int cores = 1;
  std::vector<int> core_of;   // per actor
  std::vector<int> stage_of;  // per actor
  std::vector<double> core_work;  // estimated seconds per steady-state iteration
  double total_work = 0;
  double predicted_speedup = 1;   // total work / busiest core
  double cross_core_bytes = 0;    // per steady-state iteration
};
// Units are the placement groups (actors with one key) and every other actor on its own.
Partition partition_graph(const Graph& graph, const Schedule& schedule, int cores,
                          double tolerance = 0.05);
// Everything on core 0 (profiling, P = 1).
Partition single_core_partition(const Graph& graph, const Schedule& schedule);
// An actor's stage is its predecessors' largest, +1 when that predecessor sits on another core;
// a feedback edge's producer is no predecessor.
std::vector<int> assign_stages(const Graph& graph, std::span<const int> core_of);

// The graph for Graphviz: one cluster per core, cross-core edges in red.
std::string graph_dot(const Graph& graph, const Partition& partition, const std::string& title);
void write_graph_dot(const std::filesystem::path& path, const Graph& graph,
                     const Partition& partition, const std::string& title);

// ---- execution --------------------------------------------------------------------------------

struct ExecutorOptions {
  bool pin = true;
  std::string worker_prefix = "stream/core";
  // Extra channel capacity in steady-state iterations of tokens beyond what the rates need, so
  // that cores on different stages can run apart.
  int slack_iterations = 1;
  // What a core's idle time counts as in the breakdown: after it finished its share of one
  // iteration and waits for the next, and inside an iteration. The start and end of a run
  // (threads starting, the last tokens draining) are always fill_drain.
  TimeCategory idle_between_iterations = TimeCategory::starvation;
  TimeCategory idle_within_iteration = TimeCategory::starvation;
};

struct ActorStats {
  std::int64_t firings = 0;
  double busy_seconds = 0;
  // Of busy_seconds, what the firings counted as another category (Firing::count_as).
  double carved_seconds = 0;
  double fastest_firing_seconds = 0;  // 0 until it fired
  // Of busy_seconds, the time the OS ran something else on the core: each stretch of firings'
  // descheduled time shared out over its firings by their wall time.
  double descheduled_seconds = 0;
};
struct ChannelStats {
  std::int64_t empty_stalls = 0;  // times the consumer found too few tokens
  std::int64_t full_stalls = 0;   // times the producer found too little room
};
struct CoreStats {
  double busy_seconds = 0;
  std::int64_t firings = 0;
  std::int64_t idle_spins = 0;
};

// The phased executor: one thread per core, each running the actors placed on it (fused into one
// loop) in stage order, firing each one whose inputs are there and whose outputs have room.
// Threads are created per run() and pinned to their core when options.pin is set. Each feedback
// edge's channel starts with its initial tokens; the balance equations return it to that fill at
// the end of every run().
class Executor {
 public:
  Executor(Graph graph, Schedule schedule, Partition partition, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Fires every actor iterations x steady times (plus the init schedule on the first call) and
  // returns when all are done, leaving the channels as the steady state found them. Rethrows the
  // first exception an actor threw; the executor is unusable after that.
  void run(std::int64_t iterations);

  const Graph& graph() const { return graph_; }
  const Schedule& schedule() const { return schedule_; }
  const Partition& partition() const { return partition_; }
  const std::vector<ActorStats>& actor_stats() const { return actor_stats_; }
  const std::vector<ChannelStats>& channel_stats() const { return channel_stats_; }
  const std::vector<CoreStats>& core_stats() const { return core_stats_; }
  // Each core's time over the last run() (wall = the run's), by category (TimeCategory of its
  // actors; idle as ExecutorOptions says): they add up to the wall time.
  const std::vector<StepTimes>& last_run_core_times() const { return last_run_core_times_; }
  // --trace: from the next run on keep each core's spans of the last `steps` iterations (its
  // firings, their carved parts and the waits before them), the executor's first iteration
  // being step first_step; trace() hands the last `steps` whole ones over, a track per core, with
  // flows and queue depths (Trace::labels names the spans: the actors, then their carved parts).
  void keep_spans(std::size_t steps, std::int64_t first_step);
  Trace trace(std::int64_t steps) const;
  double wall_seconds() const { return wall_seconds_; }  // summed over run() calls
  // 1 - busy / (cores x wall): the share of core time spent waiting.
  double bubble_fraction() const;
  const std::vector<PinRecord>& pin_records() const { return pins_; }
  void reset_stats();

 private:
  void run_core(int core, std::int64_t iterations, bool with_init, ClockTicks run_start);
  struct WorkStretch;
  void end_stretch(WorkStretch& stretch, std::span<const int> actors, StepTimes& times);
  void record_firing(SpanRing& spans, int actor, const Firing& firing, ClockTicks gap_start,
                     ClockTicks start, ClockTicks end, TimeCategory gap);
  std::int64_t step_of_firing(int actor, std::int64_t firing) const;
  TimeCategory idle_category(std::int64_t fired, bool idled, std::int64_t init_firings,
                             std::int64_t steady_firings) const;
  static void count_firing(StepTimes& times, const Actor& actor, const Firing& firing,
                           double seconds, TimeCategory gap_category, double gap_seconds);

  Graph graph_;
  Schedule schedule_;
  Partition partition_;
  ExecutorOptions options_;
  std::vector<std::unique_ptr<Channel>> channels_;  // one per edge
  std::vector<std::vector<Channel*>> actor_inputs_, actor_outputs_;
  std::vector<std::vector<int>> actor_input_edges_, actor_output_edges_;
  std::vector<std::vector<int>> core_actors_;  // stage order
  std::vector<ActorStats> actor_stats_;
  std::vector<ChannelStats> channel_stats_;
  std::vector<CoreStats> core_stats_;
  std::vector<StepTimes> last_run_core_times_;
  std::vector<ClockTicks> core_last_firing_end_;  // of the current run, per core
  std::vector<std::unique_ptr<SpanRing>> core_spans_;  // --trace only
  std::vector<std::int64_t> actor_fired_;  // firings since the executor was made, per actor
  std::int64_t first_step_ = 0;            // the step of the first iteration
  std::vector<PinRecord> pins_;
  double wall_seconds_ = 0;
  bool initialised_ = false;
  bool broken_ = false;
  std::atomic<bool> abort_{false};
};

// The profiling warm-up: runs one unmeasured and then `iterations` measured steady-state
// iterations on one unpinned thread and sets every actor's work estimate to its fastest firing
// (the fastest, not the mean, so that a firing preempted by another process doesn't skew it).
void profile_work(Graph& graph, const Schedule& schedule, std::int64_t iterations);

}  // namespace cnnbench::stream
