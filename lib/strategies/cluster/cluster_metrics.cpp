// The cluster strategy's report: counters and thread shares summed into one table over the ranks,
// the metrics made from the table, and the pin records gathered for rank 0.
#include "cluster_metrics.hpp"


#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../strategy_options.hpp"
#include "cnnbench/core.hpp"

namespace cnnbench {

std::vector<RankReport> gather_rank_reports(RankGroup& group, const RankCounters& mine,
                                            const std::vector<int>& last_thread_shares) {
  // (ranks, fields + threads): row r is rank r's, zero on every other rank, so the sum is exact.
  const int threads = static_cast<int>(last_thread_shares.size());
  const auto row = static_cast<std::size_t>(RankCounters::fields + threads);
  std::vector<double> table(static_cast<std::size_t>(group.size()) * row, 0.0);
  double* own = table.data() + static_cast<std::size_t>(group.rank()) * row;
  const auto counters = mine.as_array();
  std::copy(counters.begin(), counters.end(), own);
  std::copy(last_thread_shares.begin(), last_thread_shares.end(), own + RankCounters::fields);
  group.sum(table.data(), table.size());

  std::vector<RankReport> reports;
  for (int r = 0; r < group.size(); ++r) {
    const double* values = table.data() + static_cast<std::size_t>(r) * row;
    RankReport report{RankCounters::from(values), {}};
    for (int t = 0; t < threads; ++t) {
      report.last_thread_shares.push_back(static_cast<int>(values[RankCounters::fields + t]));
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

namespace {
std::string environment_or(const char* name, const std::string& otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : otherwise;
}

// The MPI_Iallreduce algorithm Open MPI's libnbc was asked for: 1 (the ring), which the strategy
// asks for, or the job's own (mpirun --mca coll_libnbc_iallreduce_algorithm N, or -x
// OMPI_MCA_coll_libnbc_iallreduce_algorithm=N: both reach the ranks as this variable). What the
// communication model prices the buckets by. Null when unset (libnbc's own choice: MPI started
// before the strategy); a setting in an MCA parameter file is not seen here.
nlohmann::json iallreduce_algorithm_asked() {
  const char* value = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  if (value == nullptr || *value == 0) return nullptr;
  char* end = nullptr;
  const long id = std::strtol(value, &end, 10);
  return *end == 0 ? nlohmann::json(id) : nlohmann::json(value);
}

// The network block: the distinct hosts in order of their first rank; shared memory when one
// host holds every rank, else the ranks' messages cross a network (TCP over the emulated hosts).
nlohmann::json network_json(const ClusterNetwork& network) {
  std::vector<std::string> hosts;
  for (const std::string& host : network.rank_hosts) {
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  return {{"transport", hosts.size() > 1 ? "tcp" : "shm"},
          {"hosts", hosts},
          {"rank_hosts", network.rank_hosts},
          {"link_rate", network.link_rate ? nlohmann::json(*network.link_rate) : nlohmann::json()}};
}
}  // namespace

ClusterNetwork gather_network(RankGroup& group) {
  ClusterNetwork network;
  network.rank_hosts = group.gather_to_all(this_rank_host());
  const std::string rate = environment_or("CNNBENCH_LINK_RATE", "");
  const std::vector<std::string> rates = group.gather_to_all(rate);
  if (!rates[0].empty()) network.link_rate = rates[0];
  return network;
}

nlohmann::json cluster_metrics(const ClusterShape& shape, const std::vector<RankReport>& ranks,
                               const ClusterNetwork& network) {
  double exposed_sum = 0, exposed_max = 0, flight_sum = 0, reduce_bytes_max = 0;
  nlohmann::json ranks_json = nlohmann::json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankCounters& c = ranks[r].counters;
    exposed_sum += c.allreduce_exposed_s;
    exposed_max = std::max(exposed_max, c.allreduce_exposed_s);
    flight_sum += c.allreduce_in_flight_s;
    reduce_bytes_max = std::max(reduce_bytes_max, c.reduce_bytes);
    ranks_json.push_back({{"rank", r},
                          {"host", r < network.rank_hosts.size() ? network.rank_hosts[r] : ""},
                          {"samples", c.samples},
                          {"last_share", c.last_share},
                          {"last_thread_shares", ranks[r].last_thread_shares},
                          {"compute_s", c.compute_s},
                          {"images_per_s_compute", c.throughput},
                          {"intra_node_reduce_s", c.reduce_s},
                          {"allreduce_s", c.allreduce_exposed_s},
                          {"update_s", c.update_s},
                          {"reduce_bytes_per_thread", c.steps > 0 ? c.reduce_bytes / c.steps : 0.0},
                          {"step_s", c.step_s}});
  }
  const int n = shape.ranks;
  const double steps = ranks.empty() ? 0 : ranks[0].counters.steps;
  const double exposed_mean = exposed_sum / n;
  const double flight_mean = flight_sum / n;
  const double payload_per_step =
      n > 1 ? 4.0 * static_cast<double>(shape.parameters) + 8.0 * (n + 1) : 0.0;
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  const double bus_bytes = payload_per_step * bus_factor * steps;
  // Bandwidth over the time transfers were in flight (with overlap, part of it is hidden).
  const double transfer_seconds = shape.overlap_active ? flight_mean : exposed_mean;
  nlohmann::json metrics = {
      {"ranks", n},
      {"threads_per_rank", shape.threads_per_rank},
      {"ranks_per_node", shape.ranks_per_node},
      {strategy_option::overlap.name, shape.overlap ? "on" : "off"},
      {"overlap_active", shape.overlap_active},
      {strategy_option::balance.name, shape.dynamic_balance ? "dynamic" : "static"},
      {"steps", steps},
      {strategy_option::node_update.name, node_update_name(shape.node_update)},
      {strategy_option::rank_update.name, rank_update_name(shape.rank_update)},
      {"reduce_bytes_per_thread", steps > 0 ? reduce_bytes_max / steps : 0.0},
      {"allreduce",
       {{"seconds_mean", exposed_mean},
        {"seconds_max", exposed_max},
        {"ms_per_step_mean", steps > 0 ? 1e3 * exposed_mean / steps : 0.0},
        {"ms_per_step_max", steps > 0 ? 1e3 * exposed_max / steps : 0.0},
        {"payload_bytes_per_step", payload_per_step},
        {"schedule_bytes", n > 1 ? shape.allreduce_bytes : std::vector<double>{}},
        {"iallreduce_algorithm_id", iallreduce_algorithm_asked()},
        {"bytes_moved_per_rank", bus_bytes},
        {"bus_gbps", transfer_seconds > 0 ? bus_bytes / transfer_seconds / 1e9 : 0.0}}},
      {"network", network_json(network)},
      {"per_rank", ranks_json}};
  if (shape.overlap_active) {
    const double hidden = std::max(0.0, flight_mean - exposed_mean);
    metrics["overlap_detail"] = {
        {"in_flight_s_mean", flight_mean},
        {"exposed_s_mean", exposed_mean},
        {"hidden_s_mean", hidden},
        {"hidden_fraction", flight_mean > 0 ? hidden / flight_mean : 0.0},
        {"meaning", "in flight: first layer's allreduce start to last completion; exposed: time "
                    "the step waited on communication; hidden = in flight - exposed"}};
  }
  if (shape.slow_rank >= 0) {
    metrics[strategy_option::slowdown.name] = {{"rank", shape.slow_rank}, {"factor", shape.slow_factor}};
  }
  return metrics;
}

namespace {
// StepTimes as the doubles of one row of the gathered table, and back.
constexpr std::size_t layers_at = time_category_count;
constexpr std::size_t parts_at = layers_at + max_timed_layers;
constexpr std::size_t step_fields = parts_at + compute_part_count + 4;
void put_step(const StepTimes& step, double* row) {
  std::copy(step.seconds.begin(), step.seconds.end(), row);
  std::copy(step.layer_seconds.begin(), step.layer_seconds.end(), row + layers_at);
  std::copy(step.part_seconds.begin(), step.part_seconds.end(), row + parts_at);
  row[step_fields - 4] = step.wall;
  row[step_fields - 3] = step.arrival;
  row[step_fields - 2] = step.descheduled;
  row[step_fields - 1] = step.involuntary_switches;
}
StepTimes get_step(const double* row) {
  StepTimes step;
  std::copy_n(row, time_category_count, step.seconds.begin());
  std::copy_n(row + layers_at, max_timed_layers, step.layer_seconds.begin());
  std::copy_n(row + parts_at, compute_part_count, step.part_seconds.begin());
  step.wall = row[step_fields - 4];
  step.arrival = row[step_fields - 3];
  step.descheduled = row[step_fields - 2];
  step.involuntary_switches = row[step_fields - 1];
  return step;
}
}  // namespace

std::vector<std::vector<std::vector<StepTimes>>> gather_step_times(
    RankGroup& group, const std::vector<const StepTimeline*>& threads) {
  const std::size_t ranks = static_cast<std::size_t>(group.size()), workers = threads.size();
  const std::size_t steps = threads.empty() ? 0 : threads[0]->steps().size();
  // (steps, ranks, threads, fields): this rank's rows filled, every other rank's zero.
  std::vector<double> table(steps * ranks * workers * step_fields, 0.0);
  const auto row = [&](std::size_t step, std::size_t rank, std::size_t thread) {
    return table.data() + ((step * ranks + rank) * workers + thread) * step_fields;
  };
  const auto mine = static_cast<std::size_t>(group.rank());
  for (std::size_t t = 0; t < workers; ++t) {
    CNNBENCH_CHECK(threads[t]->steps().size() == steps, "cluster: threads recorded unequal steps");
    for (std::size_t k = 0; k < steps; ++k) put_step(threads[t]->steps()[k], row(k, mine, t));
  }
  if (ranks > 1 && !table.empty()) group.sum(table.data(), table.size());
  std::vector<std::vector<std::vector<StepTimes>>> out(
      steps, std::vector<std::vector<StepTimes>>(ranks, std::vector<StepTimes>(workers)));
  for (std::size_t k = 0; k < steps; ++k) {
    for (std::size_t r = 0; r < ranks; ++r) {
      for (std::size_t t = 0; t < workers; ++t) out[k][r][t] = get_step(row(k, r, t));
    }
  }
  return out;
}

BreakdownBuilder cluster_breakdown_builder(int ranks, int threads_per_rank) {
  std::vector<WorkerId> workers;
  std::vector<int> unit_of;
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < threads_per_rank; ++t) {
      if (threads_per_rank == 1) {
        workers.push_back({"rank", r, -1});
      } else {
        workers.push_back({"thread", t, ranks > 1 ? r : -1});
      }
      unit_of.push_back(ranks > 1 ? r : t);
    }
  }
  return BreakdownBuilder(std::move(workers), ranks > 1 ? "rank" : "thread", std::move(unit_of));
}

std::vector<TraceTrack> gather_trace_tracks(RankGroup& group, const std::vector<TraceTrack>& own) {
  // A rank's tracks as bytes (the ranks run one binary): per track its thread, its span count,
  // its first whole step and its spans.
  std::string mine;
  const auto append = [&](const void* data, std::size_t bytes) {
    mine.append(static_cast<const char*>(data), bytes);
  };
  for (const TraceTrack& track : own) {
    const std::int64_t header[3] = {track.thread, static_cast<std::int64_t>(track.spans.size()),
                                    track.first_whole_step};
    append(header, sizeof header);
    append(track.spans.data(), track.spans.size() * sizeof(Span));
  }
  const std::vector<std::string> texts = group.gather_to_all(mine);
  std::vector<TraceTrack> all;
  if (group.rank() != 0) return all;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    const std::string& text = texts[r];
    for (std::size_t at = 0; at + 3 * sizeof(std::int64_t) <= text.size();) {
      std::int64_t header[3];
      std::memcpy(header, text.data() + at, sizeof header);
      at += sizeof header;
      TraceTrack track{static_cast<int>(r), static_cast<int>(header[0]),
                       std::vector<Span>(static_cast<std::size_t>(header[1])), "", header[2]};
      std::memcpy(track.spans.data(), text.data() + at, track.spans.size() * sizeof(Span));
      at += track.spans.size() * sizeof(Span);
      all.push_back(std::move(track));
    }
  }
  return all;
}

std::vector<PinRecord> gather_pins(RankGroup& group, const std::vector<PinRecord>& own) {
  if (group.size() == 1) return own;
  const std::vector<std::string> texts = group.gather_to_all(pin_map_json(own).dump());
  if (group.rank() != 0) return own;
  std::vector<PinRecord> all;
  for (const std::string& text : texts) {
    for (const auto& record : nlohmann::json::parse(text)) {
      const auto index = [&](const char* key) {
        return record[key].is_null() ? -1 : record[key].get<int>();
      };
      all.push_back({record["worker"].get<std::string>(), index("core"), index("pu"),
                     index("observed_cpu")});
    }
  }
  return all;
}

}  // namespace cnnbench
