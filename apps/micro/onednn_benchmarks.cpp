// The same layers on oneDNN ("onednn_..." rows), the library PyTorch runs its CPU layers on, at
// FC-3's and LeNet-5's shapes and the same batches and flop counts as the own-kernel rows
// (layer_benchmarks.cpp), so the gap to it shows per layer.
//
// Like for like: every tensor is in our plain layout (nc / oi for the inner products, nchw / oihw
// for convolution and pooling), so oneDNN picks the kernel it has for those layouts and there is
// no reorder to time. Convolution also has "onednn_blocked_" rows: oneDNN's own layouts, with the
// reorders from and to ours timed (see there). One CPU engine, one stream, one thread (an
// OpenMP build of oneDNN is set to one thread below). Primitive creation and the max-pool
// workspace are set up outside the timed loop; `DNNL_VERBOSE=1` prints which kernel each row ran.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "benchmarks.hpp"
#include "micro_common.hpp"

namespace cnnbench::micro {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

// oneDNN 2.x builds a primitive descriptor from an op descriptor; 3.x takes the same arguments
// (engine first) directly. Backward primitives also get the forward one as a hint.
#if DNNL_VERSION_MAJOR >= 3
using pooling_forward = dnnl::pooling_forward;
using pooling_backward = dnnl::pooling_backward;
#else
using pooling_forward = dnnl::pooling_v2_forward;  // the 2.x pooling with dilation, as in 3.x
using pooling_backward = dnnl::pooling_v2_backward;
#endif

const dnnl::engine& cpu() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu());
  return stream;
}

template <class Primitive, class... Args>
typename Primitive::primitive_desc forward_pd(Args&&... args) {
#if DNNL_VERSION_MAJOR >= 3
  return typename Primitive::primitive_desc(cpu(), std::forward<Args>(args)...);
#else
  return typename Primitive::primitive_desc(typename Primitive::desc(std::forward<Args>(args)...),
                                            cpu());
#endif
}

template <class Primitive, class Hint, class... Args>
typename Primitive::primitive_desc backward_pd(const Hint& hint, Args&&... args) {
#if DNNL_VERSION_MAJOR >= 3
  return typename Primitive::primitive_desc(cpu(), std::forward<Args>(args)..., hint);
#else
  return typename Primitive::primitive_desc(typename Primitive::desc(std::forward<Args>(args)...),
                                            cpu(), hint);
#endif
}

memory::desc plain(const memory::dims& dims, tag layout) {
  return memory::desc(dims, memory::data_type::f32, layout);
}

// A oneDNN-owned buffer of `md` filled with uniform [-1, 1) (seed > 0) or zeros (seed 0).
memory buffer(const memory::desc& md, std::uint64_t seed = 0) {
  memory m(md, cpu());
  const std::size_t bytes = md.get_size();
  if (seed == 0) {
    std::memset(m.get_data_handle(), 0, bytes);
  } else {
    std::memcpy(m.get_data_handle(), random_buffer(bytes / sizeof(float), seed).data(), bytes);
  }
  return m;
}

using Args = std::unordered_map<int, memory>;

// The primitives of one row, run in order on the stream; this is what the loop times.
struct Steps {
  std::vector<std::pair<dnnl::primitive, Args>> steps;
  std::vector<std::pair<dnnl::primitive, Args>> pending;  // output reorders, after the next add
  std::vector<std::pair<memory, memory>> converted;       // (plain input, its reordered copy)

  // The next primitive, then the reorders of its outputs back to the plain layout.
  void add(dnnl::primitive primitive, Args args) {
    steps.emplace_back(std::move(primitive), std::move(args));
    for (auto& step : pending) steps.push_back(std::move(step));
    pending.clear();
  }
  // A plain buffer as the next primitive's input in layout `want`: the buffer itself, or a copy
  // reordered from it by a timed reorder (one per buffer and layout, shared by the primitives).
  memory input(const memory::desc& want, const memory& user) {
    if (want == user.get_desc()) return user;
    for (const auto& [from, to] : converted) {
      if (from == user && to.get_desc() == want) return to;
    }
    memory to(want, cpu());
    steps.emplace_back(dnnl::reorder(user, to), Args{{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, to}});
    converted.emplace_back(user, to);
    return to;
  }
  // A plain buffer as the next primitive's output in layout `want`, reordered back after it.
  memory output(const memory::desc& want, const memory& user) {
    if (want == user.get_desc()) return user;
    memory from(want, cpu());
    pending.emplace_back(dnnl::reorder(from, user), Args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, user}});
    return from;
  }
  void operator()() const {
    for (const auto& [primitive, args] : steps) primitive.execute(cpu_stream(), args);
    cpu_stream().wait();
  }
};

// register_fused with the row's primitives built (untimed) by `build(B)` and run once before the
// timed loop, so that one-time costs (JIT code, the OpenMP runtime's start) stay out of it.
template <class Build>
void register_onednn(const std::string& name, double flops_per_sample, Build build) {
  register_fused("onednn_" + name, flops_per_sample, [build](int B) {
    const Steps run = build(B);
    run();
    return run;
  });
}

// --- inner product (dense): src (B,in) nc, weights (out,in) oi, bias (out) ---------------------

struct DenseMemories {
  memory::desc src, weights, bias, dst;
  memory src_m, weights_m, bias_m, dst_m;
  DenseMemories(const DenseLayer& layer, int B)
      : src(plain({B, layer.in}, tag::nc)),
        weights(plain({layer.out, layer.in}, tag::oi)),
        bias(plain({layer.out}, tag::x)),
        dst(plain({B, layer.out}, tag::nc)),
        src_m(buffer(src, 1)),
        weights_m(buffer(weights, 2)),
        bias_m(buffer(bias, 3)),
        dst_m(buffer(dst, 4)) {}
  dnnl::inner_product_forward::primitive_desc forward(prop_kind kind) const {
    return forward_pd<dnnl::inner_product_forward>(kind, src, weights, bias, dst);
  }
};

void register_dense(const DenseLayer layer) {
  register_onednn("dense_forward/" + std::string(layer.name), layer.forward_flops(1),
                 [layer](int B) {
                   const DenseMemories m(layer, B);
                   Steps run;
                   run.add(dnnl::inner_product_forward(m.forward(prop_kind::forward_inference)),
                           {{DNNL_ARG_SRC, m.src_m},
                            {DNNL_ARG_WEIGHTS, m.weights_m},
                            {DNNL_ARG_BIAS, m.bias_m},
                            {DNNL_ARG_DST, m.dst_m}});
                   return run;
                 });

  // Weights and bias gradients always, the input gradient where dense_backward computes it.
  register_onednn(
      "dense_backward/" + std::string(layer.name), layer.backward_flops(1), [layer](int B) {
        const DenseMemories m(layer, B);  // dst_m holds dout
        const auto hint = m.forward(prop_kind::forward_training);
        Steps run;
        if (layer.needs_dinp) {
          run.add(dnnl::inner_product_backward_data(
                      backward_pd<dnnl::inner_product_backward_data>(hint, m.src, m.weights, m.dst)),
                  {{DNNL_ARG_DIFF_DST, m.dst_m},
                   {DNNL_ARG_WEIGHTS, m.weights_m},
                   {DNNL_ARG_DIFF_SRC, buffer(m.src)}});
        }
        run.add(dnnl::inner_product_backward_weights(backward_pd<dnnl::inner_product_backward_weights>(
                    hint, m.src, m.weights, m.bias, m.dst)),
                {{DNNL_ARG_SRC, m.src_m},
                 {DNNL_ARG_DIFF_DST, m.dst_m},
                 {DNNL_ARG_DIFF_WEIGHTS, buffer(m.weights)},
                 {DNNL_ARG_DIFF_BIAS, buffer(m.bias)}});
        return run;
      });
}

// --- convolution, stride 1: src (B,C,H,W) nchw, weights (K,C,R,R) oihw, bias (K) ---------------
// Two sets of rows. "onednn_conv2d_...": the primitive is asked for our plain layouts, and oneDNN
// serves those with its im2col + JIT gemm ("gemm:jit" in DNNL_VERBOSE). "onednn_blocked_conv2d_...":
// the primitive picks its own layouts (format_tag::any, its direct JIT kernels on nChw8c/16c, the
// path PyTorch's mkldnn convolution takes), and the reorders of inputs into them and of outputs
// back to nchw / oihw run inside the timed loop, since our tensors stay plain.

struct ConvMemories {
  memory::desc src, weights, bias, dst;  // what the primitive is asked for: plain or any
  memory::dims strides{1, 1}, padding;
  memory src_m, weights_m, bias_m, dst_m;  // ours, plain (dst_m holds dout in backward rows)
  ConvMemories(const ConvLayer& layer, int B, bool blocked)
      : src(plain({B, layer.in_channels, layer.size, layer.size}, blocked ? tag::any : tag::nchw)),
        weights(plain({layer.out_channels, layer.in_channels, layer.kernel, layer.kernel},
                      blocked ? tag::any : tag::oihw)),
        bias(plain({layer.out_channels}, tag::x)),
        dst(plain({B, layer.out_channels, layer.shape(B).out_height(), layer.shape(B).out_width()},
                  blocked ? tag::any : tag::nchw)),
        padding{layer.pad, layer.pad},
        src_m(buffer(plain(src.dims(), tag::nchw), 1)),
        weights_m(buffer(plain(weights.dims(), tag::oihw), 2)),
        bias_m(buffer(bias, 3)),
        dst_m(buffer(plain(dst.dims(), tag::nchw), 4)) {}
  dnnl::convolution_forward::primitive_desc forward(prop_kind kind) const {
    return forward_pd<dnnl::convolution_forward>(kind, algorithm::convolution_direct, src, weights,
                                                 bias, dst, strides, padding, padding);
  }
};

void register_conv(const ConvLayer layer, bool blocked) {
  const std::string variant = blocked ? "blocked_" : "";
  register_onednn(variant + "conv2d_forward/" + layer.name, conv_product_flops(layer.shape(1)),
                  [layer, blocked](int B) {
                    const ConvMemories m(layer, B, blocked);
                    const auto pd = m.forward(prop_kind::forward_inference);
                    Steps run;
                    run.add(dnnl::convolution_forward(pd),
                            {{DNNL_ARG_SRC, run.input(pd.src_desc(), m.src_m)},
                             {DNNL_ARG_WEIGHTS, run.input(pd.weights_desc(), m.weights_m)},
                             {DNNL_ARG_BIAS, m.bias_m},
                             {DNNL_ARG_DST, run.output(pd.dst_desc(), m.dst_m)}});
                    return run;
                  });

  register_onednn(
      variant + "conv2d_backward/" + layer.name, conv_backward_flops(layer, 1),
      [layer, blocked](int B) {
        const ConvMemories m(layer, B, blocked);
        const auto hint = m.forward(prop_kind::forward_training);
        Steps run;
        if (layer.needs_dinp) {
          const auto pd = backward_pd<dnnl::convolution_backward_data>(
              hint, algorithm::convolution_direct, m.src, m.weights, m.dst, m.strides, m.padding,
              m.padding);
          run.add(dnnl::convolution_backward_data(pd),
                  {{DNNL_ARG_DIFF_DST, run.input(pd.diff_dst_desc(), m.dst_m)},
                   {DNNL_ARG_WEIGHTS, run.input(pd.weights_desc(), m.weights_m)},
                   {DNNL_ARG_DIFF_SRC, run.output(pd.diff_src_desc(), buffer(m.src_m.get_desc()))}});
        }
        const auto pd = backward_pd<dnnl::convolution_backward_weights>(
            hint, algorithm::convolution_direct, m.src, m.weights, m.bias, m.dst, m.strides,
            m.padding, m.padding);
        run.add(dnnl::convolution_backward_weights(pd),
                {{DNNL_ARG_SRC, run.input(pd.src_desc(), m.src_m)},
                 {DNNL_ARG_DIFF_DST, run.input(pd.diff_dst_desc(), m.dst_m)},
                 {DNNL_ARG_DIFF_WEIGHTS,
                  run.output(pd.diff_weights_desc(), buffer(m.weights_m.get_desc()))},
                 {DNNL_ARG_DIFF_BIAS, buffer(m.bias)}});
        return run;
      });
}

// --- max-pool 2x2 stride 2: (B,C,H,W) nchw -> (B,C,H/2,W/2) -------------------------------------
// oneDNN's backward reads the argmax workspace its training forward wrote (ours re-reads the
// input), so the forward row runs forward_training and writes that workspace too, as training does.
// On plain nchw oneDNN 2.6 runs its generic "simple_nchw" kernel (its JIT pooling wants blocked or
// channels-last layouts); PyTorch pools plain CPU tensors with its own ATen kernel, not oneDNN.

pooling_forward::primitive_desc pool_forward_pd(const PoolLayer& layer, int B) {
  const int half = layer.size / 2;
  return forward_pd<pooling_forward>(
      prop_kind::forward_training, algorithm::pooling_max,
      plain({B, layer.channels, layer.size, layer.size}, tag::nchw),
      plain({B, layer.channels, half, half}, tag::nchw), memory::dims{2, 2}, memory::dims{2, 2},
      memory::dims{0, 0}, memory::dims{0, 0}, memory::dims{0, 0});
}

void register_pool(const PoolLayer layer) {
  register_onednn("maxpool_forward/" + std::string(layer.name), layer.flops(1),
                 [layer](int B) {
                   const auto pd = pool_forward_pd(layer, B);
                   Steps run;
                   run.add(pooling_forward(pd), {{DNNL_ARG_SRC, buffer(pd.src_desc(), 1)},
                                                 {DNNL_ARG_DST, buffer(pd.dst_desc())},
                                                 {DNNL_ARG_WORKSPACE, buffer(pd.workspace_desc())}});
                   return run;
                 });

  register_onednn(
      "maxpool_backward/" + std::string(layer.name), layer.flops(1), [layer](int B) {
        const auto hint = pool_forward_pd(layer, B);
        const memory workspace = buffer(hint.workspace_desc());
        pooling_forward(hint).execute(cpu_stream(), {{DNNL_ARG_SRC, buffer(hint.src_desc(), 1)},
                                                     {DNNL_ARG_DST, buffer(hint.dst_desc())},
                                                     {DNNL_ARG_WORKSPACE, workspace}});
        cpu_stream().wait();
        Steps run;
        run.add(pooling_backward(backward_pd<pooling_backward>(
                    hint, algorithm::pooling_max, hint.src_desc(), hint.dst_desc(),
                    memory::dims{2, 2}, memory::dims{2, 2}, memory::dims{0, 0},
                    memory::dims{0, 0}, memory::dims{0, 0})),
                {{DNNL_ARG_DIFF_DST, buffer(hint.dst_desc(), 2)},
                 {DNNL_ARG_DIFF_SRC, buffer(hint.src_desc())},
                 {DNNL_ARG_WORKSPACE, workspace}});
        return run;
      });
}

}  // namespace

void register_onednn_benchmarks() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP && defined(_OPENMP)
  omp_set_num_threads(1);  // before the first primitive, which sizes its work for the threads
  benchmark::AddCustomContext("onednn_threads", std::to_string(omp_get_max_threads()));
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_SEQ
  benchmark::AddCustomContext("onednn_threads", "1");
#else
  benchmark::AddCustomContext("onednn_threads", "not set here: limit the threading runtime");
#endif
  const dnnl_version_t* version = dnnl_version();
  benchmark::AddCustomContext("onednn_version", std::to_string(version->major) + "." +
                                                    std::to_string(version->minor) + "." +
                                                    std::to_string(version->patch));
  for (const DenseLayer& layer : kFc3Dense) register_dense(layer);
  for (const bool blocked : {false, true}) {
    for (const ConvLayer& layer : kLenet5Conv) register_conv(layer, blocked);
  }
  for (const PoolLayer& layer : kLenet5Pool) register_pool(layer);
  for (const DenseLayer& layer : kLenet5Dense) register_dense(layer);
}

}  // namespace cnnbench::micro
