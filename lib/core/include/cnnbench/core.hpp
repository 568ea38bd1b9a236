// Core helpers shared by every part of libcnnbench: errors, aligned buffers, the seeded RNG,
// clocks and output files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cnnbench {

// Every error a user can act on is a cnnbench::Error whose what() is one line naming the cause.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An input file is malformed: names the file, the byte offset, what was expected and found.
class FormatError : public Error {
 public:
  FormatError(const std::filesystem::path& file, std::uint64_t offset, std::string_view expected,
              std::string_view found);
  const std::filesystem::path& file() const { return file_; }
  std::uint64_t offset() const { return offset_; }

 private:
  std::filesystem::path file_;
  std::uint64_t offset_;
};

// A value the user gave asks for what cannot be done (zero steps, more memory than the machine
// has, a resume with nothing left to train): the CLI exits 2, as for any other bad value.
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail(const std::string& message);
[[noreturn]] void fail_usage(const std::string& message);

// `text` as it may reach a terminal: valid UTF-8 and newlines and tabs kept, every other control
// byte and every byte of an invalid UTF-8 sequence written as \xNN.
std::string printable_text(std::string_view text);

// A float setting (lr, momentum, weight decay) as every report stores it: the shortest decimal
// that reads back as that float (0.01, not the 0.009999999776482582 it widens to), so that equal
// settings compare equal whichever report they come from.
double float_setting(float value);

// "3.1 GB" (decimal units, one decimal), for sizes said to people.
std::string gigabytes_text(double bytes);
// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
std::uint64_t available_memory_bytes();
// Usage error unless `bytes` fit in this machine's MemAvailable: "WHAT needs 3.1 GB for FOR;
// this machine has 23.0 GB free" (nothing is checked where MemAvailable cannot be read).
void check_memory(const std::string& what, double bytes, const std::string& purpose);
#define CNNBENCH_CHECK(cond, message)        \
  do {                                       \
    if (!(cond)) ::cnnbench::fail(message);  \
  } while (0)

// 64-byte aligned allocator so that SIMD loads and cache lines line up.
template <class T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::size_t alignment = 64;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignment)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(alignment)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept { return true; }
};
template <class T>
using aligned_vector = std::vector<T, AlignedAllocator<T>>;

// The project's own RNG (xoshiro256** seeded through splitmix64): the same seed gives the same
// stream on every platform and strategy, unlike std:: distributions.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next_u64();
  // Uniform in [0, 1) with 24 bits of mantissa.
  float next_float();
  float uniform(float lo, float hi) { return lo + (hi - lo) * next_float(); }
  // Uniform integer in [0, n), unbiased.
  std::uint64_t below(std::uint64_t n);

 private:
  std::uint64_t state_[4];
};

// A seed derived from a base seed and a stream id (e.g. the epoch), so streams don't overlap.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream);

double now_seconds();  // steady clock, seconds
// Now in UTC as ISO 8601 ("2026-12-06T01:23:45Z"), as reports and caches date themselves.
std::string utc_now_iso8601();

// Writes an output file (lib/core/output.cpp). A regular file, new or old, is replaced atomically
// (a temp file in its folder, fsync, rename) and keeps the old file's mode and owner (a new one
// gets 0666 less the umask); a symlink is followed and its target replaced; a device, a FIFO or a
// file with other hard links is written in place. Missing folders are created. On any error the
// temp file is removed, a regular file keeps its old content, and an Error names the path and
// cause ("No space left on device").
void write_output(const std::filesystem::path& path, std::string_view bytes);

// One file (or folder) a command writes, named by the option that gave it.
struct OutputPath {
  std::string option;          // "--report"; every message starts "OPTION PATH: "
  std::filesystem::path path;  // "-" = standard output
  bool folder = false;         // a folder the command writes `files` into (plot --out)
  std::vector<std::string> files = {};
  // An existing regular file that the output would replace is refused unless `replace` (the
  // command's --force, or an output the command continues, as sweep --resume its report);
  // `advice` ends that message.
  bool replace = false;
  std::string advice = "pass --force to overwrite it";
  // Creates and removes a file in the folder the output goes to (its nearest existing folder), for
  // outputs written only at the end of long work: a folder that takes no file whatever its mode
  // says (a read-only mount, /proc, an ACL) is refused before the work, not after.
  bool probe = false;
};
// One file a command reads, or a folder whose files it reads (--data).
struct InputPath {
  std::string option;
  std::filesystem::path path;
};
// The output rule, checked before any work (lib/core/output.cpp); an Error names the first
// output that breaks it and why:
// - the path is not empty;
// - write_output can write it: not a folder (a file where a folder is expected), its folder
//   exists or can be created (the nearest existing one is a writable folder, no part of the path
//   is a file), a device or FIFO is writable; with `probe`, a file can be created there;
// - every name in it, the temporary file's name write_output makes beside it, and the whole
//   path fit the file system's NAME_MAX and PATH_MAX;
// - no two outputs, and no output and input, are one file: resolved paths (symlinks, ./x),
//   and device + inode where the file exists (hard links). Two names of one device are allowed;
// - it replaces no existing regular file (through a symlink too; a folder output: none of its
//   `files`) unless `replace`: "OPTION PATH: already exists; ADVICE". Devices and FIFOs, written
//   in place, are not replaced. Checked last, so that a clash --force cannot fix is said first.
void check_outputs(const std::vector<OutputPath>& outputs, const std::vector<InputPath>& inputs = {});
// Whether two paths name one file, by the rule check_outputs applies between outputs.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);
// The name write_output gives the temporary file of `name` (".NAME.tmp.PID.N") at its longest.
std::string longest_temp_name(const std::string& name);

// `path` if nothing is there, else the first free of STEM-2.EXT, STEM-3.EXT, ...
std::filesystem::path unused_path(const std::filesystem::path& path);

// Async-signal-safe: removes the temporary file of a write_output in progress (a second Ctrl-C
// that ends the process at once leaves no partial file).
void remove_output_in_progress() noexcept;

// Whole file into memory; Error naming the path when it can't be read.
std::string read_file(const std::filesystem::path& path);

// Forces OpenBLAS to `threads` threads (1 for every strategy; N for the blas baseline).
void set_blas_threads(int threads);
int blas_threads();
std::string blas_version();
// The kernel set OpenBLAS chose for this CPU ("Haswell", "SkylakeX", "Zen", "NeoverseN1"):
// OPENBLAS_CORETYPE or a different CPU changes it, and with it the sgemm speed.
std::string blas_core_name();

// Peak resident set size of this process in bytes (getrusage).
std::uint64_t peak_rss_bytes();

}  // namespace cnnbench
