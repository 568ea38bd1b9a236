// Whole-model forward and backward of FC-3 and LeNet-5 on one batch, written out layer by layer
// from the functions of layers.hpp. This is the serial reference every strategy is checked against.
// LeNet-5 takes the fused fast path: direct 5x5 convolutions with ReLU folded in, c2's output kept
// channels last (16 channels = one vector), pooling backward fused with ReLU backward.
#include <algorithm>
#include <cstring>
#include <string>

#include "cnnbench/layers.hpp"
#include "cnnbench/models.hpp"

namespace cnnbench {

namespace {
constexpr int classes = 10;
using L = Lenet5Sizes;

}  // namespace

// Activations (forward) and their gradients (backward) for up to max_batch samples.
struct Workspace::Buffers {
  int max_batch = 0;
  DenseBackend dense = DenseBackend::own;
  // FC-3: h1, h2; LeNet-5: a1, p1, a2 channels last (B,10,10,16), p2, h1, h2 (Fc3Sizes and
  // Lenet5Sizes give their shapes). logits (B,10) for both.
  aligned_vector<float> a1, p1, a2, p2, h1, h2, logits;
  aligned_vector<float> da1, dp1, da2, dp2, dh1, dh2, dlogits;
  aligned_vector<float> conv_scratch;
  StepTimeline* timeline = nullptr;
  bool deferred_first_dense = false;  // backward leaves f1.weight's gradient to the caller
};

Workspace::Workspace(ModelKind kind, int max_batch, DenseBackend dense)
    : buffers_(std::make_unique<Buffers>()) {
  CNNBENCH_CHECK(max_batch > 0, "workspace batch must be positive");
  Buffers& b = *buffers_;
  b.max_batch = max_batch;
  b.dense = dense;
  const auto n = static_cast<std::size_t>(max_batch);
  auto both = [n](aligned_vector<float>& value, aligned_vector<float>& grad, std::size_t per) {
    value.assign(n * per, 0.0f);
    grad.assign(n * per, 0.0f);
  };
  if (kind == ModelKind::fc3) {
    both(b.h1, b.dh1, Fc3Sizes::hidden1);
    both(b.h2, b.dh2, Fc3Sizes::hidden2);
  } else {
    both(b.a1, b.da1, L::a1_floats);
    both(b.p1, b.dp1, L::p1_floats);
    both(b.a2, b.da2, L::a2_floats);
    both(b.p2, b.dp2, L::flat);
    both(b.h1, b.dh1, L::hidden1);
    both(b.h2, b.dh2, L::hidden2);
    b.conv_scratch.assign(conv5x5_to16_scratch_floats(L::c1_channels), 0.0f);
  }
  both(b.logits, b.dlogits, classes);
}

Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&&) noexcept = default;
Workspace& Workspace::operator=(Workspace&&) noexcept = default;
int Workspace::max_batch() const { return buffers_->max_batch; }
DenseBackend Workspace::dense_backend() const { return buffers_->dense; }
void Workspace::set_timeline(StepTimeline* timeline) { buffers_->timeline = timeline; }
StepTimeline* Workspace::timeline() const { return buffers_->timeline; }
void Workspace::set_deferred_first_dense(bool deferred) { buffers_->deferred_first_dense = deferred; }
bool Workspace::deferred_first_dense() const { return buffers_->deferred_first_dense; }

const std::vector<std::string>& timed_layer_names(ModelKind kind) {
  static const std::vector<std::string> fc3 = {"f1", "f2", "f3", "loss"};
  static const std::vector<std::string> lenet5 = {"c1", "c2", "f1", "f2", "f3", "loss"};
  return kind == ModelKind::fc3 ? fc3 : lenet5;
}

namespace {

// Named pointers into a flat buffer (parameters or gradients), in state_dict order. Both models
// end in the same three dense layers f1, f2, f3.
struct DenseHeadView {
  float *f1w, *f1b, *f2w, *f2b, *f3w, *f3b;
};
struct Lenet5View {
  float *c1w, *c1b, *c2w, *c2b;
  DenseHeadView head;
};

// Pointer to tensor i (state_dict order) of a flat buffer.
float* tensor_at(ModelKind kind, const float* flat, int i) {
  return const_cast<float*>(flat) + model_spec(kind).tensors[static_cast<std::size_t>(i)].offset;
}

DenseHeadView fc3_view(const float* flat) {
  auto at = [flat](int i) { return tensor_at(ModelKind::fc3, flat, i); };
  return {at(0), at(1), at(2), at(3), at(4), at(5)};
}

Lenet5View lenet5_view(const float* flat) {
  auto at = [flat](int i) { return tensor_at(ModelKind::lenet5, flat, i); };
  return {at(0), at(1), at(2), at(3), {at(4), at(5), at(6), at(7), at(8), at(9)}};
}

void check_batch(const Workspace& ws, int n) {
  CNNBENCH_CHECK(n > 0 && n <= ws.max_batch(), "batch of " + std::to_string(n) +
                                                   " samples exceeds the workspace's " +
                                                   std::to_string(ws.max_batch()));
}

// The dense layers of a model: x (B,in) -> h1 (B,hidden1), ReLU -> h2 (B,hidden2), ReLU ->
// logits (B,10).
struct DenseHeadSizes {
  int in, hidden1, hidden2;
};
constexpr DenseHeadSizes fc3_head{Fc3Sizes::input, Fc3Sizes::hidden1, Fc3Sizes::hidden2};
constexpr DenseHeadSizes lenet5_head{L::flat, L::hidden1, L::hidden2};

// Indices into timed_layer_names: the dense head's f1 and the loss, per model.
constexpr int fc3_f1 = 0, lenet5_c1 = 0, lenet5_c2 = 1, lenet5_f1 = 2;
int loss_layer(ModelKind kind) { return static_cast<int>(timed_layer_names(kind).size()) - 1; }

// The time since the last boundary was layer `layer`'s (one branch when nothing is timed).
void layer_done(Workspace::Buffers& b, int layer) {
  if (b.timeline != nullptr) b.timeline->close_layer(layer);
}

// f1_layer: f1's index in timed_layer_names (f2 and f3 follow it).
// From f1's output in h1 (before its ReLU) on.
void dense_head_forward_after_f1(const DenseHeadView& p, const DenseHeadSizes& s, int n,
                                 Workspace::Buffers& b, int f1_layer) {
  relu_forward(b.h1.data(), b.h1.data(), std::size_t(n) * s.hidden1);
  layer_done(b, f1_layer);
  dense_forward(b.h2.data(), b.h1.data(), p.f2w, p.f2b, n, s.hidden1, s.hidden2, b.dense);
  relu_forward(b.h2.data(), b.h2.data(), std::size_t(n) * s.hidden2);
  layer_done(b, f1_layer + 1);
  dense_forward(b.logits.data(), b.h2.data(), p.f3w, p.f3b, n, s.hidden2, classes, b.dense);
  layer_done(b, f1_layer + 2);
}

void dense_head_forward(const DenseHeadView& p, const DenseHeadSizes& s, const float* x, int n,
                        Workspace::Buffers& b, int f1_layer) {
  dense_forward(b.h1.data(), x, p.f1w, p.f1b, n, s.in, s.hidden1, b.dense);
  dense_head_forward_after_f1(p, s, n, b, f1_layer);
}

// Tensors [first, last] of a flat gradient buffer set to zero, where a layer's backward can only
// add (GradientWrite::overwrite for the layers without an overwriting kernel: LeNet-5's
// convolutions, 10 KB of its 247).
void clear_tensors(ModelKind kind, float* grads, int first, int last) {
  const auto& tensors = model_spec(kind).tensors;
  for (int i = first; i <= last; ++i) {
    const ParamTensor& t = tensors[static_cast<std::size_t>(i)];
    std::fill_n(grads + t.offset, t.count, 0.0f);
  }
}

// dx (B,in) may be null (the first layer of a model needs no input gradient). f1w is tensor
// f1_tensor of the model, the one ready() names.
void dense_head_backward(const DenseHeadView& p, const DenseHeadView& g, const DenseHeadSizes& s,
                         float* dx, const float* x, int n, Workspace::Buffers& b,
                         const GradientReady& ready, int f1_tensor, int f1_layer,
                         GradientWrite write) {
  dense_backward(b.dh2.data(), g.f3w, g.f3b, b.dlogits.data(), b.h2.data(), p.f3w, n, s.hidden2,
                 classes, b.dense, write);
  layer_done(b, f1_layer + 2);
  if (ready) ready(f1_tensor + 4, f1_tensor + 5);
  relu_backward(b.dh2.data(), b.dh2.data(), b.h2.data(), std::size_t(n) * s.hidden2);
  dense_backward(b.dh1.data(), g.f2w, g.f2b, b.dh2.data(), b.h1.data(), p.f2w, n, s.hidden1,
                 s.hidden2, b.dense, write);
  layer_done(b, f1_layer + 1);
  if (ready) ready(f1_tensor + 2, f1_tensor + 3);
  relu_backward(b.dh1.data(), b.dh1.data(), b.h1.data(), std::size_t(n) * s.hidden1);
  dense_backward(dx, b.deferred_first_dense ? nullptr : g.f1w, g.f1b, b.dh1.data(), x, p.f1w, n,
                 s.in, s.hidden1, b.dense, write);
  layer_done(b, f1_layer);
  if (ready) ready(f1_tensor, f1_tensor + 1);
}

void lenet5_forward(const Lenet5View& p, const float* x, int n, Workspace::Buffers& b) {
  conv5x5_pad2_relu_forward(b.a1.data(), x, p.c1w, p.c1b, n, L::c1_channels, L::side, L::side);
  maxpool2x2_forward(b.p1.data(), b.a1.data(), n * L::c1_channels, L::side, L::side);
  layer_done(b, lenet5_c1);
  conv5x5_to16_relu_forward(b.a2.data(), b.p1.data(), p.c2w, p.c2b, n, L::c1_channels, L::p1_side,
                            L::p1_side, b.conv_scratch.data());
  // flattened p2 (B,400)
  maxpool2x2_channels_last16_forward(b.p2.data(), b.a2.data(), n, L::a2_side, L::a2_side);
  layer_done(b, lenet5_c2);
  dense_head_forward(p.head, lenet5_head, b.p2.data(), n, b, lenet5_f1);
}

void lenet5_backward(const Lenet5View& p, const Lenet5View& g, const float* x, int n,
                     Workspace::Buffers& b, const GradientReady& ready, GradientWrite write) {
  dense_head_backward(p.head, g.head, lenet5_head, b.dp2.data(), b.p2.data(), n, b, ready, 4,
                      lenet5_f1, write);
  maxpool2x2_relu_channels_last16_backward(b.da2.data(), b.dp2.data(), b.a2.data(), n, L::a2_side,
                                           L::a2_side);
  if (ready) {
    // c2 is the longest layer of backward: in pieces, with a chance to progress communication
    // (f1's allreduce, the largest) between them.
    constexpr int pieces = 4;
    const std::size_t da2_sample = L::a2_floats, p1_sample = L::p1_floats;
    for (int piece = 0, first = 0; piece < pieces; ++piece) {
      const int last = n * (piece + 1) / pieces;
      if (last > first) {
        conv5x5_to16_backward(b.dp1.data() + first * p1_sample, g.c2w, g.c2b,
                              b.da2.data() + first * da2_sample, b.p1.data() + first * p1_sample,
                              p.c2w, last - first, L::c1_channels, L::p1_side, L::p1_side,
                              b.conv_scratch.data());
      }
      first = last;
      if (piece + 1 < pieces) {
        layer_done(b, lenet5_c2);
        ready(1, 0);
      }
    }
  } else {
    conv5x5_to16_backward(b.dp1.data(), g.c2w, g.c2b, b.da2.data(), b.p1.data(), p.c2w, n,
                          L::c1_channels, L::p1_side, L::p1_side, b.conv_scratch.data());
  }
  layer_done(b, lenet5_c2);
  if (ready) ready(2, 3);
  maxpool2x2_relu_backward(b.da1.data(), b.dp1.data(), b.a1.data(), n * L::c1_channels, L::side,
                           L::side);
  conv5x5_pad2_backward_weights(g.c1w, g.c1b, b.da1.data(), x, n, L::c1_channels, L::side, L::side);
  layer_done(b, lenet5_c1);
  if (ready) ready(0, 1);
}

}  // namespace

double forward_backward(ModelKind kind, const float* params, float* grads, const float* x,
                        const std::uint8_t* y, int n, float grad_scale, Workspace& ws,
                        const GradientReady& ready, GradientWrite write) {
  check_batch(ws, n);
  Workspace::Buffers& b = ws.buffers();
  double loss_sum = 0;
  if (kind == ModelKind::fc3) {
    const auto p = fc3_view(params);
    dense_head_forward(p, fc3_head, x, n, b, fc3_f1);
    loss_sum = softmax_xent_forward_backward(b.dlogits.data(), b.logits.data(), y, n, classes,
                                             grad_scale);
    layer_done(b, loss_layer(kind));
    dense_head_backward(p, fc3_view(grads), fc3_head, nullptr, x, n, b, ready, 0, fc3_f1, write);
  } else {
    const auto p = lenet5_view(params);
    lenet5_forward(p, x, n, b);
    loss_sum = softmax_xent_forward_backward(b.dlogits.data(), b.logits.data(), y, n, classes,
                                             grad_scale);
    layer_done(b, loss_layer(kind));
    // c1's and c2's kernels only add: their tensors (0-3) cleared first.
    if (write == GradientWrite::overwrite) clear_tensors(kind, grads, 0, 3);
    lenet5_backward(p, lenet5_view(grads), x, n, b, ready, write);
  }
  return loss_sum;
}

double forward_backward(ModelKind kind, const float* params, float* grads, const float* x,
                        const std::uint8_t* y, int n, float grad_scale, Workspace& ws,
                        GradientWrite write) {
  return forward_backward(kind, params, grads, x, y, n, grad_scale, ws, GradientReady{}, write);
}

bool first_layer_dense(ModelKind kind) { return kind == ModelKind::fc3; }

void first_dense_forward_rows(ModelKind kind, const float* params, const float* x, int n,
                              int row_begin, int row_end, float* out, DenseBackend backend) {
  CNNBENCH_CHECK(first_layer_dense(kind), std::string(model_name(kind)) + "'s first layer is not dense");
  const auto p = fc3_view(params);
  const std::size_t row = fc3_head.in;
  dense_forward(out, x, p.f1w + std::size_t(row_begin) * row, p.f1b + row_begin, n, fc3_head.in,
                row_end - row_begin, backend);
}

float* first_dense_output(Workspace& ws) { return ws.buffers().h1.data(); }

double forward_backward_after_first_dense(ModelKind kind, const float* params, float* grads,
                                          const float* x, const std::uint8_t* y, int n,
                                          float grad_scale, Workspace& ws, GradientWrite write) {
  CNNBENCH_CHECK(first_layer_dense(kind), std::string(model_name(kind)) + "'s first layer is not dense");
  CNNBENCH_CHECK(ws.deferred_first_dense(),
                 "forward_backward_after_first_dense: the workspace must defer f1.weight's gradient");
  check_batch(ws, n);
  Workspace::Buffers& b = ws.buffers();
  const auto p = fc3_view(params);
  dense_head_forward_after_f1(p, fc3_head, n, b, fc3_f1);
  const double loss_sum = softmax_xent_forward_backward(b.dlogits.data(), b.logits.data(), y, n,
                                                        classes, grad_scale);
  layer_done(b, loss_layer(kind));
  dense_head_backward(p, fc3_view(grads), fc3_head, nullptr, x, n, b, GradientReady{}, 0, fc3_f1,
                      write);
  return loss_sum;
}

DenseFactors first_dense_factors(ModelKind kind, const Workspace& ws, const float* x, int samples) {
  const Workspace::Buffers& b = ws.buffers();
  return {kind == ModelKind::fc3 ? x : b.p2.data(), b.dh1.data(), samples};
}

int first_dense_rows(ModelKind kind) {
  return kind == ModelKind::fc3 ? fc3_head.hidden1 : lenet5_head.hidden1;
}

int first_dense_timed_layer(ModelKind kind) { return kind == ModelKind::fc3 ? fc3_f1 : lenet5_f1; }

void first_dense_weight_gradient_rows(ModelKind kind, float* rows, const DenseFactors* batches,
                                      int count, int row_begin, int row_end, DenseBackend backend) {
  const DenseHeadSizes& s = kind == ModelKind::fc3 ? fc3_head : lenet5_head;
  for (int i = 0; i < count; ++i) {
    const DenseFactors& f = batches[i];
    // The output gradient's columns from row_begin on, as a layer of s.hidden1 outputs whose
    // rows [0, row_end - row_begin) are wanted.
    dense_weight_gradient_rows(rows, f.dout + row_begin, f.inp, f.samples, s.in, s.hidden1, 0,
                               row_end - row_begin, backend,
                               i == 0 ? GradientWrite::overwrite : GradientWrite::accumulate);
  }
}

void forward_logits(ModelKind kind, const float* params, const float* x, int n, float* logits,
                    Workspace& ws) {
  check_batch(ws, n);
  Workspace::Buffers& b = ws.buffers();
  if (kind == ModelKind::fc3) {
    dense_head_forward(fc3_view(params), fc3_head, x, n, b, fc3_f1);
  } else {
    lenet5_forward(lenet5_view(params), x, n, b);
  }
  std::memcpy(logits, b.logits.data(), sizeof(float) * std::size_t(n) * classes);
}

}  // namespace cnnbench
