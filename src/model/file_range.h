#pragma once
// Bytes [offset, offset + size) of a file, as LibTorch's archive reader reads them: one layer's
// TorchScript archive inside a model file, read where it lies (no copy of its bytes in memory).
#include <caffe2/serialize/read_adapter_interface.h>

#include <string>

namespace pt::model {

class FileRange : public caffe2::serialize::ReadAdapterInterface {
 public:
  FileRange(const std::string& path, uint64_t offset, uint64_t size);
  ~FileRange() override;
  FileRange(const FileRange&) = delete;
  FileRange& operator=(const FileRange&) = delete;
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override;

 private:
  int fd_;
  uint64_t offset_, size_;
};

}  // namespace pt::model
