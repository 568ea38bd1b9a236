// When the GPU strategy launches a step part as a CUDA graph and when eagerly, written once for
// any runtime Api: the CUDA one in gpu_strategy_steps.cpp and a fake in tests/test_gpu_runtime.cpp.
// A capture that fails at any point (begin, the enqueue, end, instantiate) turns graphs off for
// the rest of the run and keeps the reason; the run itself goes on eagerly.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace cnnbench::gpu {

// Api provides, each returning an empty string on success or what failed:
//   std::string begin_capture()
//   std::string end_capture(Graph& graph)          // graph may be set even on failure
//   std::string instantiate(Exec& exec, Graph graph)
//   void launch(const Exec& exec)                  // throws on failure, as eager() does
//   void destroy_graph(Graph graph)
//   void clear_error()                             // drops a non-sticky error state
// with types Api::Graph (a raw handle, value-initialised to null) and Api::Exec (an owning,
// movable handle, default-constructible and testable as a bool).
template <class Api>
class GraphRunner {
 public:
  using Exec = typename Api::Exec;
  using Graph = typename Api::Graph;

  GraphRunner(std::size_t parts, bool enabled) : graphs_(parts), enabled_(enabled) {}

  // Runs part `part`: one graph launch when it has a graph; otherwise `eager()` enqueues it, and
  // then (graphs on) the same enqueue is captured for the next time. The captured enqueue is only
  // recorded, so the part's work runs exactly once either way. Errors of eager() or of a launch
  // propagate; errors of the capture do not.
  template <class Eager>
  void run(Api& api, std::size_t part, Eager&& eager) {
    Exec& exec = graphs_.at(part);
    if (enabled_ && exec) {
      api.launch(exec);
      return;
    }
    eager();
    if (enabled_) capture(api, exec, eager);
  }

  // Graphs captured so far hold pointers that are about to move: capture them again.
  void drop_all() {
    for (Exec& exec : graphs_) exec = Exec();
  }

  bool enabled() const { return enabled_; }
  bool in_use() const {
    if (!enabled_) return false;
    for (const Exec& exec : graphs_) {
      if (exec) return true;
    }
    return false;
  }
  // Why graphs were turned off during the run, or empty.
  const std::string& note() const { return note_; }

 private:
  template <class Eager>
  void capture(Api& api, Exec& exec, Eager& eager) {
    if (const std::string error = api.begin_capture(); !error.empty()) {
      return give_up(api, "cudaStreamBeginCapture failed: " + error);
    }
    Graph graph{};
    try {
      eager();
    } catch (const std::exception& e) {
      (void)api.end_capture(graph);  // ends the capture mode whatever the state
      if (graph) api.destroy_graph(graph);
      return give_up(api, std::string("enqueue during capture failed: ") + e.what());
    }
    if (const std::string error = api.end_capture(graph); !error.empty()) {
      if (graph) api.destroy_graph(graph);
      return give_up(api, "cudaStreamEndCapture failed: " + error);
    }
    Exec made;
    const std::string error = api.instantiate(made, graph);
    api.destroy_graph(graph);
    if (!error.empty()) return give_up(api, "cudaGraphInstantiate failed: " + error);
    exec = std::move(made);
  }

  void give_up(Api& api, const std::string& why) {
    api.clear_error();
    drop_all();
    enabled_ = false;
    note_ = "capture failed, running without graphs: " + why;
  }

  std::vector<Exec> graphs_;
  bool enabled_;
  std::string note_;
};

}  // namespace cnnbench::gpu
