// Errors, the seeded RNG, clocks, reading files and OpenBLAS threading.
#include "cnnbench/core.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include <cblas.h>

namespace cnnbench {

namespace {
std::string describe_format_error(const std::filesystem::path& file, std::uint64_t offset,
                                  std::string_view expected, std::string_view found) {
  std::ostringstream out;
  out << file.string() << ": at byte " << offset << ": expected " << expected << ", found "
      << found;
  return out.str();
}

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

FormatError::FormatError(const std::filesystem::path& file, std::uint64_t offset,
                         std::string_view expected, std::string_view found)
    : Error(describe_format_error(file, offset, expected, found)), file_(file), offset_(offset) {}

void fail(const std::string& message) { throw Error(message); }

Rng::Rng(std::uint64_t seed) {
  for (auto& s : state_) s = splitmix64(seed);
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float Rng::next_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

std::uint64_t Rng::below(std::uint64_t n) {
  // Lemire's rejection keeps it unbiased.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t x = seed ^ (0xd1b54a32d192ed03ULL * (stream + 1));
  return splitmix64(x);
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path.string() + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read " + path.string());
  return std::move(buffer).str();
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }
std::string blas_version() {
  std::string config = openblas_get_config();
  return config;
}
std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

std::uint64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace cnnbench
