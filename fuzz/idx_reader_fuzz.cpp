// Fuzzes the IDX reader (Fashion-MNIST's files): the bytes as a file through read_idx, which
// takes gzip'd and plain files alike, so both the gzip handling and parse_idx are covered.
// The file is an in-memory memfd, named through /proc/self/fd, so no disk is touched.
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_target.h"
#include "model/idx_reader.h"

namespace pt::fuzz {
namespace {

Outcome idx_input(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("fuzz-idx", 0);
  if (fd < 0) violation("idx_reader", "memfd_create failed");
  size_t off = 0;
  while (off < size) {
    ssize_t n = ::write(fd, data + off, size - off);
    if (n <= 0) violation("idx_reader", "write to memfd failed");
    off += static_cast<size_t>(n);
  }
  model::IdxArray a;
  Outcome o = check_contract("idx_reader", [&] { a = model::read_idx(str("/proc/self/fd/", fd)); });
  ::close(fd);
  if (o == Outcome::kParsed) {
    uint64_t count = 1;
    for (int64_t d : a.dims) count *= static_cast<uint64_t>(d);
    if (a.dims.empty() || a.dims.size() > 4 || count != a.data.size())
      violation("idx_reader", str(a.dims.size(), " dimensions for ", a.data.size(), " bytes"));
  }
  return o;
}

}  // namespace
}  // namespace pt::fuzz

PT_FUZZ_TARGET(idx_reader, pt::fuzz::idx_input)
