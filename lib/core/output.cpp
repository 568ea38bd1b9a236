// Output files, written the way a user expects of any tool: a regular file is replaced atomically
// and keeps its mode, a symlink keeps pointing where it did, a device or FIFO is written in place,
// and a path that cannot be written is refused before any work starts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <limits>

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

// ".NAME.tmp.PID.SERIAL": hidden, beside the file, unique to this process and write.
std::string temp_file_name(const std::string& name, unsigned serial) {
  std::string temp = name;
  temp.insert(0, 1, '.');  // (not "." + name: GCC 12 warns falsely on that at -O3)
  temp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial);
  return temp;
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
  const std::string temp = (dir / temp_file_name(path.filename().string(), serial++)).string();
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

namespace {

// The nearest folder at or above `path` that exists ("." for a relative path none of whose
// folders exist).
fs::path nearest_existing(fs::path at) {
  std::error_code error;
  while (!fs::exists(at, error) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  if (!fs::exists(at, error)) at = ".";
  return at;
}

// The longest name this file system allows in the nearest existing folder of `dir`.
std::size_t name_max_at(const fs::path& dir) {
  const fs::path at = nearest_existing(dir);
  errno = 0;
  const long limit = ::pathconf(at.c_str(), _PC_NAME_MAX);
  return limit > 0 ? static_cast<std::size_t>(limit) : NAME_MAX;
}

// Every name in `path` and the whole path fit the limits; with `temp`, the temporary file
// write_output writes beside the file first does too.
void check_lengths(const fs::path& path, bool temp, const std::string& what) {
  const std::size_t name_max = name_max_at(folder_of(path));
  for (const fs::path& part : path.relative_path()) {
    const std::string name = part.string();
    if (name.size() > name_max) {
      fail(what + ": the name " + name.substr(0, 40) + "... is " + std::to_string(name.size()) +
           " bytes; this file system allows " + std::to_string(name_max));
    }
  }
  const std::string name = path.filename().string();
  const std::string temp_name = longest_temp_name(name);
  if (temp && temp_name.size() > name_max) {
    fail(what + ": the name is " + std::to_string(name.size()) + " bytes, and the temporary file " +
         "written first beside it (." + name.substr(0, 20) + "....tmp.PID.N) needs " +
         std::to_string(temp_name.size()) + "; this file system allows " + std::to_string(name_max) +
         ": shorten the name by " + std::to_string(temp_name.size() - name_max) + " bytes");
  }
  const std::size_t longest = temp ? (folder_of(path) / temp_name).string().size() : path.string().size();
  if (longest >= PATH_MAX) {
    fail(what + ": the path" + (temp ? " of the temporary file written first" : "") + " is " +
         std::to_string(longest) + " bytes; paths are limited to " + std::to_string(PATH_MAX - 1));
  }
}

void check_creatable(const fs::path& dir, const std::string& what) {
  const fs::path at = nearest_existing(dir);
  std::error_code error;
  if (!fs::is_directory(at, error)) fail(what + ": " + at.string() + " is not a folder");
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    fail(what + ": cannot write into " + at.string() + ": " + std::strerror(errno));
  }
}

void check_one_file(const fs::path& given, const std::string& what) {
  check_lengths(given, false, what);
  const fs::path path = follow_links(given);
  if (path != given) check_lengths(path, false, what);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(what + ": is a folder; give a file name");
    if (!S_ISREG(st.st_mode) || st.st_nlink > 1) {  // written in place: no temporary file
      if (::access(path.c_str(), W_OK) != 0) fail(what + ": " + std::strerror(errno));
      return;
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {
    fail(what + ": " + std::strerror(errno));
  }
  check_lengths(path, true, what);
  check_creatable(folder_of(path), what);
}

void check_one_folder(const fs::path& dir, const std::string& what) {
  check_lengths(dir, false, what);
  std::error_code error;
  if (fs::exists(dir, error) && !fs::is_directory(dir, error)) fail(what + ": is not a folder");
  check_creatable(dir, what);
}

// What makes two paths one file: the path with its symlinks, "." and ".." resolved, and the
// device and inode of the file when it exists.
struct FileIdentity {
  fs::path resolved;
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  mode_t mode = 0;
};

FileIdentity identify(const fs::path& path) {
  FileIdentity id;
  std::error_code error;
  id.resolved = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) id.resolved = fs::absolute(path, error).lexically_normal();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.device = st.st_dev;
    id.inode = st.st_ino;
    id.mode = st.st_mode;
  }
  return id;
}

bool one_file(const FileIdentity& a, const FileIdentity& b) {
  if (a.exists && b.exists) return a.device == b.device && a.inode == b.inode;
  return a.resolved == b.resolved;
}

// One file an output writes: "OPTION PATH" and the path, and the output it belongs to.
struct Written {
  std::string what;
  fs::path path;
  FileIdentity id;
  const OutputPath* output;
};

// Creates and removes a file in the folder `dir` is or would be made in: proof that it takes one.
void probe_folder(const fs::path& dir, const std::string& what) {
  const fs::path at = nearest_existing(dir);
  static std::atomic<unsigned> serial{0};
  const fs::path probe = at / (".cnnbench-probe." + std::to_string(::getpid()) + "." + std::to_string(serial++));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(what + ": cannot create a file in " + at.string() + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

// Whether the file of `id` exists and is a regular file (a symlink's target), which a write replaces.
bool replaces_a_file(const FileIdentity& id) { return id.exists && S_ISREG(id.mode); }

}  // namespace

std::string longest_temp_name(const std::string& name) {
  return temp_file_name(name, std::numeric_limits<unsigned>::max());
}

void check_outputs(const std::vector<OutputPath>& outputs, const std::vector<InputPath>& inputs) {
  std::vector<Written> written;
  std::string standard_output;  // the output that writes to stdout
  for (const OutputPath& out : outputs) {
    const std::string what = out.option + " " + out.path.string();
    if (out.path.empty()) fail(out.option + ": the path is empty; give a " + (out.folder ? "folder" : "file") + " name");
    if (!out.folder && out.path == "-") {
      if (!standard_output.empty()) {
        fail(what + ": " + standard_output + " writes to standard output already; give one of them a file");
      }
      standard_output = what;
      continue;
    }
    if (out.folder) {
      check_one_folder(out.path, what);
      for (const std::string& name : out.files) {
        check_lengths(out.path / name, true, what);
        written.push_back({what + " (" + name + ")", out.path / name, identify(follow_links(out.path / name)), &out});
      }
    } else {
      check_one_file(out.path, what);
      written.push_back({what, out.path, identify(follow_links(out.path)), &out});
    }
    if (out.probe) probe_folder(out.folder ? out.path : folder_of(follow_links(out.path)), what);
  }
  // Two names of one device (/dev/null twice) write nothing over each other.
  const auto device = [](const FileIdentity& id) {
    return id.exists && (S_ISCHR(id.mode) || S_ISBLK(id.mode));
  };
  for (std::size_t i = 0; i < written.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (!device(written[i].id) && one_file(written[i].id, written[j].id)) {
        fail(written[i].what + ": the same file as " + written[j].what + "; give each output its own file");
      }
    }
  }
  for (const InputPath& in : inputs) {
    if (in.path.empty()) continue;
    std::vector<fs::path> files = {in.path};
    std::error_code error;
    if (fs::is_directory(in.path, error)) {
      files.clear();
      for (const auto& entry : fs::directory_iterator(in.path, error)) files.push_back(entry.path());
    }
    for (const fs::path& file : files) {
      const FileIdentity id = identify(file);
      for (const Written& out : written) {
        if (device(out.id) || !one_file(out.id, id)) continue;
        const std::string read = file == in.path ? in.option + " " + file.string()
                                                 : file.string() + " (in " + in.option + " " + in.path.string() + ")";
        fail(out.what + ": the same file as " + read + ", which this command reads; writing it " +
             "would destroy it: give the output another name");
      }
    }
  }
  for (const Written& out : written) {
    if (out.output->replace || !replaces_a_file(out.id)) continue;
    const OutputPath& given = *out.output;
    fail(given.option + " " + given.path.string() + ": " +
         (given.folder ? out.path.string() + " already exists; " : "already exists; ") + given.advice);
  }
}

bool same_file(const fs::path& a, const fs::path& b) {
  return one_file(identify(follow_links(a)), identify(follow_links(b)));
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
