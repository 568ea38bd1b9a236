// safetensors files: an 8-byte little-endian header length, a JSON header, then the raw data.
// The reader trusts nothing: every length, offset and shape is checked before it is used.
#include "cnnbench/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "cnnbench/core.hpp"

namespace cnnbench {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build assumes a little-endian host");

namespace {

constexpr std::uint64_t kLengthBytes = 8;
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the limit of the reference library
constexpr std::uint64_t kHeaderOffset = kLengthBytes;   // where JSON problems are reported

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// prod(shape), or nothing when an entry is negative or the product overflows.
std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t count = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count)) return std::nullopt;
  }
  return count;
}

std::string build_header(const SafetensorsFile& content) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!content.metadata.empty()) header["__metadata__"] = content.metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const Tensor& t : content.tensors) {
    CNNBENCH_CHECK(!t.name.empty() && t.name != "__metadata__",
                   "write_safetensors: invalid tensor name " + quoted(t.name));
    CNNBENCH_CHECK(names.insert(t.name).second,
                   "write_safetensors: tensor " + quoted(t.name) + " appears twice");
    const auto count = element_count(t.shape);
    CNNBENCH_CHECK(count && *count == t.data.size(), "write_safetensors: tensor " + quoted(t.name) +
                                                         " has shape " + shape_text(t.shape) +
                                                         " but holds " +
                                                         std::to_string(t.data.size()) + " values");
    const std::uint64_t bytes = t.data.size() * sizeof(float);
    nlohmann::ordered_json entry;
    entry["dtype"] = "F32";
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    header[t.name] = std::move(entry);
    offset += bytes;
  }
  std::string text = header.dump();
  // Padding keeps the data section 8-byte aligned.
  text.append((kLengthBytes - text.size() % kLengthBytes) % kLengthBytes, ' ');
  return text;
}

struct TensorEntry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // within the data section
};

class HeaderParser {
 public:
  HeaderParser(const std::filesystem::path& file, std::uint64_t data_size)
      : file_(file), data_size_(data_size) {}

  [[noreturn]] void reject(const std::string& expected, const std::string& found) const {
    throw FormatError(file_, kHeaderOffset, expected, found);
  }

  std::map<std::string, std::string> metadata(const nlohmann::json& value) const {
    if (!value.is_object()) reject("__metadata__ as an object", value.type_name());
    std::map<std::string, std::string> result;
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) {
        reject("__metadata__ mapping strings to strings",
               "key " + quoted(key) + " holding a " + item.type_name());
      }
      result[key] = item.get<std::string>();
    }
    return result;
  }

  TensorEntry tensor(const std::string& name, const nlohmann::json& value) const {
    const std::string what = "tensor " + quoted(name);
    // The writer refuses an empty name, so a file that loads can always be written back.
    if (name.empty()) reject("tensor names that are not empty", "a tensor named ''");
    if (!value.is_object()) reject(what + " as an object", value.type_name());
    for (const auto& [key, item] : value.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        reject(what + " with dtype, shape and data_offsets only", "key " + quoted(key));
      }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(key)) reject(what + " with " + key, "no " + std::string(key));
    }
    const auto& dtype = value["dtype"];
    if (!dtype.is_string() || dtype.get<std::string>() != "F32") {
      reject(what + " with dtype F32",
             "dtype " + (dtype.is_string() ? dtype.get<std::string>() : dtype.dump()));
    }
    TensorEntry entry{.name = name, .shape = {}};
    const auto& shape = value["shape"];
    if (!shape.is_array()) reject(what + " with a shape array", shape.dump());
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) {
        reject(what + " with non-negative integer shape entries", "shape " + shape.dump());
      }
      const std::uint64_t extent = d.get<std::uint64_t>();
      if (extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        reject(what + " with a shape below 2^63", "shape " + shape.dump());
      }
      entry.shape.push_back(static_cast<std::int64_t>(extent));
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      reject(what + " with data_offsets [begin, end] of non-negative integers",
             "data_offsets " + offsets.dump());
    }
    entry.begin = offsets[0].get<std::uint64_t>();
    entry.end = offsets[1].get<std::uint64_t>();
    if (entry.begin > entry.end || entry.end > data_size_) {
      reject(what + " with 0 <= begin <= end <= " + std::to_string(data_size_) +
                 " (the data section's size)",
             "data_offsets " + offsets.dump());
    }
    const auto count = element_count(entry.shape);
    const std::uint64_t span = entry.end - entry.begin;
    if (!count || span % sizeof(float) != 0 || *count != span / sizeof(float)) {
      reject(what + " of shape " + shape_text(entry.shape) + " to span " +
                 (count && *count <= std::numeric_limits<std::uint64_t>::max() / sizeof(float)
                      ? std::to_string(*count * sizeof(float))
                      : std::string("more than 2^64")) +
                 " bytes",
             "data_offsets " + offsets.dump() + " spanning " + std::to_string(span) + " bytes");
    }
    return entry;
  }

 private:
  const std::filesystem::path& file_;
  std::uint64_t data_size_;
};

// Tensors must tile the data section exactly, in offset order.
void check_tiling(const std::filesystem::path& file, const std::vector<TensorEntry>& entries,
                  std::uint64_t data_start, std::uint64_t data_size) {
  std::uint64_t next = 0;
  std::string previous = "the start of the data section";
  for (const TensorEntry& e : entries) {
    if (e.begin < next) {
      throw FormatError(file, data_start + e.begin,
                        "tensor " + quoted(e.name) + " to start at data offset " +
                            std::to_string(next) + " (after " + previous + ")",
                        "data offset " + std::to_string(e.begin) + ", overlapping " + previous);
    }
    if (e.begin > next) {
      throw FormatError(file, data_start + next,
                        "tensor " + quoted(e.name) + " to start at data offset " +
                            std::to_string(next) + " (after " + previous + ")",
                        "a gap of " + std::to_string(e.begin - next) + " bytes before it");
    }
    next = e.end;
    previous = "tensor " + quoted(e.name);
  }
  if (next != data_size) {
    throw FormatError(file, data_start + next, "end of file after " + previous,
                      std::to_string(data_size - next) + " more bytes");
  }
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void write_safetensors(const std::filesystem::path& file, const SafetensorsFile& content) {
  const std::string header = build_header(content);
  std::size_t data_bytes = 0;
  for (const Tensor& t : content.tensors) data_bytes += t.data.size() * sizeof(float);
  std::string bytes(kLengthBytes + header.size() + data_bytes, '\0');
  const std::uint64_t header_length = header.size();
  std::memcpy(bytes.data(), &header_length, kLengthBytes);
  std::memcpy(bytes.data() + kLengthBytes, header.data(), header.size());
  char* out = bytes.data() + kLengthBytes + header.size();
  for (const Tensor& t : content.tensors) {
    if (t.data.empty()) continue;
    std::memcpy(out, t.data.data(), t.data.size() * sizeof(float));
    out += t.data.size() * sizeof(float);
  }
  write_output(file, bytes);
}

SafetensorsFile read_safetensors(const std::filesystem::path& file) {
  const std::string bytes = read_file(file);
  const std::uint64_t file_size = bytes.size();
  if (file_size < kLengthBytes) {
    throw FormatError(file, 0, "an 8-byte header length",
                      "a file of " + std::to_string(file_size) + " bytes");
  }
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), kLengthBytes);
  const std::uint64_t room = file_size - kLengthBytes;
  if (header_length < 2 || header_length > room || header_length > kMaxHeaderBytes) {
    throw FormatError(file, 0,
                      "a header length in [2, " + std::to_string(std::min(room, kMaxHeaderBytes)) +
                          "] (the file has " + std::to_string(room) + " bytes after the length)",
                      std::to_string(header_length));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        bytes.begin() + kLengthBytes,
        bytes.begin() + static_cast<std::ptrdiff_t>(kLengthBytes + header_length));
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(file, kHeaderOffset, "a JSON header",
                      "invalid JSON (at header byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::out_of_range&) {
    // The parser's only other error: a number beyond a double's range, such as 1e999.
    throw FormatError(file, kHeaderOffset, "a JSON header",
                      "invalid JSON (a number too large for a double)");
  }
  if (!header.is_object()) {
    throw FormatError(file, kHeaderOffset, "a JSON object header",
                      std::string("a JSON ") + header.type_name());
  }

  const std::uint64_t data_start = kLengthBytes + header_length;
  const std::uint64_t data_size = file_size - data_start;
  HeaderParser parser(file, data_size);
  SafetensorsFile content;
  std::vector<TensorEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      content.metadata = parser.metadata(value);
    } else {
      entries.push_back(parser.tensor(key, value));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(file, entries, data_start, data_size);

  for (TensorEntry& e : entries) {
    Tensor t{.name = std::move(e.name), .shape = std::move(e.shape), .data = {}};
    t.data.resize((e.end - e.begin) / sizeof(float));
    if (!t.data.empty()) {
      std::memcpy(t.data.data(), bytes.data() + data_start + e.begin, e.end - e.begin);
    }
    content.tensors.push_back(std::move(t));
  }
  return content;
}

}  // namespace cnnbench
