// Fault injection through the real CLI: a full disk, a missing or garbled data set, a checkpoint of
// the other model, a wrong-shape tensor, no GPU, and files claiming huge sizes. Each fault must end
// in one clear line naming the file or device, and leave earlier files as they were.
// A killed MPI rank is tested in tests/mpi/test_cluster_cli.cpp (KillingOneRankEndsTheJobWithin30Seconds).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/data.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/safetensors.hpp"
#include "run_cli.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using cnnbench::test::CliResult;
using cnnbench::test::fresh_temp_dir;
using cnnbench::test::run_cli;

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << file;
}

std::string big_endian(std::uint32_t value) {
  return {static_cast<char>(value >> 24), static_cast<char>(value >> 16), static_cast<char>(value >> 8),
          static_cast<char>(value)};
}

// An IDX header of unsigned bytes with these dimensions (the data is up to the caller).
std::string idx_header(const std::vector<std::uint32_t>& dims) {
  std::string bytes{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (const std::uint32_t d : dims) bytes += big_endian(d);
  return bytes;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Files in dir whose name says they are an unfinished atomic write.
std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (contains(e.path().filename().string(), ".tmp.")) names.push_back(e.path().filename().string());
  }
  return names;
}

const std::string kTrain = "train --model lenet5 --synthetic 256 --batch 32 --quiet";

// ---- a full disk --------------------------------------------------------------------------------

// Writes the earlier checkpoint + report with the disk not yet full, makes it full with `fill`,
// then checks a second run (--force: it replaces them) fails naming the file and cause, and leaves
// both files untouched.
void check_full_disk_keeps_earlier_files(const fs::path& dir, const std::string& prefix,
                                         const std::function<void()>& fill,
                                         const std::string& expected_cause) {
  const fs::path checkpoint = dir / "model.safetensors";
  const fs::path report = dir / "run.json";
  const CliResult first = run_cli(kTrain + " --steps 2 --save " + checkpoint.string() + " --report " +
                                  report.string());
  ASSERT_EQ(first.code, 0) << first.output;
  const std::string checkpoint_before = cnnbench::read_file(checkpoint);
  const std::string report_before = cnnbench::read_file(report);
  fill();

  const CliResult save = run_cli(kTrain + " --steps 4 --force --save " + checkpoint.string() + " --report " +
                                 report.string(), prefix);
  EXPECT_EQ(save.code, 1) << save.output;
  EXPECT_TRUE(contains(save.output, "cnnbench: error: cannot write " + checkpoint.string()))
      << save.output;
  EXPECT_TRUE(contains(save.output, expected_cause)) << save.output;
  std::cout << "[ info ] " << save.output;

  const CliResult report_only = run_cli(kTrain + " --steps 1 --force --report " + report.string(), prefix);
  EXPECT_EQ(report_only.code, 1) << report_only.output;
  EXPECT_TRUE(contains(report_only.output, "cannot write " + report.string())) << report_only.output;
  EXPECT_TRUE(contains(report_only.output, expected_cause)) << report_only.output;

  EXPECT_EQ(cnnbench::read_file(checkpoint), checkpoint_before) << "the earlier checkpoint changed";
  EXPECT_EQ(cnnbench::read_file(report), report_before) << "the earlier report changed";
  EXPECT_TRUE(temp_files(dir).empty()) << "left behind: " << temp_files(dir).front();
}

// A real full disk: a 640 KiB tmpfs (a LeNet-5 checkpoint with momentum is ~490 KiB) in a private
// mount namespace, so the mount disappears with this process. Needs root (CAP_SYS_ADMIN).
TEST(FullDisk, TmpfsFullKeepsEarlierCheckpointAndReport) {
  const fs::path dir = fresh_temp_dir("faults-tmpfs");
  if (::unshare(CLONE_NEWNS) != 0) GTEST_SKIP() << "no private mount namespace: " << std::strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=640k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir};

  const auto fill_the_disk = [&] {
    std::FILE* filler = std::fopen((dir / "filler").c_str(), "wb");
    ASSERT_NE(filler, nullptr);
    std::setvbuf(filler, nullptr, _IONBF, 0);
    const std::string block(4096, 'x');
    while (std::fwrite(block.data(), 1, block.size(), filler) == block.size()) {
    }
    std::fclose(filler);
    EXPECT_LT(fs::space(dir).available, 4096u) << "the tmpfs is not full";
  };
  check_full_disk_keeps_earlier_files(dir, "", fill_the_disk, "No space left on device");
}

// Without root: a file-size limit fails writes the way a full disk does (EFBIG instead of ENOSPC),
// on any file system. SIGXFSZ is ignored so that write() returns the error.
TEST(FullDisk, FileSizeLimitKeepsEarlierCheckpointAndReport) {
  const fs::path dir = fresh_temp_dir("faults-fsize");
  // ulimit -f counts 512-byte blocks in sh: 512 bytes, below a checkpoint and a report.
  check_full_disk_keeps_earlier_files(dir, "trap '' XFSZ; ulimit -f 1;", [] {}, "File too large");
}

// ---- data sets ----------------------------------------------------------------------------------

// `cnnbench train --data dir` must exit 1 with a message that names dir/file and says `cause`;
// `what` heads the failure messages.
void expect_data_error(const fs::path& dir, const std::string& file, const std::string& cause,
                       const std::string& what = "") {
  const CliResult r = run_cli("train --data " + dir.string() + " --steps 1 --quiet");
  EXPECT_EQ(r.code, 1) << what << r.output;
  EXPECT_TRUE(contains(r.output, (dir / file).string())) << what << r.output;
  EXPECT_TRUE(contains(r.output, cause)) << what << r.output;
}

TEST(DataSet, MissingFilesNameTheFileAndHowToFetchIt) {
  const fs::path dir = fresh_temp_dir("faults-missing");
  expect_data_error(dir, "train-images-idx3-ubyte", "datasets/fetch_mnist.sh");
}

// Valid labels beside images that are garbled in different ways: each error names the images
// file and the byte offset of the problem.
TEST(DataSet, GarbledImagesNameTheFileAndOffset) {
  const fs::path dir = fresh_temp_dir("faults-garbled");
  const std::uint32_t count = 64;
  std::string labels = idx_header({count});
  for (std::uint32_t i = 0; i < count; ++i) labels += static_cast<char>(i % 10);
  write_bytes(dir / "train-labels-idx1-ubyte", labels);
  const std::string pixels(count * 28 * 28, '\x7f');
  struct Case {
    std::string name, images, expected;
  };
  const std::vector<Case> cases = {
      {"random bytes", std::string("\x1f\x8b\x08\x00garbage", 11) + pixels, "at byte 0: expected magic byte 0x00"},
      {"wrong rank", idx_header({count, 28 * 28}) + pixels, "at byte 3: expected rank 3"},
      {"truncated", (idx_header({count, 28, 28}) + pixels).substr(0, 16 + 1000), "at byte 1016"},
      {"extra bytes", idx_header({count, 28, 28}) + pixels + "trailing", "8 extra bytes"},
      {"not 28x28", idx_header({count, 32, 24}) + std::string(count * 32 * 24, '\0'), "at byte 8: expected 28 rows"},
  };
  for (const Case& c : cases) {
    write_bytes(dir / "train-images-idx3-ubyte", c.images);
    expect_data_error(dir, "train-images-idx3-ubyte", c.expected, c.name + "\n");
  }
}

TEST(DataSet, CorruptGzipNamesTheFile) {
  if (std::system("command -v gzip >/dev/null 2>&1") != 0) GTEST_SKIP() << "gzip is not installed";
  const fs::path dir = fresh_temp_dir("faults-corrupt-gz");
  write_bytes(dir / "train-images-idx3-ubyte.gz", std::string("\x1f\x8b\x08\x00not really gzip", 18));
  write_bytes(dir / "train-labels-idx1-ubyte", idx_header({1}) + std::string(1, '\0'));
  expect_data_error(dir, "train-images-idx3-ubyte.gz", "gzip");
}

// ---- checkpoints --------------------------------------------------------------------------------

TEST(Checkpoint, OtherModelIsRefusedNamingBothModels) {
  const fs::path dir = fresh_temp_dir("faults-other-model");
  const fs::path fc3 = dir / "fc3.safetensors";
  ASSERT_EQ(run_cli("train --model fc3 --synthetic 256 --batch 32 --steps 1 --quiet --save " + fc3.string()).code, 0);
  for (const std::string flag : {"--resume", "--init"}) {
    const CliResult r = run_cli(kTrain + " --steps 2 " + flag + " " + fc3.string());
    EXPECT_EQ(r.code, 1) << flag << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, fc3.string())) << flag << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "fc3") && contains(r.output, "lenet5")) << flag << "\n" << r.output;
  }
}

// f3.weight transposed: the same number of values, the wrong shape.
TEST(Checkpoint, WrongShapeTensorIsRefusedNamingTensorAndShapes) {
  const fs::path dir = fresh_temp_dir("faults-wrong-shape");
  const fs::path good = dir / "good.safetensors";
  const fs::path bad = dir / "bad.safetensors";
  cnnbench::Model model(cnnbench::ModelKind::lenet5);
  cnnbench::init_params(model.params, model.kind, 3);
  cnnbench::save_checkpoint(good, model, {});
  cnnbench::SafetensorsFile content = cnnbench::read_safetensors(good);
  bool changed = false;
  for (cnnbench::Tensor& t : content.tensors) {
    if (t.name == "f3.weight") {
      ASSERT_EQ(t.shape, (std::vector<std::int64_t>{10, 84}));
      t.shape = {84, 10};
      changed = true;
    }
  }
  ASSERT_TRUE(changed);
  cnnbench::write_safetensors(bad, content);

  ASSERT_EQ(run_cli(kTrain + " --steps 1 --init " + good.string()).code, 0) << "the untouched file must load";
  const CliResult r = run_cli(kTrain + " --steps 1 --init " + bad.string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, bad.string())) << r.output;
  EXPECT_TRUE(contains(r.output, "'f3.weight'")) << r.output;
  EXPECT_TRUE(contains(r.output, "[84, 10]") && contains(r.output, "[10, 84]")) << r.output;
}

// ---- no GPU -------------------------------------------------------------------------------------

// CUDA_VISIBLE_DEVICES="" hides every device, so this runs the same on machines with a GPU.
TEST(NoGpu, GpuStrategyExitsOneNamingTheDevice) {
  const CliResult r = run_cli(kTrain + " --steps 1 --strategy gpu", "CUDA_VISIBLE_DEVICES= ");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "cnnbench: error: ")) << r.output;
#if CNNBENCH_HAVE_CUDA
  EXPECT_TRUE(contains(r.output, "no CUDA device")) << r.output;
#else
  EXPECT_TRUE(contains(r.output, "built without CUDA")) << r.output;
#endif
}

// ---- bounded resources --------------------------------------------------------------------------

// Peak resident memory (bytes) of a child process that runs `body`; the child exits 0 when body
// returns true. Measured by the kernel (wait4's rusage), so it sees every allocation.
struct ChildPeak {
  bool ok = false;
  std::uint64_t peak_bytes = 0;
};
ChildPeak peak_rss_of_child(const std::function<bool()>& body) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  rusage usage{};
  ChildPeak result;
  if (child < 0 || ::wait4(child, &status, 0, &usage) != child) return result;
  result.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  result.peak_bytes = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  return result;
}

template <class Call>
bool throws_format_error(Call call) {
  try {
    call();
  } catch (const cnnbench::FormatError&) {
    return true;
  }
  return false;
}

// Headers claiming 256 MiB - 4 GiB in files of a few hundred bytes are refused, and the process
// never grows by anything like the claim. The control child that does allocate the claim shows
// that the measurement would catch it.
TEST(BoundedResources, HugeClaimsAreRefusedWithoutAllocating) {
  const fs::path dir = fresh_temp_dir("faults-huge");
  constexpr std::uint64_t kClaim = 256ull << 20;
  constexpr std::uint64_t kAllowedGrowth = 64ull << 20;
  const fs::path idx = dir / "huge.idx";
  write_bytes(idx, idx_header({1, 16384, 16384}) + std::string(100, '\0'));
  const fs::path safetensors = dir / "huge.safetensors";
  {
    const std::string header = R"({"x":{"dtype":"F32","shape":[67108864],"data_offsets":[0,268435456]}})";
    std::string bytes(8, '\0');
    const std::uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    write_bytes(safetensors, bytes + header + std::string(64, '\0'));
  }

  const ChildPeak baseline = peak_rss_of_child([] { return true; });
  const ChildPeak control = peak_rss_of_child([&] {
    std::vector<std::uint8_t> claim(kClaim);
    return reinterpret_cast<volatile std::uint8_t*>(claim.data())[kClaim / 2] == 0;
  });
  ASSERT_TRUE(baseline.ok && control.ok);
  ASSERT_GT(control.peak_bytes, baseline.peak_bytes + kClaim / 2) << "peak RSS does not see allocations";
  const auto report = [&](const char* what, const ChildPeak& child) {
    std::cout << "[ info ] " << what << ": peak RSS " << child.peak_bytes / (1 << 20) << " MiB (baseline "
              << baseline.peak_bytes / (1 << 20) << " MiB)\n";
  };
  report("allocating 256 MiB (control)", control);

  const ChildPeak idx_child = peak_rss_of_child(
      [&] { return throws_format_error([&] { cnnbench::read_idx(idx, 3); }); });
  EXPECT_TRUE(idx_child.ok) << "huge.idx was not refused with a FormatError";
  EXPECT_LT(idx_child.peak_bytes, baseline.peak_bytes + kAllowedGrowth);
  report("huge.idx claiming 256 MiB", idx_child);

  const ChildPeak safetensors_child = peak_rss_of_child(
      [&] { return throws_format_error([&] { cnnbench::read_safetensors(safetensors); }); });
  EXPECT_TRUE(safetensors_child.ok) << "huge.safetensors was not refused with a FormatError";
  EXPECT_LT(safetensors_child.peak_bytes, baseline.peak_bytes + kAllowedGrowth);
  report("huge.safetensors claiming 256 MiB", safetensors_child);

  if (std::system("command -v gzip >/dev/null 2>&1") == 0) {
    // A stream's size is only known at its end: 4 GiB claimed, 100 bytes delivered.
    const fs::path gz = dir / "huge.idx.gz";
    write_bytes(dir / "huge4g.idx", idx_header({1, 65536, 65536}) + std::string(100, '\0'));
    ASSERT_EQ(std::system(("gzip -c " + (dir / "huge4g.idx").string() + " > " + gz.string()).c_str()), 0);
    const ChildPeak gz_child = peak_rss_of_child(
        [&] { return throws_format_error([&] { cnnbench::read_idx(gz, 3); }); });
    EXPECT_TRUE(gz_child.ok) << "huge.idx.gz was not refused with a FormatError";
    EXPECT_LT(gz_child.peak_bytes, baseline.peak_bytes + kAllowedGrowth);
    report("huge.idx.gz claiming 4 GiB", gz_child);
  }
}

}  // namespace
