#include "core/tensor_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "core/error.h"
#include "core/json_doc.h"

namespace pt {

namespace {

constexpr char kMagic[] = "PTTENSR1";
constexpr size_t kMagicBytes = 8;
constexpr size_t kPrefixBytes = kMagicBytes + 8;
constexpr const char* kKind = "tensors";
constexpr int kVersion = 1;
// Dimensions per tensor and elements per dimension: far beyond any layer, small enough that a
// product of checked factors cannot overflow before it is compared with the file's size.
constexpr int64_t kMaxDims = 16;
constexpr int64_t kMaxDim = int64_t(1) << 40;

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

int64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {{"float64", 8}, {"float32", 4}, {"float16", 2},
                                                       {"bfloat16", 2}, {"int64", 8},   {"int32", 4},
                                                       {"int16", 2},    {"int8", 1},    {"uint8", 1},
                                                       {"bool", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

namespace {
// Elements of `bytes` bytes (little-endian) whose exponent field (`mask`) is all ones.
template <class Bits>
int64_t all_ones_exponents(const std::string& data, Bits mask) {
  int64_t n = 0;
  for (size_t at = 0; at + sizeof(Bits) <= data.size(); at += sizeof(Bits)) {
    Bits v = 0;
    for (size_t b = 0; b < sizeof(Bits); ++b) v |= static_cast<Bits>(static_cast<unsigned char>(data[at + b])) << (8 * b);
    n += (v & mask) == mask;
  }
  return n;
}

// Elements of `data` in dtype that are NaN or infinite; 0 for a dtype that holds neither.
int64_t non_finite_of(const std::string& dtype, const std::string& data) {
  if (dtype == "float32") return all_ones_exponents<uint32_t>(data, 0x7F800000u);
  if (dtype == "float64") return all_ones_exponents<uint64_t>(data, 0x7FF0000000000000ull);
  if (dtype == "float16") return all_ones_exponents<uint16_t>(data, 0x7C00u);
  if (dtype == "bfloat16") return all_ones_exponents<uint16_t>(data, 0x7F80u);
  return 0;
}

}  // namespace

int64_t count_non_finite(const TensorRecord& t) { return non_finite_of(t.dtype, t.data); }

namespace {
std::vector<TensorRecord> read_header(const std::string& path, int64_t* data_start);
}  // namespace

std::vector<int64_t> count_non_finite_in_file(const std::string& path) {
  int64_t data_start = 0;
  std::vector<TensorRecord> records = read_header(path, &data_start);  // sizes checked against the file
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start));
  std::vector<int64_t> out;
  std::string piece;
  for (const auto& t : records) {
    int64_t size = dtype_size(t.dtype), left = size;
    for (int64_t d : t.shape) left *= d;
    int64_t bad = 0;
    const int64_t kPiece = (int64_t{1} << 20) / 8 * 8;  // whole elements of every size
    while (left > 0) {
      piece.resize(static_cast<size_t>(std::min(left, kPiece)));
      in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
      if (!in) throw FormatError(str(path, ": could not read tensor '", t.name, "'"));
      bad += non_finite_of(t.dtype, piece);
      left -= static_cast<int64_t>(piece.size());
    }
    out.push_back(bad);
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

namespace {

int64_t bytes_of(const TensorRecord& t) {
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  PT_CHECK(dtype_size(t.dtype) > 0, "unknown dtype '", t.dtype, "' of tensor '", t.name, "'");
  return numel * dtype_size(t.dtype);
}

// The magic, the header's length and the header of a file of `tensors`, whose bytes follow.
std::string tensor_file_head(const std::vector<TensorRecord>& tensors) {
  json list = json::array();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t bytes = bytes_of(t);
    list.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"offset", offset}, {"bytes", bytes}});
    offset += bytes;
  }
  std::string header = json{{"format", format_tag(kKind, kVersion)}, {"tensors", list}}.dump();
  std::string out(kMagic, kMagicBytes);
  append_u64_le(out, header.size());
  return out + header;
}

}  // namespace

std::string tensor_file_bytes(const std::vector<TensorRecord>& tensors) {
  std::string out = tensor_file_head(tensors);
  for (const auto& t : tensors) {
    PT_CHECK(bytes_of(t) == static_cast<int64_t>(t.data.size()), "tensor '", t.name, "' holds ", t.data.size(),
             " bytes, its shape and dtype say ", bytes_of(t));
    out += t.data;
  }
  return out;
}

void write_tensor_file_atomic(const std::string& path, const std::vector<TensorRecord>& tensors,
                              const std::vector<const void*>& bytes) {
  PT_CHECK(bytes.size() == tensors.size(), bytes.size(), " data pointers for ", tensors.size(), " tensors");
  std::string head = tensor_file_head(tensors);
  std::vector<std::string_view> pieces{head};
  for (size_t i = 0; i < tensors.size(); ++i)
    pieces.emplace_back(static_cast<const char*>(bytes[i]), static_cast<size_t>(bytes_of(tensors[i])));
  write_file_atomic(path, pieces);
}

namespace {

// The records of a tensor file of `file_bytes` bytes, from `bytes`, which hold at least its
// prefix and header (the whole file when `with_data`).
std::vector<TensorRecord> parse_records(const std::string& bytes, uint64_t file_bytes, const std::string& source,
                                        bool with_data) {
  if (bytes.size() < kPrefixBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    throw FormatError(str(source, ": not a pipetrain tensor file (it does not start with '", kMagic, "')"));
  uint64_t header_bytes = read_u64_le(bytes.data() + kMagicBytes);
  if (header_bytes > static_cast<uint64_t>(kMaxTensorHeaderBytes) || header_bytes > file_bytes - kPrefixBytes ||
      header_bytes > bytes.size() - kPrefixBytes)
    throw FormatError(str(source, ": header length ", header_bytes, " runs past the file's ", file_bytes, " bytes"));
  json doc = parse_json(bytes.substr(kPrefixBytes, header_bytes), source);
  JsonField root(doc, source, "");
  expect_format(root, kKind, kVersion);
  JsonField list = root["tensors"];
  const int64_t data_start = static_cast<int64_t>(kPrefixBytes + header_bytes);
  const int64_t data_bytes = static_cast<int64_t>(file_bytes) - data_start;
  std::vector<TensorRecord> out;
  int64_t offset = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonField t = list[i];
    TensorRecord r;
    r.name = t["name"].as_string();
    r.dtype = t["dtype"].as_string();
    int64_t item = dtype_size(r.dtype);
    if (item == 0) t["dtype"].fail(str("unknown dtype '", r.dtype, "'"));
    JsonField shape = t["shape"];
    if (shape.size() > static_cast<size_t>(kMaxDims)) shape.fail(str("has more than ", kMaxDims, " dimensions"));
    int64_t expected = item;
    for (size_t d = 0; d < shape.size(); ++d) {
      r.shape.push_back(shape[d].as_int_in(0, kMaxDim));
      // Stops as soon as the product would pass the file: no overflow, no allocation of a lie.
      int64_t dim = r.shape.back();
      if (expected > 0 && dim > data_bytes / expected)
        shape.fail(str("needs more bytes than the file's ", data_bytes));
      expected *= dim;
    }
    int64_t at = t["offset"].as_int_at_least(0);
    if (at != offset) t["offset"].fail(str("must be ", offset, " (tensors follow each other with no gaps)"));
    int64_t n = t["bytes"].as_int_at_least(0);
    if (n != expected) t["bytes"].fail(str("must be ", expected, " for dtype ", r.dtype, " and its shape"));
    if (n > data_bytes - offset)
      t["bytes"].fail(str("runs past the end of the file (", data_bytes - offset, " bytes left)"));
    if (with_data) r.data = bytes.substr(static_cast<size_t>(data_start + offset), static_cast<size_t>(n));
    offset += n;
    out.push_back(std::move(r));
  }
  if (offset != data_bytes)
    throw FormatError(str(source, ": ", data_bytes - offset, " bytes after the last tensor (the header lists ",
                          offset, " of ", data_bytes, ")"));
  return out;
}

}  // namespace

std::vector<TensorRecord> parse_tensor_file(const std::string& bytes, const std::string& source) {
  return parse_records(bytes, bytes.size(), source, true);
}

namespace {

// The records of the tensor file at `path` (no data) and where its data region starts.
std::vector<TensorRecord> read_header(const std::string& path, int64_t* data_start) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw FormatError(str(path, ": cannot open file"));
  auto file_bytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::string head(static_cast<size_t>(std::min<uint64_t>(file_bytes, kPrefixBytes)), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (head.size() == kPrefixBytes && std::memcmp(head.data(), kMagic, kMagicBytes) == 0) {
    // The header, up to its cap; parse_records names a length past the file or the cap.
    uint64_t header_bytes = std::min<uint64_t>(read_u64_le(head.data() + kMagicBytes),
                                               std::min<uint64_t>(kMaxTensorHeaderBytes, file_bytes - kPrefixBytes));
    head.resize(kPrefixBytes + header_bytes);
    in.read(head.data() + kPrefixBytes, static_cast<std::streamsize>(header_bytes));
  }
  std::vector<TensorRecord> records = parse_records(head, file_bytes, path, false);
  *data_start = static_cast<int64_t>(head.size());
  return records;
}

}  // namespace

std::vector<TensorRecord> read_tensor_file_header(const std::string& path) {
  int64_t data_start = 0;
  return read_header(path, &data_start);
}

TensorFileReader::TensorFileReader(const std::string& path) : path_(path) {
  int64_t at = 0;
  records_ = read_header(path, &at);
  for (const auto& r : records_) {
    offsets_.push_back(at);
    at += bytes_of(r);
  }
}

void TensorFileReader::read(const std::string& name, void* into) const {
  size_t k = 0;
  while (k < records_.size() && records_[k].name != name) ++k;
  PT_CHECK(k < records_.size(), path_, " holds no tensor '", name, "'");
  std::ifstream in(path_, std::ios::binary);
  in.seekg(offsets_[k]);
  in.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes_of(records_[k])));
  if (!in) throw FormatError(str(path_, ": could not read tensor '", name, "' (the file changed while it was read?)"));
}

}  // namespace pt
