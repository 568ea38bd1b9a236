// IDX reader (the format of the MNIST files): the header is validated and the file size checked
// against it before the data is allocated. `.gz` files are streamed through `gzip -dc`.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"

extern char** environ;

namespace cnnbench {

namespace {

std::string hex_byte(std::uint8_t value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02x", value);
  return text;
}

// Sequential bytes of an IDX file, from disk or from a decompressor.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to n bytes; fewer only at the end of the data.
  virtual std::size_t read(void* destination, std::size_t n) = 0;
  // The total size when known before reading (plain files), to check it before allocating.
  virtual std::optional<std::uint64_t> known_size() const = 0;
  // Called before reporting short data: throws if the short data is the decompressor's fault.
  virtual void check_complete() {}
  // Passes over up to n bytes without keeping them; returns how many there were.
  virtual std::uint64_t skip(std::uint64_t n) {
    constexpr std::size_t chunk = 1 << 16;
    std::vector<std::uint8_t> dropped(static_cast<std::size_t>(std::min<std::uint64_t>(n, chunk)));
    std::uint64_t done = 0;
    while (done < n) {
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, n - done));
      const std::size_t got = read(dropped.data(), step);
      done += got;
      if (got < step) break;
    }
    return done;
  }
};

std::size_t read_fully(int fd, void* destination, std::size_t n,
                       const std::filesystem::path& file) {
  auto* out = static_cast<char*>(destination);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd, out + done, n - done);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("cannot read " + file.string() + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(got);
  }
  return done;
}

class PlainFile final : public ByteSource {
 public:
  explicit PlainFile(const std::filesystem::path& file) : file_(file) {
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open " + file.string() + ": " + std::strerror(errno));
    std::error_code error;
    size_ = std::filesystem::file_size(file, error);
    if (error) {
      ::close(fd_);
      fail("cannot read " + file.string() + ": " + error.message());
    }
  }
  ~PlainFile() override { ::close(fd_); }
  PlainFile(const PlainFile&) = delete;
  PlainFile& operator=(const PlainFile&) = delete;

  std::size_t read(void* destination, std::size_t n) override {
    return read_fully(fd_, destination, n, file_);
  }
  std::optional<std::uint64_t> known_size() const override { return size_; }
  // The size was checked against the header, so a seek lands inside the file.
  std::uint64_t skip(std::uint64_t n) override {
    if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) {
      fail("cannot seek in " + file_.string() + ": " + std::strerror(errno));
    }
    return n;
  }

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// `gzip -dc -- FILE` as a child process (no shell), its stdout read through a pipe.
class GzipStream final : public ByteSource {
 public:
  explicit GzipStream(const std::filesystem::path& file) : file_(file) {
    if (!std::filesystem::is_regular_file(file))
      fail("cannot open " + file.string() + ": no such file");
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
      fail("cannot decompress " + file.string() + ": pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    std::string program = "gzip", flags = "-dc", end_of_options = "--", path = file.string();
    char* argv[] = {program.data(), flags.data(), end_of_options.data(), path.data(), nullptr};
    const int spawned = ::posix_spawnp(&pid_, "gzip", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[1]);
    if (spawned != 0) {
      ::close(pipe_fds[0]);
      fail("cannot decompress " + file.string() + ": cannot run gzip (" + std::strerror(spawned) +
           "); decompress it with gzip -d or run datasets/fetch_mnist.sh");
    }
    fd_ = pipe_fds[0];
  }
  ~GzipStream() override { reap(); }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  std::size_t read(void* destination, std::size_t n) override {
    return read_fully(fd_, destination, n, file_);
  }
  std::optional<std::uint64_t> known_size() const override { return std::nullopt; }
  void check_complete() override {
    const int status = reap();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fail("cannot decompress " + file_.string() +
           ": gzip -dc failed (corrupt or truncated .gz file)");
    }
  }

 private:
  // Closing the pipe first ends a child that still has output to write (SIGPIPE).
  int reap() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (pid_ > 0) {
      while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    return status_;
  }

  std::filesystem::path file_;
  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = 0;
};

struct ExpectedSize {
  std::uint64_t header_bytes = 0;
  std::uint64_t data_bytes = 0;
  bool overflows = false;   // prod(dims) does not fit in 64 bits
  std::string description;  // "16-byte header + 60000x28x28 bytes of data"
  std::uint64_t total() const { return header_bytes + data_bytes; }
  std::string total_text() const {
    return overflows ? "more than 2^64 bytes (" + description + ")"
                     : std::to_string(total()) + " bytes (" + description + ")";
  }
};

ExpectedSize expected_size(const std::vector<std::uint32_t>& dims) {
  ExpectedSize size;
  size.header_bytes = 4 + 4 * dims.size();
  std::uint64_t product = 1;
  std::string shape;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    shape += (i ? "x" : "") + std::to_string(dims[i]);
    if (__builtin_mul_overflow(product, std::uint64_t{dims[i]}, &product)) size.overflows = true;
  }
  if (!size.overflows && product > std::numeric_limits<std::uint64_t>::max() - size.header_bytes) {
    size.overflows = true;
  }
  size.data_bytes = size.overflows ? 0 : product;
  size.description =
      std::to_string(size.header_bytes) + "-byte header + " + shape + " bytes of data";
  return size;
}

std::vector<std::uint32_t> read_header(const std::filesystem::path& file, int expected_rank,
                                       ByteSource& source) {
  std::uint8_t magic[4];
  const std::size_t got_magic = source.read(magic, 4);
  if (got_magic < 4) {
    source.check_complete();
    throw FormatError(file, got_magic, "a 4-byte IDX magic number", "end of file");
  }
  for (int i = 0; i < 2; ++i) {
    if (magic[i] != 0) throw FormatError(file, i, "magic byte 0x00", hex_byte(magic[i]));
  }
  if (magic[2] != 0x08) {
    throw FormatError(file, 2, "type 0x08 (unsigned byte)", hex_byte(magic[2]));
  }
  if (magic[3] != expected_rank) {
    throw FormatError(file, 3, "rank " + std::to_string(expected_rank),
                      "rank " + std::to_string(magic[3]));
  }
  std::vector<std::uint8_t> raw_dims(4 * static_cast<std::size_t>(expected_rank));
  const std::size_t got_dims = source.read(raw_dims.data(), raw_dims.size());
  if (got_dims < raw_dims.size()) {
    source.check_complete();
    throw FormatError(file, 4 + got_dims,
                      std::to_string(4 + raw_dims.size()) + "-byte header for rank " +
                          std::to_string(expected_rank),
                      "end of file");
  }
  std::vector<std::uint32_t> dims(static_cast<std::size_t>(expected_rank));
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::uint8_t* b = &raw_dims[4 * i];
    dims[i] = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
              (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    if (dims[i] == 0) {
      throw FormatError(file, 4 + 4 * i, "dimension " + std::to_string(i) + " > 0", "0");
    }
  }
  return dims;
}

// Plain files: the size is known, so it is checked before anything is allocated.
void check_known_size(const std::filesystem::path& file, const ExpectedSize& size,
                      std::uint64_t file_size) {
  if (!size.overflows && file_size == size.total()) return;
  if (size.overflows || file_size < size.total()) {
    throw FormatError(file, file_size, size.total_text(),
                      "end of file (file is " + std::to_string(file_size) + " bytes)");
  }
  throw FormatError(file, size.total(), "end of file after " + size.total_text(),
                    std::to_string(file_size - size.total()) + " extra bytes");
}

// Up to `wanted` bytes, the buffer growing only as data arrives, so that a header claiming
// gigabytes costs nothing.
std::vector<std::uint8_t> read_growing(ByteSource& source, std::uint64_t wanted) {
  constexpr std::uint64_t chunk = 1 << 20;
  std::vector<std::uint8_t> data;
  std::uint64_t done = 0;
  while (done < wanted) {
    const std::uint64_t step = std::min(chunk, wanted - done);
    data.resize(done + step);
    const std::size_t got = source.read(data.data() + done, step);
    done += got;
    if (got < step) break;
  }
  data.resize(done);
  return data;
}

// The end of a stream must come exactly after the header's size.
void check_stream_end(const std::filesystem::path& file, const ExpectedSize& size,
                      ByteSource& source) {
  std::uint8_t extra;
  if (source.read(&extra, 1) != 0) {
    throw FormatError(file, size.total(), "end of data after " + size.total_text(), "more bytes");
  }
  source.check_complete();
}

// Streams: the buffer grows only as data arrives, so a header claiming gigabytes costs nothing.
std::vector<std::uint8_t> read_stream_data(const std::filesystem::path& file,
                                           const ExpectedSize& size, ByteSource& source) {
  const std::uint64_t wanted =
      size.overflows ? std::numeric_limits<std::uint64_t>::max() : size.data_bytes;
  std::vector<std::uint8_t> data = read_growing(source, wanted);
  const std::uint64_t done = data.size();
  if (done < wanted) {
    source.check_complete();
    throw FormatError(file, size.header_bytes + done, size.total_text(), "end of data");
  }
  check_stream_end(file, size, source);
  return data;
}

std::unique_ptr<ByteSource> open_idx(const std::filesystem::path& file) {
  if (file.extension() == ".gz") return std::make_unique<GzipStream>(file);
  return std::make_unique<PlainFile>(file);
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& file, int expected_rank) {
  CNNBENCH_CHECK(expected_rank >= 1 && expected_rank <= 255, "read_idx: rank must be 1..255");
  std::unique_ptr<ByteSource> source = open_idx(file);
  IdxArray array;
  array.dims = read_header(file, expected_rank, *source);
  const ExpectedSize size = expected_size(array.dims);
  if (const auto file_size = source->known_size()) {
    check_known_size(file, size, *file_size);
    array.data.resize(size.data_bytes);
    const std::size_t got = source->read(array.data.data(), array.data.size());
    if (got != array.data.size()) {
      throw FormatError(file, size.header_bytes + got, size.total_text(),
                        "end of file (the file shrank while being read)");
    }
  } else {
    array.data = read_stream_data(file, size, *source);
  }
  return array;
}

IdxArray read_idx_block(const std::filesystem::path& file, int expected_rank, int blocks,
                        int block) {
  CNNBENCH_CHECK(expected_rank >= 1 && expected_rank <= 255, "read_idx: rank must be 1..255");
  std::unique_ptr<ByteSource> source = open_idx(file);
  IdxArray array;
  array.dims = read_header(file, expected_rank, *source);
  const ExpectedSize size = expected_size(array.dims);
  const auto known = source->known_size();
  if (known) check_known_size(file, size, *known);
  if (size.overflows) {
    throw FormatError(file, 4, "a header whose data fits in 2^64 bytes", size.description);
  }
  const std::uint64_t item_bytes = size.data_bytes / array.dims[0];
  const DataBlock range = data_block(array.dims[0], blocks, block);
  const std::uint64_t before = range.first * item_bytes, wanted = range.count * item_bytes;
  const std::uint64_t after = size.data_bytes - before - wanted;
  const auto short_data = [&](std::uint64_t offset) {
    source->check_complete();
    return FormatError(file, size.header_bytes + offset, size.total_text(),
                       known ? "end of file (the file shrank while being read)" : "end of data");
  };
  if (const std::uint64_t skipped = source->skip(before); skipped != before) {
    throw short_data(skipped);
  }
  array.data = read_growing(*source, wanted);
  if (array.data.size() != wanted) throw short_data(before + array.data.size());
  if (!known) {  // a stream: its length is only known at its end
    const std::uint64_t skipped = source->skip(after);
    if (skipped != after) throw short_data(before + wanted + skipped);
    check_stream_end(file, size, *source);
  }
  return array;
}

}  // namespace cnnbench
