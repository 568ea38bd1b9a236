// FC-3 and LeNet-5: one flat parameter buffer (plus gradients and momentum of the same layout)
// with named views whose names and shapes are PyTorch's (f1.weight is (out, in), ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"
#include "cnnbench/step_timeline.hpp"

namespace cnnbench {

enum class ModelKind { fc3, lenet5 };

// The layer sizes of the two models. Their parameter shapes (model_spec), their activations,
// the kernels' arguments and the FLOP counts all follow from these.
// FC-3: x (B,784) -> f1 -> h1 (B,300), ReLU -> f2 -> h2 (B,100), ReLU -> f3 -> logits (B,10).
struct Fc3Sizes {
  static constexpr int input = 28 * 28, hidden1 = 300, hidden2 = 100, classes = 10;
};
// LeNet-5: x (B,1,28,28) -> c1 (5x5, pad 2) + ReLU -> a1 (B,6,28,28) -> pool -> p1 (B,6,14,14)
// -> c2 (5x5) + ReLU -> a2 (B,16,10,10) -> pool -> p2 (B,16,5,5), flattened (B,400) -> f1 -> h1
// (B,120), ReLU -> f2 -> h2 (B,84), ReLU -> f3 -> logits (B,10).
struct Lenet5Sizes {
  static constexpr int side = 28, kernel = 5, c1_pad = 2, c1_channels = 6, c2_channels = 16;
  static constexpr int p1_side = side / 2;
  static constexpr int a2_side = p1_side - kernel + 1;
  static constexpr int p2_side = a2_side / 2;
  static constexpr int flat = c2_channels * p2_side * p2_side;
  static constexpr int hidden1 = 120, hidden2 = 84, classes = 10;
  // Floats per sample of each activation.
  static constexpr int a1_floats = c1_channels * side * side;
  static constexpr int p1_floats = c1_channels * p1_side * p1_side;
  static constexpr int a2_floats = c2_channels * a2_side * a2_side;
};

ModelKind parse_model(std::string_view name);  // Error naming the unknown model
const char* model_name(ModelKind kind);

struct ParamTensor {
  std::string name;                 // "c1.weight", ... as in PyTorch's state_dict
  std::vector<std::int64_t> shape;  // PyTorch's shape
  std::size_t offset = 0;           // into the flat buffer, in floats
  std::size_t count = 0;
  int fan_in = 0;                   // for the U(-1/sqrt(fan_in), 1/sqrt(fan_in)) init
};

struct ModelSpec {
  ModelKind kind = ModelKind::fc3;
  std::vector<ParamTensor> tensors;  // state_dict order
  std::size_t param_count = 0;
  int input_size = 28 * 28;
  int classes = 10;
  double train_flops_per_image = 0;    // forward + backward (no input gradient for layer 1)
  double forward_flops_per_image = 0;
  const ParamTensor& tensor(std::string_view name) const;  // Error when absent
};
const ModelSpec& model_spec(ModelKind kind);

// A model's state: parameters, their gradients and the SGD momentum, each one flat buffer.
struct Model {
  explicit Model(ModelKind kind);
  ModelKind kind;
  aligned_vector<float> params;
  aligned_vector<float> grads;
  aligned_vector<float> momentum;
  const ModelSpec& spec() const { return model_spec(kind); }
  std::span<float> param(std::string_view name);
  std::span<const float> param(std::string_view name) const;
};

// PyTorch's default init ranges from the project's RNG: tensors in state_dict order, each filled
// element by element with U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void init_params(std::span<float> params, ModelKind kind, std::uint64_t seed);

// Activations and scratch for batches of up to max_batch samples; one per thread. It also carries
// what the model's dense layers run on (the own kernels unless told otherwise), so that the choice
// travels with the one who made it instead of through a process-wide switch.
class Workspace {
 public:
  Workspace(ModelKind kind, int max_batch, DenseBackend dense = DenseBackend::own);
  ~Workspace();
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) noexcept;
  int max_batch() const;
  DenseBackend dense_backend() const;
  // forward_backward closes a phase of `timeline` after each layer (forward and backward of
  // layer i count as timed_layer_names(kind)[i]); nullptr, the default, times nothing.
  void set_timeline(StepTimeline* timeline);
  StepTimeline* timeline() const;
  // true: backward leaves f1.weight's gradient (the first dense layer's, FC-3's and LeNet-5's
  // f1) as it was and keeps that layer's factors, its input and output gradient, until the next
  // forward (first_dense_factors), for a caller that sums the gradient over several workspaces'
  // samples itself (first_dense_weight_gradient_rows). f1.bias's gradient is still written.
  void set_deferred_first_dense(bool deferred);
  bool deferred_first_dense() const;
  struct Buffers;
  Buffers& buffers() { return *buffers_; }
  const Buffers& buffers() const { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// The layers a step's compute is timed by, in forward order: a layer's forward and backward
// count as one, its ReLU and pooling with it, and softmax cross-entropy as "loss".
const std::vector<std::string>& timed_layer_names(ModelKind kind);

// Forward + backward of n samples x (n,1,28,28) with labels y. Gradients are *added* into grads
// (same layout as params) scaled by grad_scale (1/global_batch), or with GradientWrite::overwrite
// written over whatever grads held (a step's first contribution: no clear of the buffer before
// it, the same bits as adding into zeros); returns the sum of the n losses.
double forward_backward(ModelKind kind, const float* params, float* grads, const float* x,
                        const std::uint8_t* y, int n, float grad_scale, Workspace& ws,
                        GradientWrite write = GradientWrite::accumulate);
// The same, announcing each layer's gradients as soon as backward has finished them (for
// overlapping communication with compute): ready(first, last) means the tensors with indices
// [first, last] of model_spec(kind).tensors are final. Layers finish in reverse order (f3 first).
// An empty range (first > last) announces nothing: it comes between pieces of a long layer so
// that the receiver may progress communication in flight. LeNet-5's c2 backward then runs in
// pieces of the batch, which sums its weight gradient in a different (fixed) order.
using GradientReady = std::function<void(int first_tensor, int last_tensor)>;
double forward_backward(ModelKind kind, const float* params, float* grads, const float* x,
                        const std::uint8_t* y, int n, float grad_scale, Workspace& ws,
                        const GradientReady& ready,
                        GradientWrite write = GradientWrite::accumulate);
// The first dense layer's factors after a forward_backward of `samples` samples on a workspace
// with set_deferred_first_dense(true): its input (samples, in) and the gradient at its output
// (samples, out), whose products over the samples sum to f1.weight's gradient. x is the batch
// that forward_backward was given (FC-3's f1 reads it directly).
struct DenseFactors {
  const float* inp = nullptr;
  const float* dout = nullptr;
  int samples = 0;
};
DenseFactors first_dense_factors(ModelKind kind, const Workspace& ws, const float* x, int samples);
// f1.weight's output rows of the model (FC-3 300, LeNet-5 120).
int first_dense_rows(ModelKind kind);
// f1's index in timed_layer_names(kind): where its rows' forward and weight gradient are counted.
int first_dense_timed_layer(ModelKind kind);
// f1.weight's gradient rows [row_begin, row_end) as the sum over `count` batches' factors, their
// samples in order, written over `rows` ((row_end - row_begin) x f1's inputs): on the own kernels
// the bits one forward_backward over all the samples (the batches concatenated) gives there.
void first_dense_weight_gradient_rows(ModelKind kind, float* rows, const DenseFactors* batches,
                                      int count, int row_begin, int row_end,
                                      DenseBackend backend = DenseBackend::own);

// A model whose first layer is dense (FC-3) can have that layer's rows computed by several
// threads, each for the whole batch: first_dense_forward_rows writes rows [row_begin, row_end) of
// f1's output for n samples x, (n, rows) with the bias and before the ReLU, the bits
// forward_backward computes there; the caller copies every thread's rows of its own samples into
// first_dense_output(ws) (n, hidden1), and forward_backward_after_first_dense runs the rest: f1's
// ReLU, the layers after it, the loss and backward, f1.weight's gradient left to the caller as
// with set_deferred_first_dense(true) (which the workspace must have). Error for LeNet-5.
bool first_layer_dense(ModelKind kind);
void first_dense_forward_rows(ModelKind kind, const float* params, const float* x, int n,
                              int row_begin, int row_end, float* out,
                              DenseBackend backend = DenseBackend::own);
float* first_dense_output(Workspace& ws);
double forward_backward_after_first_dense(ModelKind kind, const float* params, float* grads,
                                          const float* x, const std::uint8_t* y, int n,
                                          float grad_scale, Workspace& ws, GradientWrite write);

// Forward only: logits (n,10).
void forward_logits(ModelKind kind, const float* params, const float* x, int n, float* logits,
                    Workspace& ws);

// PyTorch's SGD: g += wd*p; v = mu*v + g; p -= lr*v (no dampening, no Nesterov).
struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};
void sgd_step(float* params, const float* grads, float* momentum, std::size_t n,
              const SgdConfig& config);
// One SGD step on the sum of `count` gradient buffers, each holding elements [0, n): the sum is
// ((parts[0] + parts[1]) + parts[2]) + .... Same bits as summing the parts in that order and
// calling sgd_step, but in chunks that stay in L1, so each gradient is read once. The parts are
// left as they are (the sum goes through an L1-sized scratch): several replicas of a model can
// each step on the same gradients.
void sum_sgd_step(float* params, const float* const* parts, int count, float* momentum,
                  std::size_t n, const SgdConfig& config);
// The same step, with the sum left in parts[0] only while it is used and every part zero
// afterwards, ready for the next batch to accumulate into.
void sum_sgd_step_and_clear(float* params, float* const* parts, int count, float* momentum,
                            std::size_t n, const SgdConfig& config);

}  // namespace cnnbench
