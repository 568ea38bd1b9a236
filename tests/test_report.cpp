// Report building blocks: statistics against an independent oracle, the context's keys and
// types, the strategy list, JSON writing (atomic, stdout) and `cnnbench info`.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cnnbench/config.hpp"
#include "cnnbench/core.hpp"
#include "cnnbench/cpu_identity.hpp"
#include "cnnbench/isa_choice.hpp"
#include "cnnbench/report.hpp"
#include "cnnbench/topology.hpp"
#include "cnnbench/train.hpp"

namespace cnnbench {
namespace {

namespace fs = std::filesystem;

// The oracle walks a multiset to the middle rank(s) instead of sorting and indexing.
double multiset_median(const std::vector<double>& values) {
  const std::multiset<double> ordered(values.begin(), values.end());
  auto lower = ordered.begin();
  std::advance(lower, (values.size() - 1) / 2);
  auto upper = ordered.begin();
  std::advance(upper, values.size() / 2);
  return (*lower + *upper) / 2;
}

double multiset_mad(const std::vector<double>& values) {
  const double median = multiset_median(values);
  std::vector<double> deviations;
  for (const double v : values) deviations.push_back(std::fabs(v - median));
  return multiset_median(deviations);
}

// summarize(values) against statistics worked out by hand.
void expect_summary(const std::vector<double>& values, double median, double min, double max,
                    double mean, double mad) {
  const Summary s = summarize(values);
  EXPECT_DOUBLE_EQ(s.median, median);
  EXPECT_DOUBLE_EQ(s.min, min);
  EXPECT_DOUBLE_EQ(s.max, max);
  EXPECT_DOUBLE_EQ(s.mean, mean);
  EXPECT_DOUBLE_EQ(s.mad, mad);
}

TEST(Summarize, HandCheckedOddSet) {
  // Sorted: 1 2 3 4 100; median 3; deviations 2 1 0 1 97 -> sorted 0 1 1 2 97, MAD 1.
  expect_summary({4, 100, 1, 3, 2}, /*median=*/3, /*min=*/1, /*max=*/100, /*mean=*/22, /*mad=*/1);
}

TEST(Summarize, HandCheckedEvenSet) {
  // Sorted: 1 1 2 2 4 6 9 10; median (2+4)/2 = 3; deviations 2 2 1 1 1 3 6 7 -> sorted
  // 1 1 1 2 2 3 6 7, MAD (2+2)/2 = 2.
  expect_summary({9, 1, 2, 6, 1, 4, 2, 10}, /*median=*/3, /*min=*/1, /*max=*/10, /*mean=*/35.0 / 8,
                 /*mad=*/2);
}

TEST(Summarize, OneValue) {
  const Summary s = summarize(std::vector<double>{0.25});
  for (const double statistic : {s.median, s.min, s.max, s.mean}) EXPECT_EQ(statistic, 0.25);
  EXPECT_EQ(s.mad, 0);
}

TEST(Summarize, MatchesOracleOnRandomSets) {
  Rng rng(20240611);
  for (std::size_t size = 1; size <= 40; ++size) {
    std::vector<double> values;
    double sum = 0;
    for (std::size_t i = 0; i < size; ++i) {
      // Few distinct values, so ties are common.
      values.push_back(static_cast<double>(rng.below(12)) * 0.5 + 1);
      sum += values.back();
    }
    const Summary s = summarize(values);
    EXPECT_DOUBLE_EQ(s.median, multiset_median(values)) << "size " << size;
    EXPECT_DOUBLE_EQ(s.mad, multiset_mad(values)) << "size " << size;
    EXPECT_DOUBLE_EQ(s.mean, sum / static_cast<double>(size)) << "size " << size;
    double low = values[0], high = values[0];
    for (const double v : values) {
      if (v < low) low = v;
      if (v > high) high = v;
    }
    EXPECT_EQ(s.min, low);
    EXPECT_EQ(s.max, high);
  }
}

TEST(Summarize, RejectsEmptyAndNonFiniteInput) {
  EXPECT_THROW(summarize(std::vector<double>{}), Error);
  EXPECT_THROW(summarize(std::vector<double>{1.0, std::nan("")}), Error);
  EXPECT_THROW(summarize(std::vector<double>{1.0, INFINITY}), Error);
}

TEST(Summarize, JsonHasEveryField) {
  const Summary s{2, 1, 3, 2.5, 0.5};
  const nlohmann::json json = summary_json(s);
  EXPECT_EQ(json.at("median"), 2);
  EXPECT_EQ(json.at("min"), 1);
  EXPECT_EQ(json.at("max"), 3);
  EXPECT_EQ(json.at("mean"), 2.5);
  EXPECT_EQ(json.at("mad"), 0.5);
  EXPECT_EQ(json.size(), 5u);
}

// A string when `present`, else null.
void expect_string_when(const nlohmann::json& value, bool present, const char* what) {
  if (present) {
    EXPECT_TRUE(value.is_string() && !value.get<std::string>().empty()) << what << ": " << value;
  } else {
    EXPECT_TRUE(value.is_null()) << what << ": " << value;
  }
}

TEST(Context, HasEveryKeyWithTheRightType) {
  const nlohmann::json context = collect_context();
  EXPECT_TRUE(std::regex_match(context.at("date").get<std::string>(),
                               std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)")))
      << context.at("date");
  EXPECT_FALSE(context.at("host").get<std::string>().empty());
  const Topology& topology = machine_topology();
  EXPECT_EQ(context.at("cpu_model"), topology.cpu_model);
  EXPECT_EQ(context.at("cores"), topology.cores);
  EXPECT_EQ(context.at("pus"), topology.pus);
  EXPECT_EQ(context.at("topology"), topology_json(topology));

  const nlohmann::json& build = context.at("build");
  EXPECT_EQ(build.at("version"), CNNBENCH_VERSION);
  EXPECT_EQ(build.at("type"), CNNBENCH_BUILD_TYPE);
  EXPECT_EQ(build.at("compiler"), CNNBENCH_CXX_COMPILER);
  EXPECT_TRUE(build.at("flags").is_string());
  EXPECT_EQ(build.at("sanitize"), CNNBENCH_SANITIZE);
  EXPECT_FALSE(build.at("git_sha").get<std::string>().empty());
  EXPECT_TRUE(build.at("git_dirty").is_boolean());

  const nlohmann::json& libraries = context.at("libraries");
  EXPECT_NE(libraries.at("openblas").get<std::string>().find("OpenBLAS"), std::string::npos)
      << libraries.at("openblas");
  expect_string_when(libraries.at("hwloc"), CNNBENCH_HAVE_HWLOC, "hwloc");
  expect_string_when(libraries.at("mpi"), CNNBENCH_HAVE_MPI, "mpi");
  // Version strings are single printable lines (Open MPI's comes with a NUL and newlines).
  for (const auto& library : libraries.items()) {
    if (!library.value().is_string()) continue;
    for (const char c : library.value().get<std::string>()) {
      EXPECT_TRUE(c >= 0x20 || c < 0) << library.key() << ": " << library.value();
    }
  }
  if (!CNNBENCH_HAVE_CUDA) {
    EXPECT_TRUE(libraries.at("cuda").is_null());
  }

  ASSERT_TRUE(context.at("environment").is_object());
  for (const auto& variable : context.at("environment").items()) {
    EXPECT_TRUE(variable.value().is_string()) << variable.key();
  }
}

// The context names the CPU (as identify_cpu reads it), the kernels' SIMD target at the time
// of the call and OpenBLAS's core type, so that reports of different machines tell apart.
TEST(Context, NamesTheCpuTheSimdTargetAndTheBlasCore) {
  const nlohmann::json context = collect_context();
  const CpuIdentity cpu = this_cpu();
  const nlohmann::json& recorded = context.at("cpu");
  EXPECT_EQ(recorded.at("vendor"), cpu.vendor);
  EXPECT_EQ(recorded.at("microarchitecture"), cpu.microarchitecture);
  EXPECT_EQ(recorded.at("isa_flags"), cpu.isa_flags);
  for (const char* key : {"family", "model", "stepping", "mhz_nominal", "mhz_current"}) {
    EXPECT_TRUE(recorded.contains(key)) << key;
  }
#if defined(__x86_64__)
  EXPECT_EQ(recorded.at("architecture"), "x86");
  EXPECT_TRUE(recorded.at("family").is_number_integer()) << recorded;
  EXPECT_NE(recorded.at("vendor"), "unknown");
#endif

  const IsaInfo isa = isa_info();
  const nlohmann::json& simd = context.at("simd");
  EXPECT_EQ(simd.at("target"), isa.active);
  EXPECT_EQ(simd.at("highest"), isa.highest);
  EXPECT_EQ(simd.at("choice"), isa.choice.how);
  EXPECT_EQ(simd.at("kernels").at("dense"), isa.choice.targets[std::size_t(KernelFamily::dense)]);
  EXPECT_EQ(simd.at("compiled"), isa.compiled);
  EXPECT_EQ(simd.at("supported"), isa.supported);

  // A narrowed target shows in the next context: it is read per report, not once per process.
  use_isa("scalar");
  const nlohmann::json narrowed = collect_context();
  use_isa("highest");
  EXPECT_EQ(narrowed.at("simd").at("target"), "scalar");
  EXPECT_EQ(narrowed.at("simd").at("choice"), "forced");
  EXPECT_EQ(collect_context().at("simd").at("target"), isa.highest);
  use_isa(isa.requested);

  const nlohmann::json& core_type = context.at("openblas").at("core_type");
  ASSERT_TRUE(core_type.is_string()) << core_type;
  EXPECT_EQ(core_type.get<std::string>(), blas_core_name());
  EXPECT_FALSE(core_type.get<std::string>().empty());
}

TEST(Context, EnvironmentKeepsOnlyRelevantVariables) {
  const std::vector<std::pair<const char*, bool>> variables = {
      {"CNNBENCH_REPORT_TEST", true}, {"OPENBLAS_REPORT_TEST", true},
      {"OMP_REPORT_TEST", true},      {"GOTO_REPORT_TEST", true},
      {"OMPI_COMM_WORLD_SIZE", true}, {"CUDA_VISIBLE_DEVICES", true},
      {"CNNBENCHREPORT_TEST", false}, {"OMPI_COMM_WORLD_RANK_TEST", false},
      {"MY_CNNBENCH_REPORT", false},  {"REPORT_TEST_OMP_", false},
  };
  // Keep whatever the caller set, and put it back afterwards.
  std::vector<std::pair<std::string, std::string>> saved;
  for (const auto& [name, kept] : variables) {
    if (const char* old = std::getenv(name)) saved.emplace_back(name, old);
    ::setenv(name, "value=with=equals", 1);
  }
  const nlohmann::json environment = collect_context().at("environment");
  for (const auto& [name, kept] : variables) {
    ::unsetenv(name);
    if (kept) {
      EXPECT_EQ(environment.value(name, "<missing>"), "value=with=equals") << name;
    } else {
      EXPECT_FALSE(environment.contains(name)) << name;
    }
  }
  for (const auto& [name, value] : saved) ::setenv(name.c_str(), value.c_str(), 1);
}

TEST(Features, ListEveryStrategyWithReasons) {
  const nlohmann::json features = build_features();
  const std::vector<StrategyInfo> strategies = list_strategies();
  ASSERT_EQ(features.size(), strategies.size());
  for (const StrategyInfo& info : strategies) {
    ASSERT_TRUE(features.contains(info.name)) << info.name;
    const nlohmann::json& feature = features.at(info.name);
    EXPECT_EQ(feature.at("available"), info.available) << info.name;
    EXPECT_EQ(feature.at("description"), info.description) << info.name;
    if (info.available) {
      EXPECT_FALSE(feature.contains("reason")) << info.name;
    } else {
      EXPECT_FALSE(feature.at("reason").get<std::string>().empty()) << info.name;
    }
  }
  EXPECT_EQ(features.at("serial").at("available"), true);
  EXPECT_EQ(features.at("cluster").at("available"), static_cast<bool>(CNNBENCH_HAVE_MPI));
  EXPECT_EQ(features.at("gpu").at("available"), static_cast<bool>(CNNBENCH_HAVE_CUDA));
}

// A fresh folder under the system temp dir, removed at the end of the test.
class JsonFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cnnbench-report-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }
  fs::path dir;
};

const nlohmann::json sample_report = {{"schema_version", 1},
                                      {"name", "caf\u00e9"},
                                      {"values", {1.5, 2, 3}},
                                      {"nested", {{"empty", nlohmann::json::object()}}}};

TEST_F(JsonFileTest, WritesIndentedJsonWithTrailingNewline) {
  const fs::path path = dir / "report.json";
  write_json(path, sample_report);
  const std::string text = read_file(path);
  EXPECT_EQ(text, sample_report.dump(2) + "\n");
  EXPECT_EQ(nlohmann::json::parse(text), sample_report);
  EXPECT_EQ(entries(), std::vector<std::string>{"report.json"}) << "a temporary file was left";
}

TEST_F(JsonFileTest, UnwritableFolderThrowsAndKeepsTheOldFile) {
  const fs::path path = dir / "report.json";
  write_output(path, "old content\n");
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  // Root ignores folder permissions; then this check can't be made here.
  if (::access(dir.c_str(), W_OK) == 0) GTEST_SKIP() << "permissions are not enforced";
  try {
    write_json(path, sample_report);
    ADD_FAILURE() << "write_json to a read-only folder did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add);
  EXPECT_EQ(read_file(path), "old content\n");
  EXPECT_EQ(entries(), std::vector<std::string>{"report.json"});
}

TEST_F(JsonFileTest, FailedWriteKeepsTheOldFileEvenForRoot) {
  // The temporary name adds a dozen characters to the file name: at 250 characters the final
  // name is legal but the temporary one is too long, so the write fails for every user.
  const fs::path path = dir / (std::string(245, 'r') + ".json");
  std::ofstream(path) << "old content\n";
  EXPECT_THROW(write_json(path, sample_report), Error);
  EXPECT_EQ(read_file(path), "old content\n");
  EXPECT_EQ(entries().size(), 1u);
}

// Every command creates the folders an output needs (train --report, sweep --out, plot --out).
TEST_F(JsonFileTest, MissingFoldersAreCreated) {
  const fs::path path = dir / "no" / "such" / "report.json";
  write_json(path, sample_report);
  EXPECT_EQ(nlohmann::json::parse(read_file(path)), sample_report);
}

TEST(WriteJson, DashWritesToStdout) {
  ::testing::internal::CaptureStdout();
  write_json("-", sample_report);
  const std::string text = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(text, sample_report.dump(2) + "\n");
  EXPECT_FALSE(fs::exists("-")) << "a file named '-' was created";
}

// Runs the CLI and returns its stdout; the test fails on a non-zero exit.
std::string run_cli(const std::string& arguments) {
  const std::string command = std::string("'") + CNNBENCH_CLI + "' " + arguments;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return "";
  }
  std::string output;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;)
    output.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  return output;
}

TEST(InfoCommand, JsonHasContextAndFeatures) {
  const nlohmann::json info = nlohmann::json::parse(run_cli("info --json"));
  EXPECT_EQ(info.at("features"), build_features());
  const nlohmann::json& context = info.at("context");
  EXPECT_EQ(context.at("topology"), topology_json(machine_topology()));
  EXPECT_EQ(context.at("build").at("version"), CNNBENCH_VERSION);
  EXPECT_EQ(context.at("libraries"), collect_context().at("libraries"));
  const CpuIdentity cpu = this_cpu();
  EXPECT_EQ(context.at("cpu").at("vendor"), cpu.vendor);
  EXPECT_EQ(context.at("cpu").at("microarchitecture"), cpu.microarchitecture);
  EXPECT_EQ(context.at("cpu").at("isa_flags"), cpu.isa_flags);
  const IsaInfo isa = isa_info();
  EXPECT_EQ(context.at("simd").at("compiled"), isa.compiled);
  EXPECT_EQ(context.at("simd").at("supported"), isa.supported);
  // CNNBENCH_ISA may narrow the CLI's targets; each family's is still one this CPU runs.
  for (const auto& [family, target] : context.at("simd").at("kernels").items()) {
    EXPECT_NE(std::find(isa.supported.begin(), isa.supported.end(), target), isa.supported.end())
        << family << ": " << target;
  }
  EXPECT_EQ(context.at("openblas").at("core_type"), blas_core_name());
}

TEST(InfoCommand, TextNamesStrategiesLibrariesAndMachine) {
  const std::string text = run_cli("info");
  EXPECT_NE(text.find(std::string("cnnbench ") + CNNBENCH_VERSION), std::string::npos) << text;
  for (const StrategyInfo& info : list_strategies()) {
    EXPECT_NE(text.find("  " + info.name + " "), std::string::npos) << info.name << "\n" << text;
    if (!info.available) {
      EXPECT_NE(text.find(info.reason), std::string::npos) << text;
    }
  }
  EXPECT_NE(text.find(machine_topology().cpu_model), std::string::npos) << text;
  EXPECT_NE(text.find("OpenBLAS"), std::string::npos) << text;
  EXPECT_NE(text.find("microarch     " + this_cpu().microarchitecture), std::string::npos) << text;
  EXPECT_NE(text.find("SIMD in use   "), std::string::npos) << text;
  std::string compiled;
  for (const std::string& name : isa_info().compiled) compiled += (compiled.empty() ? "" : " ") + name;
  EXPECT_NE(text.find("compiled      " + compiled), std::string::npos) << text;
  EXPECT_NE(text.find("usable cores " + std::to_string(machine_topology().cores)),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace cnnbench
