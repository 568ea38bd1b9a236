// The tuner's planner: the candidate settings of each strategy and a model of their step from the
// profile (docs/tune.md, "How the planner predicts"). Nothing here runs a strategy.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "cnnbench/cluster.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/stream_options.hpp"
#include "cnnbench/train.hpp"
#include "cnnbench/tune.hpp"

namespace cnnbench {

namespace {

// A layer the stream splits into blocks: its --widths key and the floats per sample its blocks
// read and write (LeNet-5's convolutions with their ReLU and max-pool, as the breakdown times them).
struct SplitLayer {
  const char* layer;
  const char* key;
  int LayerWidths::*width;
  int limit;
  double in, out;
};

// c2 splits by input channels only: by kernels it falls back to im2col + SGEMM, about three
// times slower per FLOP (docs/stream.md), so c2k is not a candidate; c1 has one input channel.
std::vector<SplitLayer> split_layers(ModelKind model) {
  if (model == ModelKind::fc3) {
    return {{"f1", "f1", &LayerWidths::f1_blocks, 300, 784, 300},
            {"f2", "f2", &LayerWidths::f2_blocks, 100, 300, 100},
            {"f3", "f3", &LayerWidths::f3_blocks, 10, 100, 10}};
  }
  return {{"c1", "c1k", &LayerWidths::c1_kernel_groups, 6, 784, 6 * 14 * 14},
          {"c2", "c2c", &LayerWidths::c2_channel_groups, 6, 6 * 14 * 14, 16 * 5 * 5},
          {"f1", "f1", &LayerWidths::f1_blocks, 120, 400, 120},
          {"f2", "f2", &LayerWidths::f2_blocks, 84, 120, 84},
          {"f3", "f3", &LayerWidths::f3_blocks, 10, 84, 10}};
}

// The share of the model's parameters in `layer`: the share of the update its blocks run.
double parameter_share(ModelKind model, const std::string& layer) {
  const ModelSpec& spec = model_spec(model);
  std::size_t count = 0;
  for (const ParamTensor& t : spec.tensors) {
    if (t.name.starts_with(layer + ".")) count += t.count;
  }
  return static_cast<double>(count) / static_cast<double>(spec.param_count);
}

// Widths tried per layer on c cores: all of 1..c up to 4 cores, then powers of two and c itself
// (the space is the product over the layers).
std::vector<int> width_choices(int c, int limit) {
  std::set<int> out;
  for (int w = 1; w <= std::min(c, limit); ++w) {
    if (c <= 4 || (w & (w - 1)) == 0 || w == c) out.insert(w);
  }
  return {out.begin(), out.end()};
}

struct StreamSetting {
  LayerWidths widths;
  int microbatches = 1;
};

// The widths and micro-batches a stream run takes from these options, as the strategy resolves
// them (its defaults included: stream_strategy.cpp's parse_microbatches).
StreamSetting stream_setting(ModelKind model, int cores, int batch,
                             const std::map<std::string, std::string>& options) {
  const auto widths = options.find("widths");
  StreamSetting s;
  s.widths = choose_widths(widths == options.end() ? "" : widths->second, model, cores,
                           Consistency::strict, batch);
  const auto m = options.find("microbatches");
  s.microbatches = m != options.end() ? std::stoi(m->second)
                   : s.widths.sample_groups > 1 ? 1
                                                : std::gcd(batch, 2);
  return s;
}

std::string widths_text(ModelKind model, const LayerWidths& w) {
  std::string text = "s=" + std::to_string(w.sample_groups);
  for (const SplitLayer& l : split_layers(model)) text += std::string(",") + l.key + "=" + std::to_string(w.*(l.width));
  return text;
}

std::vector<TuneCandidate> stream_candidates(ModelKind model, int cores, int batch) {
  const StreamSetting fallback = stream_setting(model, cores, batch, {});
  std::vector<TuneCandidate> out;
  const std::vector<SplitLayer> layers = split_layers(model);
  for (int s = 1; s <= cores; ++s) {
    if (cores % s != 0) continue;
    const int c = cores / s;
    // Every combination of the layers' widths, as an odometer over their choices.
    std::vector<std::vector<int>> choices;
    for (const SplitLayer& l : layers) choices.push_back(width_choices(c, l.limit));
    std::vector<std::size_t> at(layers.size(), 0);
    for (;;) {
      LayerWidths w;
      w.sample_groups = s;
      for (std::size_t i = 0; i < layers.size(); ++i) w.*(layers[i].width) = choices[i][at[i]];
      for (int m : {1, 2, 4}) {
        if (batch % m != 0 || (batch / m) % s != 0) continue;
        for (const char* balance : {"static", "dynamic"}) {
          // Balance moves samples between copies: one copy has nothing to move.
          if (s == 1 && std::string(balance) == "static") continue;
          TuneCandidate cand;
          cand.strategy = "stream";
          cand.cores = cores;
          cand.options = {{"widths", widths_text(model, w)}, {"microbatches", std::to_string(m)},
                          {"consistency", "strict"}, {"balance", balance}};
          std::string label = cand.options["widths"];
          std::replace(label.begin(), label.end(), ',', ' ');
          cand.label = label + " m=" + std::to_string(m) + (s > 1 ? std::string(" ") + balance : "");
          // The sweep's stream point: the strategy's defaults, balance dynamic.
          const StreamSetting mine = stream_setting(model, cores, batch, cand.options);
          cand.is_default = std::string(balance) == "dynamic" && mine.microbatches == fallback.microbatches &&
                            nlohmann::json(mine.widths) == nlohmann::json(fallback.widths);
          if (cand.is_default) cand.options.clear();
          out.push_back(std::move(cand));
        }
      }
      std::size_t i = 0;
      while (i < at.size() && ++at[i] == choices[i].size()) at[i++] = 0;
      if (i == at.size()) break;
    }
  }
  return out;
}

// On one node: the threads, the node update (factors where the model's first layer is dense, the
// one kind of model it suits: docs/cluster.md) and the balance between the threads.
std::vector<TuneCandidate> cluster_candidates(ModelKind model, int cores) {
  std::vector<TuneCandidate> out;
  for (int t = 1; t <= cores; ++t) {
    // What --node-update auto runs at this many threads: the sweep's point at t == cores.
    const std::string automatic =
        node_update_name(auto_node_update(model, model_spec(model).param_count, 1, t));
    for (const char* update : {"replicas", "slices", "factors"}) {
      if (std::string(update) == "factors" && !first_layer_dense(model)) continue;
      for (const char* balance : {"static", "dynamic"}) {
        // One thread has no slices to share out and no other thread to balance against.
        if (t == 1 && (std::string(update) != "replicas" || std::string(balance) == "static")) continue;
        TuneCandidate cand;
        cand.strategy = "cluster";
        cand.cores = t;
        cand.options = {{"node-update", update}, {"balance", balance}};
        cand.label = "1x" + std::to_string(t) + " " + update + " " + balance;
        // The sweep's cluster point on one node: all cores, node-update auto, balance dynamic.
        cand.is_default = t == cores && update == (t > 1 ? automatic : "replicas") &&
                          std::string(balance) == "dynamic";
        if (cand.is_default) cand.options.clear();
        out.push_back(std::move(cand));
      }
    }
  }
  return out;
}

// Over hosts, one rank each: the threads per rank, whether backward overlaps the allreduces, the
// balance between the ranks (dynamic moves samples from a slower rank even with one thread), the
// node update where a rank has threads to share it, and whether the ranks replicate the update or
// shard it. The default is the sweep's point.
std::vector<TuneCandidate> cluster_candidates_over_hosts(int cores, int nodes) {
  std::vector<TuneCandidate> out;
  for (int t = 1; t <= cores; ++t) {
    for (const char* overlap : {"on", "off"}) {
      for (const char* balance : {"static", "dynamic"}) {
        for (const char* update : {"replicas", "slices"}) {
          for (const bool sharded : {false, true}) {
            if (t == 1 && std::string(update) == "slices") continue;
            TuneCandidate cand;
            cand.strategy = "cluster";
            cand.cores = t;
            cand.nodes = nodes;
            cand.options = {{"overlap", overlap}, {"balance", balance}};
            if (t > 1) cand.options["node-update"] = update;
            if (sharded) cand.options["rank-update"] = "sharded";
            cand.label = std::to_string(nodes) + "x" + std::to_string(t) + " overlap " + overlap + " " + balance +
                         (t > 1 ? std::string(" ") + update : "") + (sharded ? " sharded" : "");
            cand.is_default = t == cores && std::string(overlap) == "on" && std::string(balance) == "dynamic" &&
                              std::string(update) == "replicas" && !sharded;
            if (cand.is_default) cand.options.clear();
            out.push_back(std::move(cand));
          }
        }
      }
    }
  }
  return out;
}

std::vector<TuneCandidate> blas_candidates(int cores) {
  std::vector<TuneCandidate> out;
  for (int t = 1; t <= cores; ++t) {
    TuneCandidate cand;
    cand.strategy = "blas";
    cand.cores = t;
    cand.label = std::to_string(t) + " thread" + (t == 1 ? "" : "s");
    cand.is_default = t == cores;
    out.push_back(std::move(cand));
  }
  return out;
}

// Longest processing time first onto `cores` cores: the busiest core's work.
double busiest_core(std::vector<double> units, int cores) {
  std::sort(units.begin(), units.end(), std::greater<>());
  std::vector<double> load(static_cast<std::size_t>(std::max(1, cores)), 0.0);
  for (double u : units) *std::min_element(load.begin(), load.end()) += u;
  return *std::max_element(load.begin(), load.end());
}

// How many times a step moves the whole parameter set between cores when k threads of one rank
// each compute on their own slice of the batch: every thread sums the others' gradients for its
// part of the parameters ((k - 1) / k of them from other cores) and reads back the weights the
// others stepped (as many again).
double crossings(int k) { return k > 1 ? 2.0 * (k - 1) / k : 0.0; }

// A copy's step, its firings and the bound that set it, from the profile (docs/tune.md).
void predict_stream(const TuneProfile& p, TuneCandidate& cand) {
  const StreamSetting setting = stream_setting(p.model, cand.cores, p.batch, cand.options);
  const LayerWidths& w = setting.widths;
  const int s = w.sample_groups, m = setting.microbatches;
  const int c = std::max(1, cand.cores / s);
  const int b = p.batch / (m * s);
  const double phi = p.stream_firing_s;
  // Each block's update sums the copies' buffers first: (s + 2) n floats against serial's 3n.
  const double update = p.full_batch().update_s * (s + 2) / 3.0 / s;
  std::vector<double> units;
  double chain = 0, update_total = 0;
  for (const SplitLayer& l : split_layers(p.model)) {
    const int width = w.*(l.width);
    const double block = p.layer_seconds(l.layer, b) / width + 2 * phi;
    const double block_update = update * parameter_share(p.model, l.layer) / width;
    chain += block;
    for (int j = 0; j < width; ++j) units.push_back(m * block + block_update);
    update_total += block_update * width;
    if (width > 1) {
      // Forward: the input duplicated to every block, the outputs concatenated; backward: dout
      // dealt out, the blocks' input gradients summed.
      const double bytes = 4.0 * b * 2 * (width * l.in + l.out);
      const double split_join = 4 * phi + bytes / p.copy_bytes_per_s;
      chain += split_join;
      units.push_back(m * split_join);
    }
  }
  const double loss = p.layer_seconds("loss", b) + phi;
  const double gather = p.data_seconds(b) + phi;
  chain += loss + gather + 2 * phi;  // every micro-batch passes the source and the sink
  units.push_back(m * loss);
  units.push_back(m * gather);
  units.push_back(m * 2 * phi / s);  // the source and the sink, shared by the copies
  const double busiest = busiest_core(units, c);
  // A micro-batch passes the chain of layers in order; the other M - 1 follow it through the
  // pipeline at the busiest core's pace, and the blocks' updates end the step.
  const double piped = chain + (m - 1.0) / m * busiest + update_total / c;
  // The copies' cross-core traffic is left to the update's (s + 2) n: the cluster's cross-core
  // cost put on them overshot their measurement (docs/tune.md, "What the cores cost each other").
  cand.predicted_step_s = std::max(busiest, piped) + p.stream_fixed_s;
  cand.bound = busiest >= piped ? "busiest core" : "chain";
}

// The model's layers in forward order ("c1", "c2", ...), as its tensors name them.
std::vector<std::string> layer_order(ModelKind model) {
  std::vector<std::string> order;
  for (const ParamTensor& tensor : model_spec(model).tensors) {
    const std::string layer = tensor.name.substr(0, tensor.name.find('.'));
    if (order.empty() || order.back() != layer) order.push_back(layer);
  }
  return order;
}

// The cluster over p.nodes hosts, one rank each: the rank's step (`rank_step_s`: its compute at
// its share of the batch, its whole update) slowed by the share of a core its threads get where
// the hosts share one machine's cores, then the step's allreduces on the link, the ring as the
// strategy asks libnbc for. With overlap each starts when backward has finished its first
// layer (a layer's backward taken as two thirds of its forward + backward: two products against
// one) and the one before it has left the link; without, the one allreduce starts when
// backward ends. What runs past backward's end is exposed.
//
// A tbf-capped link gathers tokens at its rate while it idles, up to its bucket: from the last
// allreduce of one step to the first of the next (the update, forward, and backward up to that
// allreduce's layer) and between allreduces. A ring sends 2(p - 1)/p of an allreduce's bytes from
// each rank; the part the tokens cover goes at the link's own speed, taken as free, and the
// allreduce's time is scaled by the part left to the rate. Without it a 1gbit LeNet-5 step, whose
// 0.9 ms of compute lets 112 kB of its 247 kB through before the cap, came out 0.5 ms too long.
//
// --rank-update sharded splits each allreduce into its two halves of the ring's cost: the
// reduce-scatters take the allreduces' places above; after backward and the update of the rank's
// segments (`update_s`, part of rank_step_s) the allgathers follow one another on the link, all
// exposed, the bucket's tokens gathered during the update spent on them.
void predict_cluster_over_hosts(const TuneProfile& p, TuneCandidate& cand, double rank_step_s,
                                double update_s) {
  CNNBENCH_CHECK(p.link.has_value(), "tune: the cluster over " + std::to_string(cand.nodes) +
                                         " hosts needs the link's profile (allreduce-bench)");
  const int t = cand.cores;
  const double share = p.machine_cores > 0
                           ? std::min(1.0, static_cast<double>(p.machine_cores) / (cand.nodes * t))
                           : 1.0;
  const auto overlap = cand.options.find("overlap");
  const bool overlapped = overlap == cand.options.end() || overlap->second == "on";
  const int b = worker_batch(p.batch, cand.nodes, t);
  const auto backward = [&](const std::string& layer) { return 2.0 / 3.0 * p.layer_seconds(layer, b) / share; };
  std::map<std::string, double> done_at;  // when backward has finished each layer
  double clock = backward("loss");
  const std::vector<std::string> order = layer_order(p.model);
  for (auto layer = order.rbegin(); layer != order.rend(); ++layer) {
    clock += backward(*layer);
    done_at[*layer] = clock;
  }
  const std::vector<ScheduledAllreduce> schedule = allreduce_schedule(p.model, overlapped);
  const double work = rank_step_s / share;  // backward's start is 0: the rest of the step idles the link
  double link_free = -(work - clock);       // the last allreduce of the step before ended there
  double tokens = 0;
  const auto rank_update = cand.options.find("rank-update");
  const bool sharded = rank_update != cand.options.end() && rank_update->second == "sharded";
  const double half = sharded ? 0.5 : 1.0;  // of each allreduce: its reduce-scatter, or all of it
  const double sent_share = 2.0 * (cand.nodes - 1) / cand.nodes * half;
  // One transfer of `bytes` (its share `half` of the ring) starting at `start` on the link.
  const auto send = [&](double start, double bytes) {
    double seconds = half * allreduce_seconds(AllreduceAlgorithm::ring, cand.nodes, bytes, *p.link);
    if (p.token_bucket) {
      const TokenBucket& bucket = *p.token_bucket;
      tokens = std::min(bucket.burst_bytes, tokens + bucket.rate_bytes_per_s * (start - link_free));
      const double sent = sent_share * bytes;
      const double covered = std::min(tokens, sent);
      tokens -= covered;
      seconds *= 1 - covered / sent;
    }
    link_free = start + seconds;
  };
  for (auto a = schedule.rbegin(); a != schedule.rend(); ++a) {  // backward starts the last one first
    send(std::max(overlapped ? done_at.at(a->first_layer) : clock, link_free), a->bytes);
  }
  cand.predicted_step_s = work + std::max(0.0, link_free - clock);
  cand.bound = overlapped ? "compute + allreduces past backward" : "compute + allreduce";
  if (!sharded) return;
  // The update of the rank's segments ran after the last reduce-scatter; the allgathers follow it.
  const double gathers_start = std::max(clock, link_free) + update_s / share;
  const double before = link_free;
  link_free = gathers_start;
  tokens = p.token_bucket ? std::min(p.token_bucket->burst_bytes,
                                     tokens + p.token_bucket->rate_bytes_per_s * (gathers_start - before))
                          : 0;
  for (const ScheduledAllreduce& a : schedule) send(link_free, a.bytes);  // in the model's order
  cand.predicted_step_s += link_free - gathers_start;
  cand.bound += " + allgathers after the update";
}

void predict_cluster(const TuneProfile& p, TuneCandidate& cand) {
  const int t = cand.cores;
  const int b = worker_batch(p.batch, cand.nodes, t);
  double compute = p.data_seconds(b);
  for (const auto& [layer, seconds] : p.nearest(b).layer_s) compute += p.layer_seconds(layer, b);
  const auto mode = cand.options.find("node-update");
  // The design the candidate runs: its option, else what auto takes for it.
  const std::string design =
      mode != cand.options.end() ? mode->second
                                 : node_update_name(auto_node_update(p.model, model_spec(p.model).param_count,
                                                                     cand.nodes, t));
  // Floats one thread's update moves over serial's 3n (docs/cluster.md): replicas sum the T
  // buffers themselves up to 2 threads ((T + 2) n), past that a reduce-scatter first (about
  // 4.5n); slices sum and step their slice (n + 2n / T); factors step their own rows of f1
  // (nearly all of FC-3) as serial steps all of them (3n / T), f1's weight gradient being the
  // same flops in the update as in backward.
  const double moved = design == "factors" && t > 1 ? 3.0 / t
                       : design == "slices" && t > 1 ? 1 + 2.0 / t
                       : t <= 2                      ? t + 2.0
                                                     : 4.5;
  // --rank-update sharded: each rank steps 1/nodes of the model (docs/cluster.md, "Across ranks").
  const auto rank_update = cand.options.find("rank-update");
  const bool sharded = cand.nodes > 1 && rank_update != cand.options.end() && rank_update->second == "sharded";
  const double update = p.cluster_update_s * moved / 3.0 * (sharded ? 1.0 / cand.nodes : 1.0);
  cand.predicted_step_s = compute + p.cluster_fixed_s + update + p.cross_core_s * crossings(t);
  cand.bound = "compute + update";
  if (cand.nodes > 1) predict_cluster_over_hosts(p, cand, cand.predicted_step_s, update);
}

void predict_blas(const TuneProfile& p, TuneCandidate& cand) {
  // Between the two profiled thread counts, the part that threads shorten falls as 1/T.
  if (p.cores <= 1) {
    cand.predicted_step_s = p.blas_step_1_s;
  } else {
    const double x = (1.0 / cand.cores - 1.0 / p.cores) / (1.0 - 1.0 / p.cores);
    cand.predicted_step_s = p.blas_step_p_s + (p.blas_step_1_s - p.blas_step_p_s) * x;
  }
  cand.bound = "1/T between the profiled 1 and P threads";
}

}  // namespace

double BatchProfile::rest_s() const {
  double layers = 0;
  for (const auto& [layer, seconds] : layer_s) layers += seconds;
  return std::max(0.0, step_s - layers - data_s - update_s);
}

const BatchProfile& TuneProfile::nearest(int b) const {
  CNNBENCH_CHECK(!serial.empty(), "the profile has no serial step");
  const auto closer = [b](const BatchProfile& x, const BatchProfile& y) {
    return std::abs(x.batch - b) < std::abs(y.batch - b);
  };
  return *std::min_element(serial.begin(), serial.end(), closer);
}

const BatchProfile& TuneProfile::full_batch() const { return nearest(batch); }

namespace {

// Linear in the batch between the profiled batches around b; proportional beyond them.
template <class Get>
double interpolate(const std::vector<BatchProfile>& serial, int b, Get get) {
  const BatchProfile* below = nullptr;
  const BatchProfile* above = nullptr;
  for (const BatchProfile& x : serial) {
    if (x.batch <= b && (!below || x.batch > below->batch)) below = &x;
    if (x.batch >= b && (!above || x.batch < above->batch)) above = &x;
  }
  if (below && above) {
    if (below->batch == above->batch) return get(*below);
    const double f = static_cast<double>(b - below->batch) / (above->batch - below->batch);
    return get(*below) + f * (get(*above) - get(*below));
  }
  const BatchProfile& x = below ? *below : *above;
  return get(x) * b / x.batch;
}

}  // namespace

double TuneProfile::layer_seconds(const std::string& layer, int b) const {
  CNNBENCH_CHECK(!serial.empty(), "the profile has no serial step");
  return interpolate(serial, b, [&layer](const BatchProfile& x) {
    const auto it = x.layer_s.find(layer);
    return it == x.layer_s.end() ? 0.0 : it->second;
  });
}

double TuneProfile::data_seconds(int b) const {
  CNNBENCH_CHECK(!serial.empty(), "the profile has no serial step");
  return interpolate(serial, b, [](const BatchProfile& x) { return x.data_s; });
}

int worker_batch(int batch, int nodes, int threads) {
  const int rank = (batch + nodes - 1) / nodes;
  return (rank + threads - 1) / threads;
}

std::vector<TuneCandidate> tune_candidates(ModelKind model, const std::string& strategy, int cores,
                                           int batch, int nodes) {
  CNNBENCH_CHECK(cores >= 1 && batch >= 1 && nodes >= 1, "tune: cores, batch and nodes must be at least 1");
  if (nodes > 1) {
    CNNBENCH_CHECK(strategy == "cluster", "tune: only the cluster runs over " + std::to_string(nodes) +
                                              " nodes, not '" + strategy + "'");
    return cluster_candidates_over_hosts(cores, nodes);
  }
  if (strategy == "stream") return stream_candidates(model, cores, batch);
  if (strategy == "cluster") return cluster_candidates(model, cores);
  if (strategy == "blas") return blas_candidates(cores);
  fail("tune: no candidates for strategy '" + strategy + "' (it tunes stream, cluster and blas)");
}

std::vector<int> tune_profile_batches(const std::vector<TuneCandidate>& candidates, int batch) {
  std::set<int> batches = {batch};
  for (const TuneCandidate& cand : candidates) {
    if (cand.strategy == "cluster") batches.insert(worker_batch(batch, cand.nodes, cand.cores));
    if (cand.strategy == "stream") {
      // A candidate's options are those of its own model; the micro-batch is all that matters.
      const auto m = cand.options.find("microbatches");
      const auto w = cand.options.find("widths");
      if (m == cand.options.end() || w == cand.options.end()) continue;
      const int s = std::stoi(w->second.substr(2, w->second.find(',') - 2));
      batches.insert(batch / (std::stoi(m->second) * s));
    }
  }
  return {batches.rbegin(), batches.rend()};
}

TuneCandidate stream_profile_graph(ModelKind model, int microbatches) {
  TuneCandidate graph;
  graph.strategy = "stream";
  graph.cores = 1;
  graph.options = {{"widths", widths_text(model, LayerWidths{})},
                   {"microbatches", std::to_string(microbatches)},
                   {"consistency", "strict"}};
  graph.label = "profile m=" + std::to_string(microbatches);
  return graph;
}

int stream_profile_microbatches(int batch) {
  for (int m : {4, 2}) {
    if (batch % m == 0) return m;
  }
  return 1;
}

StreamCosts stream_costs(const TuneProfile& p, double step_1_s, int microbatches, double step_m_s) {
  // The planner's step of a profile graph is linear in the two costs: its value at zero cost
  // and its slope in the cost per firing (the fixed cost adds itself).
  const auto predicted = [&p](int m, double firing_s) {
    TuneProfile at = p;
    at.stream_firing_s = firing_s;
    at.stream_fixed_s = 0;
    TuneCandidate graph = stream_profile_graph(p.model, m);
    predict_stream(at, graph);
    return graph.predicted_step_s;
  };
  constexpr double unit = 1e-6;
  const double base_1 = predicted(1, 0), slope_1 = (predicted(1, unit) - base_1) / unit;
  StreamCosts costs;
  if (microbatches <= 1) {
    costs.firing_s = std::max(0.0, (step_1_s - base_1) / slope_1);
    return costs;
  }
  const double base_m = predicted(microbatches, 0);
  const double slope_m = (predicted(microbatches, unit) - base_m) / unit;
  costs.firing_s = std::max(0.0, ((step_m_s - base_m) - (step_1_s - base_1)) / (slope_m - slope_1));
  costs.fixed_s = std::max(0.0, step_1_s - base_1 - slope_1 * costs.firing_s);
  return costs;
}

double cross_core_seconds(const TuneProfile& p, double measured_step_s) {
  if (p.cores < 2) return 0;
  const std::vector<TuneCandidate> candidates = cluster_candidates(p.model, p.cores);
  const auto profiled = std::find_if(candidates.begin(), candidates.end(),
                                     [](const TuneCandidate& c) { return c.is_default; });
  CNNBENCH_CHECK(profiled != candidates.end(), "tune: the cluster has no default on " +
                                                   std::to_string(p.cores) + " cores");
  TuneProfile without = p;
  without.cross_core_s = 0;
  TuneCandidate predicted = *profiled;
  predict_cluster(without, predicted);
  return std::max(0.0, (measured_step_s - predicted.predicted_step_s) / crossings(p.cores));
}

void predict_step(const TuneProfile& profile, TuneCandidate& candidate) {
  if (candidate.strategy == "stream") {
    predict_stream(profile, candidate);
  } else if (candidate.strategy == "cluster") {
    predict_cluster(profile, candidate);
  } else if (candidate.strategy == "blas") {
    predict_blas(profile, candidate);
  } else {
    fail("tune: no model of strategy '" + candidate.strategy + "'");
  }
}

std::vector<std::size_t> choose_measured(const std::vector<TuneCandidate>& candidates,
                                         const std::function<double(const TuneCandidate&)>& cost,
                                         double budget_s) {
  // Each strategy's candidates, fastest predicted first.
  std::map<std::string, std::vector<std::size_t>> ranked;
  for (std::size_t i = 0; i < candidates.size(); ++i) ranked[candidates[i].strategy].push_back(i);
  for (auto& [strategy, order] : ranked) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return candidates[a].predicted_step_s < candidates[b].predicted_step_s;
    });
  }
  std::vector<std::size_t> chosen;
  double spent = 0;
  const auto take = [&](std::size_t i) {
    if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) return;
    chosen.push_back(i);
    spent += cost(candidates[i]);
  };
  // The least a tune measures, whatever the budget: the default (what the tuned point must beat)
  // and the predicted best of every strategy.
  for (const auto& [strategy, order] : ranked) {
    for (std::size_t i : order) {
      if (candidates[i].is_default) take(i);
    }
    take(order.front());
  }
  // Then the next best of each strategy in turn while the budget lasts.
  std::map<std::string, std::size_t> next;
  for (bool more = true; more;) {
    more = false;
    for (const auto& [strategy, order] : ranked) {
      std::size_t& at = next[strategy];
      while (at < order.size() && std::find(chosen.begin(), chosen.end(), order[at]) != chosen.end()) ++at;
      if (at == order.size()) continue;
      if (spent + cost(candidates[order[at]]) > budget_s) continue;
      take(order[at]);
      more = true;
    }
  }
  return chosen;
}

}  // namespace cnnbench
