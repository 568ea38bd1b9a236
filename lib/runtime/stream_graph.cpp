// Stream graph construction: actors and ports, the Pipeline/SplitJoin composites, the split and
// join actors they add, flattening into a checked actor/edge graph, and Graphviz output.
#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <sstream>

#include "cnnbench/core.hpp"
#include "cnnbench/stream.hpp"

namespace cnnbench::stream {

std::string Port::type() const { return element + "[" + std::to_string(elements) + "]"; }

Port f32_port(std::size_t elements, int rate, int peek) {
  Port port;
  port.elements = elements;
  port.rate = rate;
  port.peek = peek;
  return port;
}

Port retained(Port port, int tokens) {
  port.retain = tokens;
  return port;
}

Port linked(Port port) {
  port.linked = true;
  return port;
}

Link Link::forward(std::shared_ptr<Actor> from, int from_port, std::shared_ptr<Actor> to,
                   int to_port) {
  return {std::move(from), from_port, std::move(to), to_port, false, 0};
}

Link Link::back(std::shared_ptr<Actor> from, int from_port, std::shared_ptr<Actor> to, int to_port,
                int initial_tokens) {
  return {std::move(from), from_port, std::move(to), to_port, true, initial_tokens};
}

Actor::Actor(std::string name, std::vector<Port> inputs, std::vector<Port> outputs)
    : name_(std::move(name)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  auto check_port = [this](const Port& port, bool input) {
    CNNBENCH_CHECK(port.rate >= 1 && (!input || port.peek == 0 || port.peek >= port.rate),
                   "actor '" + name_ + "': a port needs rate >= 1 and peek >= rate, got rate " +
                       std::to_string(port.rate) + " peek " + std::to_string(port.peek));
  };
  for (const Port& port : inputs_) check_port(port, true);
  for (const Port& port : outputs_) check_port(port, false);
}

// ---- composites -------------------------------------------------------------------------------

Node Node::filter(std::shared_ptr<Actor> actor) {
  CNNBENCH_CHECK(actor != nullptr, "a stream filter needs an actor");
  Node node;
  node.kind_ = Kind::actor;
  node.name_ = actor->name();
  node.actor_ = std::move(actor);
  return node;
}

Node Node::pipeline(std::string name, std::vector<Node> stages) {
  CNNBENCH_CHECK(!stages.empty(), "pipeline '" + name + "' has no stages");
  Node node;
  node.kind_ = Kind::pipeline;
  node.name_ = std::move(name);
  node.children_ = std::move(stages);
  return node;
}

Node Node::splitjoin(std::string name, Split split, std::vector<Node> branches, Join join) {
  CNNBENCH_CHECK(!branches.empty(), "splitjoin '" + name + "' has no branches");
  Node node;
  node.kind_ = Kind::splitjoin;
  node.name_ = std::move(name);
  node.children_ = std::move(branches);
  node.split_ = std::move(split);
  node.join_ = std::move(join);
  return node;
}

namespace {

// Deals each input token to the branches: whole copies (duplicate) or `weights` elements per
// branch per round (round robin). The header goes to every branch.
class SplitActor final : public Actor {
 public:
  SplitActor(std::string name, Port input, std::vector<Port> outputs, Split split,
             std::size_t rounds)
      : Actor(std::move(name), {std::move(input)}, std::move(outputs)),
        split_(std::move(split)),
        rounds_(rounds) {}
  std::string kind() const override { return "split"; }
  void fire(Firing& firing) override {
    const TokenRef in = firing.input(0);
    const auto* src = reinterpret_cast<const std::byte*>(in.as<std::byte>().data());
    const std::size_t element_bytes = inputs()[0].element_bytes;
    for (std::size_t b = 0; b < outputs().size(); ++b) {
      const TokenRef out = firing.output(b);
      out.header() = in.header();
      if (split_.kind == Split::Kind::duplicate) {
        if (in.bytes() > 0) std::memcpy(out.as<std::byte>().data(), src, in.bytes());
      }
    }
    if (split_.kind == Split::Kind::round_robin) {
      std::size_t offset = 0;
      for (std::size_t r = 0; r < rounds_; ++r) {
        for (std::size_t b = 0; b < outputs().size(); ++b) {
          const std::size_t bytes = split_.weights[b] * element_bytes;
          std::memcpy(firing.output(b).as<std::byte>().data() + r * bytes, src + offset, bytes);
          offset += bytes;
        }
      }
    }
  }

 private:
  Split split_;
  std::size_t rounds_;
};

// Merges one token from every branch: round-robin concatenation or element-wise f32 sum. The
// header is branch 0's, with the oldest weight version of all branches.
class JoinActor final : public Actor {
 public:
  JoinActor(std::string name, std::vector<Port> inputs, Port output, Join join, std::size_t rounds)
      : Actor(std::move(name), std::move(inputs), {std::move(output)}),
        join_(std::move(join)),
        rounds_(rounds) {}
  std::string kind() const override { return "join"; }
  void fire(Firing& firing) override {
    const TokenRef out = firing.output(0);
    out.header() = firing.input(0).header();
    for (std::size_t b = 0; b < inputs().size(); ++b) {
      const TokenHeader& header = firing.input(b).header();
      CNNBENCH_CHECK(header.sequence == out.header().sequence,
                     "join '" + name() + "': branches are out of step (sequence " +
                         std::to_string(header.sequence) + " vs " +
                         std::to_string(out.header().sequence) + ")");
      if (header.version >= 0 &&
          (out.header().version < 0 || header.version < out.header().version)) {
        out.header().version = header.version;
      }
    }
    if (join_.kind == Join::Kind::sum) {
      const std::span<float> sum = out.as<float>();
      const std::span<const float> first = firing.input(0).as<float>();
      std::copy(first.begin(), first.end(), sum.begin());
      for (std::size_t b = 1; b < inputs().size(); ++b) {
        const std::span<const float> part = firing.input(b).as<float>();
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      return;
    }
    std::byte* dst = out.as<std::byte>().data();
    const std::size_t element_bytes = outputs()[0].element_bytes;
    std::size_t offset = 0;
    for (std::size_t r = 0; r < rounds_; ++r) {
      for (std::size_t b = 0; b < inputs().size(); ++b) {
        const std::size_t bytes = join_.weights[b] * element_bytes;
        std::memcpy(dst + offset, firing.input(b).as<std::byte>().data() + r * bytes, bytes);
        offset += bytes;
      }
    }
  }

 private:
  Join join_;
  std::size_t rounds_;
};

// The open ends of a flattened stream: the actor taking its input and the one giving its output
// (-1 for a source / a sink).
struct Ends {
  int first = -1;
  int last = -1;
};

class Flattener {
 public:
  Graph graph;

  Ends build(const Node& node, const std::string& path) {
    switch (node.kind()) {
      case Node::Kind::actor:
        CNNBENCH_CHECK(stream_ports(node.actor()->inputs()) >= 0 &&
                           stream_ports(node.actor()->outputs()) >= 0,
                       "actor '" + node.actor()->name() +
                           "' has several inputs or outputs; inside a pipeline or splitjoin a "
                           "filter has at most one of each, before its linked ports");
        return add_actor(node.actor(), path);
      case Node::Kind::pipeline:
        return build_pipeline(node, path + "/" + node.name());
      case Node::Kind::splitjoin:
        return build_splitjoin(node, path + "/" + node.name());
    }
    return {};
  }

 private:
  // The stream ports (0 or 1) among `ports`, which must come first; -1 when they don't.
  static int stream_ports(const std::vector<Port>& ports) {
    const auto first_linked = std::find_if(ports.begin(), ports.end(),
                                           [](const Port& port) { return port.linked; });
    const auto count = first_linked - ports.begin();
    const bool linked_last = std::all_of(first_linked, ports.end(),
                                         [](const Port& port) { return port.linked; });
    return count <= 1 && linked_last ? static_cast<int>(count) : -1;
  }

  Ends add_actor(const std::shared_ptr<Actor>& actor, const std::string& path) {
    graph.actors.push_back(actor);
    graph.paths.push_back(path.empty() ? "/" : path);
    const int id = static_cast<int>(graph.actors.size()) - 1;
    return {stream_ports(actor->inputs()) == 0 ? -1 : id,
            stream_ports(actor->outputs()) == 0 ? -1 : id};
  }

  const Port& output_of(int actor) const { return graph.actors[actor]->outputs()[0]; }
  const Port& input_of(int actor) const { return graph.actors[actor]->inputs()[0]; }
  const std::string& name_of(int actor) const { return graph.actors[actor]->name(); }

  void connect(int from, int to) {
    const Port& out = output_of(from);
    const Port& in = input_of(to);
    CNNBENCH_CHECK(out.element == in.element && out.elements == in.elements,
                   "stream edge '" + name_of(from) + " -> " + name_of(to) + "': " + name_of(from) +
                       " pushes " + out.type() + " tokens but " + name_of(to) + " pops " +
                       in.type());
    graph.edges.push_back({from, 0, to, 0});
  }

  Ends build_pipeline(const Node& node, const std::string& path) {
    Ends ends;
    int previous = -2;  // nothing yet
    for (const Node& child : node.children()) {
      const Ends part = build(child, path);
      if (previous == -2) {
        ends.first = part.first;
      } else {
        CNNBENCH_CHECK(previous >= 0, "pipeline '" + path + "': stage '" + child.name() +
                                          "' follows a stage without output");
        CNNBENCH_CHECK(part.first >= 0, "pipeline '" + path + "': stage '" + child.name() +
                                            "' has no input but follows another stage");
        connect(previous, part.first);
      }
      previous = part.last;
    }
    ends.last = previous;
    return ends;
  }

  // Elements per round for each branch and the common number of rounds; Error naming the branch
  // edge whose token doesn't divide into the same number of rounds as the others.
  std::size_t rounds_of(std::vector<std::size_t>& weights, const std::vector<std::size_t>& sizes,
                        const std::string& where, const std::vector<std::string>& branch_names) {
    if (weights.empty()) {
      weights = sizes;
      return 1;
    }
    CNNBENCH_CHECK(weights.size() == sizes.size(),
                   where + ": " + std::to_string(weights.size()) + " round-robin weights for " +
                       std::to_string(sizes.size()) + " branches");
    std::size_t rounds = 0;
    for (std::size_t b = 0; b < sizes.size(); ++b) {
      CNNBENCH_CHECK(weights[b] > 0 && sizes[b] % weights[b] == 0 &&
                         (b == 0 || sizes[b] / weights[b] == rounds),
                     where + ": rates don't balance on the edge to branch '" + branch_names[b] +
                         "': its token of " + std::to_string(sizes[b]) + " elements is not " +
                         (b == 0 ? std::string("a whole number of")
                                 : std::to_string(rounds)) +
                         " rounds of its weight " + std::to_string(weights[b]));
      rounds = sizes[b] / weights[b];
    }
    return rounds;
  }

  Ends build_splitjoin(const Node& node, const std::string& path) {
    std::vector<Ends> branches;
    std::vector<std::string> first_names, last_names;
    for (const Node& child : node.children()) {
      const Ends part = build(child, path);
      CNNBENCH_CHECK(part.first >= 0 && part.last >= 0,
                     "splitjoin '" + path + "': branch '" + child.name() +
                         "' needs both an input and an output");
      branches.push_back(part);
      first_names.push_back(name_of(part.first));
      last_names.push_back(name_of(part.last));
    }
    if (branches.size() == 1) return branches[0];
    Split split = node.split();
    const Fan outs = fan(true, split.kind == Split::Kind::duplicate, split.weights, branches,
                         path + "/split", first_names);
    connect_fan(std::make_shared<SplitActor>(path + "/split", outs.outer, outs.branch_ports, split,
                                             outs.rounds),
                true, branches, path);
    Join join = node.join();
    const Fan ins = fan(false, join.kind == Join::Kind::sum, join.weights, branches,
                        path + "/join", last_names);
    connect_fan(
        std::make_shared<JoinActor>(path + "/join", ins.branch_ports, ins.outer, join, ins.rounds),
        false, branches, path);
    return {static_cast<int>(graph.actors.size()) - 2, static_cast<int>(graph.actors.size()) - 1};
  }

  // One side of a splitjoin: the split's outputs or the join's inputs (each branch's own port at
  // rate 1), the one port it shows the stream outside and the rounds of its round-robin weights.
  // `whole` (duplicate split, summing join): every branch takes the whole token. Errors name the
  // edge between the split or join and the branch.
  struct Fan {
    std::vector<Port> branch_ports;
    Port outer;
    std::size_t rounds = 1;
  };
  Fan fan(bool split, bool whole, std::vector<std::size_t>& weights,
          const std::vector<Ends>& branches, const std::string& name,
          const std::vector<std::string>& names) {
    const std::string verb = split ? "pop" : "push", verbs = split ? "pops" : "pushes";
    const auto edge = [&](const std::string& branch) {
      return "stream edge '" + (split ? name + " -> " + branch : branch + " -> " + name) + "': ";
    };
    const auto port_of = [&](const Ends& branch) {
      return split ? input_of(branch.first) : output_of(branch.last);
    };
    Fan fan;
    std::vector<std::size_t> sizes;
    for (const Ends& branch : branches) {
      Port port = port_of(branch);
      port.rate = 1;
      if (split) port.peek = 0;
      CNNBENCH_CHECK(port.element == port_of(branches[0]).element,
                     edge(name_of(split ? branch.first : branch.last)) + "branches " + verb + " " +
                         port_of(branches[0]).type() + " and " + port.type());
      fan.branch_ports.push_back(port);
      sizes.push_back(port.elements);
    }
    fan.outer = fan.branch_ports[0];
    if (whole) {
      CNNBENCH_CHECK(split || fan.outer.element == "f32", "summing join '" + name +
                                                              "' needs f32 tokens, got " +
                                                              fan.outer.type());
      for (std::size_t b = 0; b < sizes.size(); ++b) {
        CNNBENCH_CHECK(sizes[b] == sizes[0],
                       edge(names[b]) + (split ? "a duplicate split of " : "a summing join of ") +
                           fan.outer.type() + " tokens but the branch " + verbs + " " +
                           fan.branch_ports[b].type());
      }
      return fan;
    }
    fan.rounds = rounds_of(weights, sizes,
                           (split ? "round-robin split '" : "round-robin join '") + name + "'",
                           names);
    std::size_t per_round = 0;
    for (std::size_t w : weights) per_round += w;
    fan.outer.elements = per_round * fan.rounds;
    return fan;
  }

  // A split's port b feeds branch b; branch b feeds a join's port b.
  void connect_fan(std::shared_ptr<Actor> actor, bool split, const std::vector<Ends>& branches,
                   const std::string& path) {
    add_actor(actor, path);
    const int id = static_cast<int>(graph.actors.size()) - 1;
    for (std::size_t b = 0; b < branches.size(); ++b) {
      const int port = static_cast<int>(b);
      graph.edges.push_back(split ? Edge{id, port, branches[b].first, 0}
                                  : Edge{branches[b].last, 0, id, port});
    }
  }

 public:
  // A link's edge between two actors the stream already holds, by their linked ports.
  void add_link(const Link& link) {
    const auto index_of = [&](const std::shared_ptr<Actor>& actor) {
      const auto it = std::find(graph.actors.begin(), graph.actors.end(), actor);
      CNNBENCH_CHECK(actor != nullptr && it != graph.actors.end(),
                     "stream link: actor '" + (actor ? actor->name() : std::string("(none)")) +
                         "' is not in the stream");
      return static_cast<int>(it - graph.actors.begin());
    };
    const Edge edge{index_of(link.from), link.from_port, index_of(link.to), link.to_port,
                    link.feedback, link.initial_tokens};
    const std::string where = "stream link '" + graph.edge_name(edge) + "': ";
    const auto& outs = link.from->outputs();
    const auto& ins = link.to->inputs();
    CNNBENCH_CHECK(link.from_port >= 0 && std::size_t(link.from_port) < outs.size() &&
                       outs[std::size_t(link.from_port)].linked && link.to_port >= 0 &&
                       std::size_t(link.to_port) < ins.size() &&
                       ins[std::size_t(link.to_port)].linked,
                   where + "both ends must be linked ports (stream::linked)");
    const Port& out = outs[std::size_t(link.from_port)];
    const Port& in = ins[std::size_t(link.to_port)];
    CNNBENCH_CHECK(out.element == in.element && out.elements == in.elements,
                   where + name_of(edge.from) + " pushes " + out.type() + " tokens but " +
                       name_of(edge.to) + " pops " + in.type());
    CNNBENCH_CHECK(link.feedback ? link.initial_tokens >= in.window() : link.initial_tokens == 0,
                   where + (link.feedback
                                ? "a feedback edge needs at least its consumer's window of " +
                                      std::to_string(in.window()) + " initial tokens, got " +
                                      std::to_string(link.initial_tokens)
                                : std::string("only a feedback edge starts with tokens")));
    graph.edges.push_back(edge);
  }
};

}  // namespace

Graph flatten(const Node& root, std::span<const Link> links) {
  Flattener flattener;
  flattener.build(root, "");
  for (const Link& link : links) flattener.add_link(link);
  flattener.graph.topological_order();  // Error when the forward edges cycle
  return std::move(flattener.graph);
}

std::string Graph::edge_name(const Edge& edge) const {
  return actors[edge.from]->name() + " -> " + actors[edge.to]->name();
}

std::vector<int> Graph::topological_order() const {
  std::vector<int> indegree(actors.size(), 0);
  std::vector<std::vector<int>> successors(actors.size());
  for (const Edge& edge : edges) {
    if (edge.feedback) continue;
    ++indegree[edge.to];
    successors[edge.from].push_back(edge.to);
  }
  std::deque<int> ready;
  for (std::size_t a = 0; a < actors.size(); ++a) {
    if (indegree[a] == 0) ready.push_back(static_cast<int>(a));
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int a = ready.front();
    ready.pop_front();
    order.push_back(a);
    for (int next : successors[a]) {
      if (--indegree[next] == 0) ready.push_back(next);
    }
  }
  CNNBENCH_CHECK(order.size() == actors.size(),
                 "the stream graph has a cycle without a feedback edge (Link::back)");
  return order;
}

// ---- Graphviz ---------------------------------------------------------------------------------

std::string graph_dot(const Graph& graph, const Partition& partition, const std::string& title) {
  static const char* const palette[] = {"#dbe9f6", "#fde2c8", "#d5efd5", "#f3d3e7",
                                        "#e6e0f3", "#fff2b3", "#d9f2f2", "#eeeeee"};
  std::ostringstream dot;
  dot.setf(std::ios::fixed);
  dot.precision(3);
  dot << "digraph \"" << title << "\" {\n  rankdir=TB;\n  node [shape=box, fontsize=9];\n"
      << "  label=\"" << title << ": " << partition.cores << " cores, predicted speedup "
      << partition.predicted_speedup << "\";\n";
  for (int core = 0; core < partition.cores; ++core) {
    dot << "  subgraph cluster_core" << core << " {\n    label=\"core " << core << " ("
        << partition.core_work[static_cast<std::size_t>(core)] * 1e3
        << " ms per iteration)\";\n    style=filled; color=\"" << palette[core % 8] << "\";\n";
    for (std::size_t a = 0; a < graph.actors.size(); ++a) {
      if (partition.core_of[a] != core) continue;
      const Actor& actor = *graph.actors[a];
      dot << "    a" << a << " [label=\"" << actor.name() << "\\n" << actor.kind() << ", stage "
          << partition.stage_of[a] << "\\n" << actor.work_estimate() * 1e3 << " ms/firing\""
          << (actor.kind() == "split" || actor.kind() == "join" ? ", shape=ellipse" : "")
          << "];\n";
    }
    dot << "  }\n";
  }
  for (const Edge& edge : graph.edges) {
    const bool crossing = partition.core_of[edge.from] != partition.core_of[edge.to];
    dot << "  a" << edge.from << " -> a" << edge.to << " [label=\""
        << graph.actors[edge.from]->outputs()[edge.from_port].type();
    if (edge.feedback) dot << ", " << edge.initial_tokens << " initial";
    dot << "\", fontsize=8" << (crossing ? ", color=red, penwidth=2" : "")
        << (edge.feedback ? ", style=dashed, constraint=false" : "") << "];\n";
  }
  dot << "}\n";
  return dot.str();
}

void write_graph_dot(const std::filesystem::path& path, const Graph& graph,
                     const Partition& partition, const std::string& title) {
  write_output(path, graph_dot(graph, partition, title));
}

}  // namespace cnnbench::stream
