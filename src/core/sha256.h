#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the job secret's proofs at rendezvous
// (runtime/job_store.h). Plain C++, checked against the standards' test vectors.
#include <array>
#include <cstdint>
#include <string>

namespace pt {

using Digest256 = std::array<uint8_t, 32>;

Digest256 sha256(const std::string& data);

// SHA-256 over data given in pieces (a file read in chunks): update() as often as needed, then
// finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const char* data, size_t n);
  Digest256 finish();

 private:
  uint32_t h_[8];
  uint8_t block_[64];
  size_t filled_ = 0;  // bytes in block_
  uint64_t total_ = 0;  // bytes given
};

// The SHA-256 of a file's bytes, read in pieces (a model file of gigabytes needs no copy in
// memory); an Error names the file when it cannot be read.
Digest256 sha256_of_file(const std::string& path);
Digest256 hmac_sha256(const std::string& key, const std::string& message);

// Lowercase hexadecimal of a digest.
std::string to_hex(const Digest256& d);

// Equality that takes the same time wherever the first difference is.
bool equal_in_constant_time(const Digest256& a, const Digest256& b);

}  // namespace pt
