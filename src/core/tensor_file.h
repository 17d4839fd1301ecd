#pragma once
// Tensor files (pipetrain.tensors/1): named tensors as raw bytes behind a JSON header, the
// idea of safetensors written here. Data only: reading one never runs code (a TorchScript
// archive or a pickle can), and every size is checked against the file before anything is
// allocated. Plain C++, so planning tools (checkpoint inspect) and fuzzers read it without
// LibTorch; the runtime converts records to and from tensors.
//
// Layout, little-endian:
//   bytes 0..7    magic "PTTENSR1"
//   bytes 8..15   H, the header's length in bytes (uint64)
//   next H bytes  JSON: {"format": "pipetrain.tensors/1",
//                        "tensors": [{"name": "param.0", "dtype": "float32", "shape": [32, 1, 3, 3],
//                                     "offset": 0, "bytes": 1152}, ...]}
//   the rest      the tensors' bytes, row-major, each at its offset from the start of this
//                 region; tensors follow each other in header order with no gaps or overlaps,
//                 and the region ends with the last one.
#include <cstdint>
#include <string>
#include <vector>

namespace pt {

struct TensorRecord {
  std::string name;
  std::string dtype;            // "float32", "float64", "int64", "int32", "uint8", ...
  std::vector<int64_t> shape;
  std::string data;             // numel x dtype_size(dtype) bytes, row-major, little-endian
};

// Bytes per element of a dtype name; 0 when the name is not one this format knows.
int64_t dtype_size(const std::string& dtype);

// How many of a floating-point tensor's elements are NaN or infinite (all exponent bits set);
// 0 for other dtypes.
int64_t count_non_finite(const TensorRecord& t);
// The same for each tensor of the file at `path`, in header order, read a piece at a time
// (a layer of gigabytes is never held whole).
std::vector<int64_t> count_non_finite_in_file(const std::string& path);

// "[32, 1, 3, 3]", for messages.
std::string shape_text(const std::vector<int64_t>& shape);

// The most bytes a tensor file's header may have (bounds the first allocation).
inline constexpr int64_t kMaxTensorHeaderBytes = int64_t(1) << 24;

std::string tensor_file_bytes(const std::vector<TensorRecord>& tensors);
// Writes a tensor file of `tensors` (their names, dtypes and shapes; `data` unused) whose bytes
// lie at `bytes[i]`, as many as tensor i's dtype and shape say, through write_file_atomic: the
// tensors are written from where they lie, never copied.
void write_tensor_file_atomic(const std::string& path, const std::vector<TensorRecord>& tensors,
                              const std::vector<const void*>& bytes);
// Parses and checks a whole file's bytes; FormatError names `source`, the tensor and the field.
std::vector<TensorRecord> parse_tensor_file(const std::string& bytes, const std::string& source);
// The records of a tensor file with their names, dtypes and shapes but no data, checked against
// the file's size: reads the header only (checkpoint inspect of a layer of gigabytes).
std::vector<TensorRecord> read_tensor_file_header(const std::string& path);

// A tensor file read a tensor at a time into memory the caller holds (a resumed worker's layer
// lands in its tensors with no copy of the file in between).
class TensorFileReader {
 public:
  // Reads and checks the header (read_tensor_file_header).
  explicit TensorFileReader(const std::string& path);
  // The file's tensors, without data, in file order.
  const std::vector<TensorRecord>& records() const { return records_; }
  // Copies tensor `name`'s bytes (as many as its dtype and shape say) to `into`.
  void read(const std::string& name, void* into) const;

 private:
  std::string path_;
  std::vector<TensorRecord> records_;
  std::vector<int64_t> offsets_;  // of each record from the start of the file
};

}  // namespace pt
