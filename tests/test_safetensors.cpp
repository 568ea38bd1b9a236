// safetensors: byte layout, round trips, rejection of malformed files (naming file and tensor),
// checkpoints (bit-exact round trip, model and shape mismatches) and atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cnnbench/core.hpp"
#include "cnnbench/models.hpp"
#include "cnnbench/checkpoint.hpp"
#include "cnnbench/safetensors.hpp"
#include "error_message.hpp"
#include "temp_dir.hpp"

namespace cnnbench {
namespace {

using test::error_of;
using test::TempDir;

void write_raw(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(std::uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[static_cast<std::size_t>(i)] = static_cast<char>(value >> (8 * i));
  return bytes;
}

// A file from a header text and `data_bytes` bytes of data (length prefix as given or derived).
std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

SafetensorsFile sample_content() {
  SafetensorsFile content;
  content.metadata = {{"format", "test"}, {"note", "two \"quoted\" words"}};
  content.tensors.push_back({"b.weight", {2, 3}, {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -0.0f}});
  content.tensors.push_back({"a.bias", {3}, {7.0f, 8.0f, 9.0f}});
  content.tensors.push_back({"empty", {0, 4}, {}});
  content.tensors.push_back({"scalar", {}, {42.0f}});
  return content;
}

TEST(Safetensors, RoundTripKeepsOrderShapesAndBits) {
  TempDir dir;
  const auto file = dir.path() / "t.safetensors";
  const SafetensorsFile content = sample_content();
  write_safetensors(file, content);
  const SafetensorsFile back = read_safetensors(file);
  EXPECT_EQ(back.metadata, content.metadata);
  ASSERT_EQ(back.tensors.size(), content.tensors.size());
  for (std::size_t i = 0; i < content.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].name, content.tensors[i].name);
    EXPECT_EQ(back.tensors[i].shape, content.tensors[i].shape);
    ASSERT_EQ(back.tensors[i].data.size(), content.tensors[i].data.size());
    if (content.tensors[i].data.empty()) continue;
    EXPECT_EQ(std::memcmp(back.tensors[i].data.data(), content.tensors[i].data.data(),
                          content.tensors[i].data.size() * sizeof(float)),
              0);
  }
  ASSERT_NE(back.find("a.bias"), nullptr);
  EXPECT_EQ(back.find("a.bias")->data[1], 8.0f);
  EXPECT_EQ(back.find("absent"), nullptr);
}

TEST(Safetensors, ByteLayoutFollowsTheFormat) {
  TempDir dir;
  const auto file = dir.path() / "t.safetensors";
  SafetensorsFile content;
  content.metadata = {{"k", "v"}};
  content.tensors.push_back({"x", {2}, {1.0f, -2.0f}});
  write_safetensors(file, content);
  const std::string bytes = read_file(file);
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i)
    header_length =
        (header_length << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(header_length % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_length + 8);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"k\":\"v\"},\"x\":", 0), 0u) << header;
  EXPECT_NE(header.find("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"),
            std::string::npos)
      << header;
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  // 1.0f = 0x3f800000, -2.0f = 0xc0000000, little-endian.
  EXPECT_EQ(bytes.substr(8 + header_length), std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
}

TEST(Safetensors, TensorsComeBackInOffsetOrder) {
  TempDir dir;
  const auto file = dir.path() / "t.safetensors";
  const std::string header = R"({"late":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("early":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_raw(file, safetensors_bytes(header, 8));
  const SafetensorsFile back = read_safetensors(file);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].name, "early");
  EXPECT_EQ(back.tensors[1].name, "late");
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TempDir dir;
  SafetensorsFile content;
  content.tensors.push_back({"x", {2, 2}, {1.0f, 2.0f, 3.0f}});
  EXPECT_THROW(write_safetensors(dir.path() / "t.safetensors", content), Error);
  content.tensors[0] = {"x", {3}, {1.0f, 2.0f, 3.0f}};
  content.tensors.push_back(content.tensors[0]);
  EXPECT_THROW(write_safetensors(dir.path() / "t.safetensors", content), Error);
  EXPECT_TRUE(files_in(dir.path()).empty());
}

struct Malformed {
  std::string name;
  std::string bytes;
  std::string tensor;  // must appear in the message when not empty
  std::uint64_t offset;
};

std::string entry(const std::string& name, const std::string& body) {
  return "\"" + name + "\":{" + body + "}";
}

// A file holding one tensor entry: `name` with the JSON `body`, then `data_bytes` bytes.
std::string one_tensor(const std::string& name, const std::string& body, std::size_t data_bytes) {
  return safetensors_bytes("{" + entry(name, body) + "}", data_bytes);
}

std::vector<Malformed> malformed_files() {
  const std::string good_x = entry("x", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])");
  std::vector<Malformed> cases;
  cases.push_back({"shorter than the length field", std::string("\x02\x00\x00", 3), "", 0});
  cases.push_back({"header length too big", le64(1000) + "{}", "", 0});
  cases.push_back({"header length too small", le64(1) + "{", "", 0});
  cases.push_back({"header length huge", le64(~0ULL) + "{}", "", 0});
  cases.push_back({"not JSON", safetensors_bytes("{not json}", 0), "", 8});
  cases.push_back({"JSON but not an object", safetensors_bytes("[1, 2]  ", 0), "", 8});
  // One entry that is wrong in itself: the message names its tensor; the header starts at byte 8.
  struct BadEntry {
    const char *name, *tensor, *body;
    std::size_t data_bytes;
  };
  const BadEntry bad_entries[] = {
      {"wrong dtype", "w", R"("dtype":"F16","shape":[2],"data_offsets":[0,4])", 4},
      {"dtype not a string", "w", R"("dtype":3,"shape":[1],"data_offsets":[0,4])", 4},
      {"negative shape", "n", R"("dtype":"F32","shape":[-1,2],"data_offsets":[0,8])", 8},
      {"fractional shape", "n", R"("dtype":"F32","shape":[2.5],"data_offsets":[0,8])", 8},
      {"shape not an array", "n", R"("dtype":"F32","shape":2,"data_offsets":[0,8])", 8},
      {"missing data_offsets", "m", R"("dtype":"F32","shape":[2])", 8},
      {"unknown key", "u", R"("dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1)", 8},
      {"offsets out of range", "o", R"("dtype":"F32","shape":[2],"data_offsets":[0,1000])", 8},
      {"begin after end", "o", R"("dtype":"F32","shape":[0],"data_offsets":[8,4])", 8},
      {"negative offset", "o", R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])", 8},
      {"size does not match shape", "s", R"("dtype":"F32","shape":[3],"data_offsets":[0,8])", 8},
      {"empty tensor name", "", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])", 8},
      {"shape product overflows", "s",
       R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])", 8},
  };
  for (const BadEntry& e : bad_entries) {
    cases.push_back(
        {e.name, one_tensor(e.tensor, e.body, e.data_bytes), "'" + std::string(e.tensor) + "'", 8});
  }
  // Entries each fine alone, wrong together or against the data: the message names the tensor,
  // the offset is `in_data` bytes into the data, after the 8-byte length and the header.
  struct BadLayout {
    const char* name;
    std::string header;
    std::size_t data_bytes;
    const char* tensor;
    std::size_t in_data;
  };
  const BadLayout bad_layouts[] = {
      {"overlap",
       "{" + good_x + "," + entry("y", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])") + "}",
       12, "'y'", 4},
      {"gap",
       "{" + good_x + "," + entry("y", R"("dtype":"F32","shape":[2],"data_offsets":[12,20])") + "}",
       20, "'y'", 8},
      {"gap at the start",
       "{" + entry("y", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])") + "}", 12, "'y'", 0},
      {"trailing bytes", "{" + good_x + "}", 12, "'x'", 8},
  };
  for (const BadLayout& l : bad_layouts) {
    cases.push_back({l.name, safetensors_bytes(l.header, l.data_bytes), l.tensor,
                     8 + l.header.size() + l.in_data});
  }
  cases.push_back({"metadata value not a string",
                   safetensors_bytes(R"({"__metadata__":{"step":1}})", 0), "'step'", 8});
  cases.push_back({"metadata not an object", safetensors_bytes(R"({"__metadata__":"text"})", 0),
                   "__metadata__", 8});
  return cases;
}

TEST(Safetensors, MalformedFilesAreRejectedNamingFileAndTensor) {
  TempDir dir;
  const auto file = dir.path() / "bad.safetensors";
  for (const Malformed& c : malformed_files()) {
    SCOPED_TRACE(c.name);
    write_raw(file, c.bytes);
    try {
      read_safetensors(file);
      ADD_FAILURE() << "accepted a file with " << c.name;
    } catch (const FormatError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(file.string() + ": at byte ", 0), 0u) << message;
      EXPECT_EQ(e.offset(), c.offset) << message;
      if (!c.tensor.empty()) {
        EXPECT_NE(message.find(c.tensor), std::string::npos) << message;
      }
    }
  }
}

TEST(Safetensors, EmptyFileListIsValid) {
  TempDir dir;
  const auto file = dir.path() / "empty.safetensors";
  write_safetensors(file, SafetensorsFile{});
  const SafetensorsFile back = read_safetensors(file);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
}

// --- checkpoints -------------------------------------------------------------------------------

Model random_model(ModelKind kind, std::uint64_t seed) {
  Model model(kind);
  init_params(model.params, kind, seed);
  Rng rng(seed + 100);
  for (float& v : model.momentum) v = rng.uniform(-1.0f, 1.0f);
  return model;
}

bool same_bits(const aligned_vector<float>& a, const aligned_vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  for (const ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    SCOPED_TRACE(model_name(kind));
    const auto file = dir.path() / (std::string(model_name(kind)) + ".safetensors");
    const Model saved = random_model(kind, 17);
    const TrainProgress progress{
        .global_step = 1234, .seed = 0xfedcba9876543210ULL, .batch = 64, .steps_per_epoch = 937};
    save_checkpoint(file, saved, progress);

    Model loaded(kind);
    const TrainProgress back = load_checkpoint(file, loaded);
    EXPECT_TRUE(same_bits(loaded.params, saved.params));
    EXPECT_TRUE(same_bits(loaded.momentum, saved.momentum));
    EXPECT_EQ(back.global_step, progress.global_step);
    EXPECT_EQ(back.seed, progress.seed);
    EXPECT_EQ(back.batch, progress.batch);
    EXPECT_EQ(back.steps_per_epoch, progress.steps_per_epoch);

    // PyTorch's names and shapes, then the momentum buffers; progress in the metadata.
    const SafetensorsFile content = read_safetensors(file);
    const ModelSpec& spec = model_spec(kind);
    ASSERT_EQ(content.tensors.size(), 2 * spec.tensors.size());
    for (std::size_t i = 0; i < spec.tensors.size(); ++i) {
      EXPECT_EQ(content.tensors[i].name, spec.tensors[i].name);
      EXPECT_EQ(content.tensors[i].shape, spec.tensors[i].shape);
      EXPECT_EQ(content.tensors[spec.tensors.size() + i].name, "momentum." + spec.tensors[i].name);
    }
    EXPECT_EQ(content.metadata.at("format"), "cnnbench-checkpoint-1");
    EXPECT_EQ(content.metadata.at("model"), model_name(kind));
    EXPECT_EQ(content.metadata.at("global_step"), "1234");
  }
}

TEST(Checkpoint, ModelMismatchNamesBothModels) {
  TempDir dir;
  const auto file = dir.path() / "fc3.safetensors";
  save_checkpoint(file, random_model(ModelKind::fc3, 1), TrainProgress{});
  Model lenet(ModelKind::lenet5);
  const std::string message = error_of([&] { load_checkpoint(file, lenet); });
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
  EXPECT_NE(message.find("fc3"), std::string::npos) << message;
  EXPECT_NE(message.find("lenet5"), std::string::npos) << message;
}

// Saves `model`, then rewrites the file with `edit` applied to its contents.
std::filesystem::path edited_checkpoint(const TempDir& dir, const Model& model,
                                        const std::function<void(SafetensorsFile&)>& edit) {
  const auto file = dir.path() / "edited.safetensors";
  save_checkpoint(file, model, TrainProgress{.global_step = 5});
  SafetensorsFile content = read_safetensors(file);
  edit(content);
  write_safetensors(file, content);
  return file;
}

Tensor* tensor_named(SafetensorsFile& content, const std::string& name) {
  for (Tensor& t : content.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST(Checkpoint, WrongShapeNamesTensorAndBothShapes) {
  TempDir dir;
  const Model saved = random_model(ModelKind::lenet5, 2);
  const auto file = edited_checkpoint(dir, saved, [](SafetensorsFile& c) {
    tensor_named(c, "c1.weight")->shape = {6, 1, 25};
  });
  Model target = random_model(ModelKind::lenet5, 3);
  const auto before = target.params;
  const std::string message = error_of([&] { load_checkpoint(file, target); });
  EXPECT_NE(message.find("'c1.weight'"), std::string::npos) << message;
  EXPECT_NE(message.find("[6, 1, 25]"), std::string::npos) << message;
  EXPECT_NE(message.find("[6, 1, 5, 5]"), std::string::npos) << message;
  EXPECT_TRUE(same_bits(target.params, before)) << "a failed load changed the model";
}

TEST(Checkpoint, MissingTensorIsNamed) {
  TempDir dir;
  const auto file = edited_checkpoint(dir, random_model(ModelKind::fc3, 2), [](SafetensorsFile& c) {
    std::erase_if(c.tensors, [](const Tensor& t) { return t.name == "f3.bias"; });
  });
  Model target(ModelKind::fc3);
  const std::string message = error_of([&] { load_checkpoint(file, target); });
  EXPECT_NE(message.find("'f3.bias'"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST(Checkpoint, UnexpectedTensorAndBadMetadataAreErrors) {
  TempDir dir;
  const Model model = random_model(ModelKind::fc3, 2);
  auto file = edited_checkpoint(dir, model, [](SafetensorsFile& c) {
    c.tensors.push_back({"f4.weight", {1}, {0.0f}});
  });
  Model target(ModelKind::fc3);
  EXPECT_NE(error_of([&] { load_checkpoint(file, target); }).find("'f4.weight'"),
            std::string::npos);
  file =
      edited_checkpoint(dir, model, [](SafetensorsFile& c) { c.metadata["global_step"] = "12x"; });
  EXPECT_NE(error_of([&] { load_checkpoint(file, target); }).find("global_step"),
            std::string::npos);
  file = edited_checkpoint(dir, model, [](SafetensorsFile& c) { c.metadata["model"] = "vgg"; });
  EXPECT_NE(error_of([&] { load_checkpoint(file, target); }).find("vgg"), std::string::npos);
}

// A PyTorch state_dict saved with safetensors: parameters only, no metadata.
TEST(Checkpoint, PlainStateDictLoadsWithZeroMomentum) {
  TempDir dir;
  for (const ModelKind kind : {ModelKind::fc3, ModelKind::lenet5}) {
    SCOPED_TRACE(model_name(kind));
    const Model source = random_model(kind, 8);
    const auto file = edited_checkpoint(dir, source, [](SafetensorsFile& c) {
      c.metadata.clear();
      std::erase_if(c.tensors, [](const Tensor& t) { return t.name.starts_with("momentum."); });
    });
    Model target = random_model(kind, 9);
    const TrainProgress progress = load_checkpoint(file, target);
    EXPECT_TRUE(same_bits(target.params, source.params));
    EXPECT_TRUE(std::all_of(target.momentum.begin(), target.momentum.end(),
                            [](float v) { return v == 0.0f; }));
    EXPECT_EQ(progress.global_step, 0);
    EXPECT_EQ(progress.batch, 0);

    // The model is inferred from the names, so the other model is still refused.
    Model other(kind == ModelKind::fc3 ? ModelKind::lenet5 : ModelKind::fc3);
    const std::string message = error_of([&] { load_checkpoint(file, other); });
    EXPECT_NE(message.find(model_name(kind)), std::string::npos) << message;
  }
}

TEST(Checkpoint, PartialMomentumIsAnError) {
  TempDir dir;
  const auto file = edited_checkpoint(dir, random_model(ModelKind::fc3, 2), [](SafetensorsFile& c) {
    std::erase_if(c.tensors, [](const Tensor& t) { return t.name == "momentum.f2.weight"; });
  });
  Model target(ModelKind::fc3);
  EXPECT_NE(error_of([&] { load_checkpoint(file, target); }).find("'momentum.f2.weight'"),
            std::string::npos);
}

// --- atomic writes -----------------------------------------------------------------------------

// Missing folders are created (as for every output); a file where a folder belongs is an error
// naming the path.
TEST(AtomicWrite, MissingFoldersAreCreatedAFileInTheWayThrows) {
  TempDir dir;
  const auto file = dir.path() / "no" / "such" / "dir" / "c.safetensors";
  save_checkpoint(file, Model(ModelKind::fc3), TrainProgress{});
  EXPECT_TRUE(std::filesystem::exists(file));
  const auto under_file = file / "c.safetensors";
  const std::string message =
      error_of([&] { save_checkpoint(under_file, Model(ModelKind::fc3), TrainProgress{}); });
  EXPECT_NE(message.find(under_file.string()), std::string::npos) << message;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(file.parent_path()), {}), 1)
      << "a temporary file was left";
}

TEST(AtomicWrite, FailedWriteLeavesExistingFileUntouched) {
  TempDir dir;
  const auto file = dir.path() / "c.safetensors";
  const Model first = random_model(ModelKind::fc3, 1);
  save_checkpoint(file, first, TrainProgress{.global_step = 1});
  const std::string before = read_file(file);

  // An invalid tensor is refused before anything is written.
  SafetensorsFile invalid;
  invalid.tensors.push_back({"x", {2}, {1.0f}});
  EXPECT_THROW(write_safetensors(file, invalid), Error);
  EXPECT_EQ(read_file(file), before);

  // A read-only folder (permissions do not bind root, who skips this part).
  if (::geteuid() != 0) {
    std::filesystem::permissions(
        dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_THROW(save_checkpoint(file, random_model(ModelKind::fc3, 2), TrainProgress{}), Error);
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    EXPECT_EQ(read_file(file), before);
  }

  // The target name is taken by a folder: the rename fails and no temp file is left behind.
  const auto blocked = dir.path() / "blocked.safetensors";
  std::filesystem::create_directory(blocked);
  std::filesystem::create_directory(blocked / "keep");
  EXPECT_THROW(save_checkpoint(blocked, first, TrainProgress{}), Error);
  EXPECT_TRUE(std::filesystem::is_directory(blocked / "keep"));
  EXPECT_EQ(files_in(dir.path()),
            (std::vector<std::string>{"blocked.safetensors", "c.safetensors"}));
  EXPECT_EQ(read_file(file), before);
}

}  // namespace
}  // namespace cnnbench
