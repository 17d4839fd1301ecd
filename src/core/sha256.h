#pragma once
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the job secret's proofs at rendezvous
// (runtime/job_store.h). Plain C++, checked against the standards' test vectors.
#include <array>
#include <cstdint>
#include <string>

namespace pt {

using Digest256 = std::array<uint8_t, 32>;

Digest256 sha256(const std::string& data);
Digest256 hmac_sha256(const std::string& key, const std::string& message);

// Lowercase hexadecimal of a digest.
std::string to_hex(const Digest256& d);

// Equality that takes the same time wherever the first difference is.
bool equal_in_constant_time(const Digest256& a, const Digest256& b);

}  // namespace pt
