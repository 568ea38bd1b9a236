// Softmax cross-entropy on logits (B,C): max-subtracted so that large logits cannot overflow;
// per-sample terms are float, their sum is accumulated in double.
#include <cmath>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/layers.hpp"

namespace cnnbench {

namespace {

void check_label(std::uint8_t label, int sample, int C) {
  CNNBENCH_CHECK(label < C, "softmax cross-entropy: sample " + std::to_string(sample) +
                                " has label " + std::to_string(label) + " but there are only " +
                                std::to_string(C) + " classes");
}

float row_max(const float* row, int C) {
  float best = row[0];
  for (int c = 1; c < C; ++c) best = row[c] > best ? row[c] : best;
  return best;
}

}  // namespace

// dlogits (B,C) = (softmax(logits) - onehot(labels)) * grad_scale; returns sum of -log p[label].
double softmax_xent_forward_backward(float* dlogits, const float* logits,
                                     const std::uint8_t* labels, int B, int C, float grad_scale) {
  double loss_sum = 0.0;
  for (int b = 0; b < B; ++b) {
    check_label(labels[b], b, C);
    const float* row = logits + std::size_t(b) * C;
    float* drow = dlogits + std::size_t(b) * C;
    const float max = row_max(row, C);
    float exp_sum = 0.0f;
    for (int c = 0; c < C; ++c) {
      drow[c] = std::exp(row[c] - max);
      exp_sum += drow[c];
    }
    // -log p[label] = log(sum e^(x-max)) - (x[label] - max)
    loss_sum += double(std::log(exp_sum)) - double(row[labels[b]] - max);
    const float scale = grad_scale / exp_sum;
    for (int c = 0; c < C; ++c) drow[c] *= scale;
    drow[labels[b]] -= grad_scale;
  }
  return loss_sum;
}

// Sum of -log p[label] and the number of samples whose first maximal logit is the label.
double softmax_xent_loss(const float* logits, const std::uint8_t* labels, int B, int C,
                         int* correct) {
  double loss_sum = 0.0;
  int hits = 0;
  for (int b = 0; b < B; ++b) {
    check_label(labels[b], b, C);
    const float* row = logits + std::size_t(b) * C;
    int argmax = 0;
    for (int c = 1; c < C; ++c) argmax = row[c] > row[argmax] ? c : argmax;
    const float max = row[argmax];
    float exp_sum = 0.0f;
    for (int c = 0; c < C; ++c) exp_sum += std::exp(row[c] - max);
    loss_sum += double(std::log(exp_sum)) - double(row[labels[b]] - max);
    hits += argmax == labels[b] ? 1 : 0;
  }
  if (correct) *correct = hits;
  return loss_sum;
}

}  // namespace cnnbench
