// A synthetic MNIST stand-in: ten seeded "glyphs" made of curved strokes; each sample is one
// glyph, shifted, faded, overlaid with a faint other glyph and noise. Learnable, not trivial.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

namespace cnnbench {

namespace {

constexpr int kSide = 28;
constexpr int kPixels = kSide * kSide;
constexpr int kClasses = 10;
constexpr std::uint64_t kGlyphStream = 0x676c797068;   // "glyph"
constexpr std::uint64_t kSampleStream = 0x73616d706c;  // "sampl"

using Glyph = std::array<float, kPixels>;  // (28,28) intensities in [0,1]

// Draws a soft disc of radius ~3 sigma at (x, y), keeping the brighter value per pixel.
void stamp(Glyph& glyph, float x, float y, float sigma) {
  const int reach = static_cast<int>(std::ceil(3 * sigma));
  for (int r = static_cast<int>(y) - reach; r <= static_cast<int>(y) + reach; ++r) {
    for (int c = static_cast<int>(x) - reach; c <= static_cast<int>(x) + reach; ++c) {
      if (r < 0 || r >= kSide || c < 0 || c >= kSide) continue;
      const float d2 = (c - x) * (c - x) + (r - y) * (r - y);
      float& pixel = glyph[static_cast<std::size_t>(r * kSide + c)];
      pixel = std::max(pixel, std::exp(-d2 / (2 * sigma * sigma)));
    }
  }
}

// Two or three quadratic Bezier strokes inside the central 16x16 box, like a handwritten digit.
Glyph make_glyph(Rng& rng) {
  Glyph glyph{};
  const int strokes = 2 + static_cast<int>(rng.below(2));
  for (int s = 0; s < strokes; ++s) {
    float px[3], py[3];
    for (int k = 0; k < 3; ++k) {
      px[k] = rng.uniform(6.0f, 21.0f);
      py[k] = rng.uniform(6.0f, 21.0f);
    }
    const float sigma = rng.uniform(0.8f, 1.3f);
    constexpr int steps = 48;
    for (int i = 0; i <= steps; ++i) {
      const float t = static_cast<float>(i) / steps, u = 1 - t;
      stamp(glyph, u * u * px[0] + 2 * u * t * px[1] + t * t * px[2],
            u * u * py[0] + 2 * u * t * py[1] + t * t * py[2], sigma);
    }
  }
  return glyph;
}

// glyph value at (r - dy, c - dx): the glyph moved by (dx, dy), zero where it moved in from
// outside.
float shifted(const Glyph& glyph, int r, int c, int dx, int dy) {
  const int source_r = r - dy, source_c = c - dx;
  if (source_r < 0 || source_r >= kSide || source_c < 0 || source_c >= kSide) return 0.0f;
  return glyph[static_cast<std::size_t>(source_r * kSide + source_c)];
}

int random_shift(Rng& rng) { return static_cast<int>(rng.below(5)) - 2; }  // -2..2 pixels

}  // namespace

Dataset make_synthetic(std::size_t count, std::uint64_t seed, std::size_t first) {
  std::vector<Glyph> glyphs;
  Rng glyph_rng(derive_seed(seed, kGlyphStream));
  for (int k = 0; k < kClasses; ++k) glyphs.push_back(make_glyph(glyph_rng));

  Dataset data;
  data.count = count;
  data.rows = kSide;
  data.cols = kSide;
  data.images.resize(count * kPixels);
  data.labels.resize(count);
  data.source = "synthetic(" + std::to_string(count) + ", seed " + std::to_string(seed) +
                (first ? ", from sample " + std::to_string(first) : std::string()) + ")";

  // One RNG per sample: sample i is the same whatever count is asked for.
  const std::uint64_t sample_seed = derive_seed(seed, kSampleStream);
  for (std::size_t i = 0; i < count; ++i) {
    Rng rng(derive_seed(sample_seed, first + i));
    const int label = static_cast<int>(rng.below(kClasses));
    const int other = (label + 1 + static_cast<int>(rng.below(kClasses - 1))) % kClasses;
    const int dx = random_shift(rng), dy = random_shift(rng);
    const int other_dx = random_shift(rng), other_dy = random_shift(rng);
    const float ink = rng.uniform(0.6f, 1.0f);
    const float other_ink = rng.uniform(0.0f, 0.35f);
    std::uint8_t* image = data.images.data() + i * kPixels;
    for (int r = 0; r < kSide; ++r) {
      for (int c = 0; c < kSide; ++c) {
        // The sum of three uniforms approximates Gaussian noise (sd ~0.07).
        const float noise = 0.14f * (rng.next_float() + rng.next_float() + rng.next_float() - 1.5f);
        const float value = ink * shifted(glyphs[label], r, c, dx, dy) +
                            other_ink * shifted(glyphs[other], r, c, other_dx, other_dy) + noise;
        image[r * kSide + c] =
            static_cast<std::uint8_t>(std::lround(255.0f * std::clamp(value, 0.0f, 1.0f)));
      }
    }
    data.labels[i] = static_cast<std::uint8_t>(label);
  }
  return data;
}

Dataset make_synthetic_block(std::size_t total, std::uint64_t seed, int blocks, int block) {
  const DataBlock range = data_block(total, blocks, block);
  Dataset data = make_synthetic(range.count, seed, range.first);
  data.first = range.first;
  data.total = total;
  data.block_source = "samples [" + std::to_string(range.first) + ", " +
                      std::to_string(range.first + range.count) + ") of the sequence";
  data.source = "synthetic(" + std::to_string(total) + ", seed " + std::to_string(seed) + ")";
  return data;
}

}  // namespace cnnbench
