// Errors, the seeded RNG, clocks, reading files and OpenBLAS threading.
#include "cnnbench/core.hpp"

#include <sys/resource.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <ctime>
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
void fail_usage(const std::string& message) { throw UsageError(message); }

std::string printable_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char byte) {
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[byte >> 4];
    out += digits[byte & 15];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
        escape(byte);
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    // The length a lead byte announces, and the smallest code point of that length (an overlong
    // form is invalid); continuation bytes are 10xxxxxx.
    const std::size_t length = byte >= 0xf0 && byte <= 0xf4 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc2 ? 2 : 0;
    bool valid = length > 0 && byte < 0xf5 && i + length <= text.size();
    std::uint32_t code = byte & (0xff >> (length + 1));
    for (std::size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = code << 6 | (next & 0x3f);
    }
    static const std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    valid = valid && code >= smallest[length] && code <= 0x10ffff && (code < 0xd800 || code > 0xdfff);
    if (!valid) {
      escape(byte);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

double float_setting(float value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

std::string gigabytes_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    std::uint64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

void check_memory(const std::string& what, double bytes, const std::string& purpose) {
  const std::uint64_t free_bytes = available_memory_bytes();
  if (free_bytes == 0 || bytes <= static_cast<double>(free_bytes)) return;
  fail_usage(what + " needs " + gigabytes_text(bytes) + " for " + purpose + "; this machine has " +
             gigabytes_text(static_cast<double>(free_bytes)) + " free");
}

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

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
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
