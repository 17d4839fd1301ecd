#pragma once
// The job store's wire (internal to job_store.cpp, split out to keep it to one concern): frames
// of a 4-byte little-endian length and a body, a body of an op byte and length-prefixed fields,
// the handshake's constants and HMAC proofs, and reads with a deadline.
#include <netdb.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pt::runtime::store_wire {

using Clock = std::chrono::steady_clock;

inline constexpr char kHello[] = "PTSTORE1";
inline constexpr size_t kHelloBytes = 8;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMaxMessageBytes = size_t(1) << 26;
inline constexpr size_t kMaxStoreBytes = size_t(1) << 28;
// A server answers a new connection at once; a peer silent for this long is not one.
inline constexpr std::chrono::seconds kHandshakeTimeout(30);

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kDelete, kNumKeys, kCompareSet };

// HMAC-SHA256(secret, role | a | b), and its comparison in constant time.
std::string mac(const std::string& secret, const char* role, const std::string& a, const std::string& b);
bool same_mac(const std::string& a, const std::string& b);

bool send_all(int fd, const std::string& data);

enum class Io { kOk, kClosed, kTimeout, kStopped };
// Exactly n bytes by `deadline`; `stop`, when given, ends the wait early (server shutdown).
Io recv_exact(int fd, size_t n, std::string& out, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);

std::string u32(uint32_t v);
uint32_t read_u32(const std::string& s, size_t at);
std::string frame(const std::string& body);
// A frame's body; kClosed for a length over kMaxMessageBytes (not a message of this protocol).
Io read_frame(int fd, std::string& body, Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);
// Fields of a message: a length, then the bytes.
std::string field(const std::string& s);

// Reads a message's fields in order; FormatError when one is cut short.
struct Reader {
  const std::string& body;
  size_t at = 1;  // after the op byte
  std::string next();
};

std::string bytes_of(const std::vector<uint8_t>& v);
std::vector<uint8_t> vector_of(const std::string& s);

// TransportError naming `where` when the address does not resolve; the caller frees the list.
addrinfo* resolve(const std::string& host, int port, const std::string& where);

}  // namespace pt::runtime::store_wire
