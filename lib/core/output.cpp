// Output files, written the way a user expects of any tool: a regular file is replaced atomically
// and keeps its mode, a symlink keeps pointing where it did, a device or FIFO is written in place,
// and a path that cannot be written is refused before any work starts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "cnnbench/core.hpp"

namespace cnnbench {

namespace fs = std::filesystem;

namespace {

// The temporary file of the write in progress, for a signal handler to remove.
char temp_in_progress[4096];
volatile std::sig_atomic_t temp_armed = 0;

[[noreturn]] void fail_errno(const fs::path& path, const std::string& what, int error) {
  fail("cannot write " + path.string() + ": " + what + std::strerror(error));
}

// `path` with its symlinks followed (a dangling link gives the path it points to); the file
// itself, not the link, is what a write replaces.
fs::path follow_links(fs::path path) {
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(path, error))) return path;
    const fs::path target = fs::read_symlink(path, error);
    if (error) return path;
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  fail(path.string() + ": too many levels of symbolic links");
}

fs::path folder_of(const fs::path& path) {
  return path.has_parent_path() ? path.parent_path() : fs::path(".");
}

// Writes all of `bytes` to fd; 0, or the errno of the write that failed.
int write_all(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

// Devices, FIFOs and files with more than one name: written where they are.
void write_in_place(const fs::path& path, std::string_view bytes, bool truncate) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (truncate ? O_TRUNC : 0));
  if (fd < 0) fail_errno(path, "", errno);
  if (const int failed = write_all(fd, bytes); failed != 0) {
    ::close(fd);
    fail_errno(path, "", failed);
  }
  if (::close(fd) != 0) fail_errno(path, "", errno);
}

void write_replacing(const fs::path& path, std::string_view bytes, const struct stat* old) {
  const fs::path dir = folder_of(path);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) fail("cannot write " + path.string() + ": cannot create " + dir.string() + ": " + error.message());
  static std::atomic<unsigned> serial{0};
  std::string temp_name = path.filename().string();
  temp_name.insert(0, 1, '.');  // (not "." + name: GCC 12 warns falsely on that at -O3)
  temp_name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  const std::string temp = (dir / temp_name).string();
  CNNBENCH_CHECK(temp.size() < sizeof temp_in_progress, "cannot write " + path.string() + ": the path is too long");
  // 0666 through the umask, as any new file; an existing file's mode and owner are put back.
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail_errno(path, "cannot create a temporary file in " + dir.string() + ": ", errno);
  std::memcpy(temp_in_progress, temp.c_str(), temp.size() + 1);
  temp_armed = 1;
  auto abandon = [&](const std::string& what, int saved) {
    temp_armed = 0;
    ::unlink(temp.c_str());
    fail_errno(path, what, saved);
  };
  if (const int failed = write_all(fd, bytes); failed != 0) {
    ::close(fd);
    abandon("", failed);
  }
  if (old != nullptr) {
    if (old->st_uid != ::geteuid() || old->st_gid != ::getegid()) {
      [[maybe_unused]] const int ignored = ::fchown(fd, old->st_uid, old->st_gid);  // root only
    }
    if (::fchmod(fd, old->st_mode & 07777) != 0) {
      const int saved = errno;
      ::close(fd);
      abandon("chmod failed: ", saved);
    }
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    abandon("", saved);
  }
  if (::close(fd) != 0) abandon("", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) abandon("rename failed: ", errno);
  temp_armed = 0;
}

// The nearest folder of `path` that exists, which the missing ones will be created in.
void check_creatable(const fs::path& dir, const std::string& what) {
  fs::path at = dir;
  std::error_code error;
  while (!fs::exists(at, error) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  if (!fs::exists(at, error)) at = ".";
  if (!fs::is_directory(at, error)) fail(what + ": " + at.string() + " is not a folder");
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    fail(what + ": cannot write into " + at.string() + ": " + std::strerror(errno));
  }
}

}  // namespace

void write_output(const fs::path& given, std::string_view bytes) {
  const fs::path path = follow_links(given);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) fail_errno(path, "", errno);
    write_replacing(path, bytes, nullptr);
  } else if (S_ISDIR(st.st_mode)) {
    fail("cannot write " + given.string() + ": it is a folder");
  } else if (!S_ISREG(st.st_mode)) {
    write_in_place(path, bytes, false);
  } else if (st.st_nlink > 1) {
    write_in_place(path, bytes, true);  // a new file would leave the other names behind
  } else {
    write_replacing(path, bytes, &st);
  }
}

void check_output_path(const fs::path& given, const std::string& option) {
  if (given == "-") return;
  const std::string what = option + " " + given.string();
  const fs::path path = follow_links(given);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(what + ": is a folder; give a file name");
    if (!S_ISREG(st.st_mode) || st.st_nlink > 1) {
      if (::access(path.c_str(), W_OK) != 0) fail(what + ": " + std::strerror(errno));
      return;
    }
  }
  check_creatable(folder_of(path), what);
}

void check_output_folder(const fs::path& dir, const std::string& option) {
  const std::string what = option + " " + dir.string();
  std::error_code error;
  if (fs::exists(dir, error) && !fs::is_directory(dir, error)) fail(what + ": is not a folder");
  check_creatable(dir, what);
}

fs::path unused_path(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) return path;
  for (int n = 2;; ++n) {
    fs::path next = path.parent_path() / (path.stem().string() + "-" + std::to_string(n) +
                                          path.extension().string());
    if (!fs::exists(fs::symlink_status(next, error))) return next;
  }
}

void remove_output_in_progress() noexcept {
  if (temp_armed) ::unlink(temp_in_progress);
}

}  // namespace cnnbench
