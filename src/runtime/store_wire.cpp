#include "runtime/store_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "core/error.h"
#include "core/sha256.h"
#include "runtime/transport.h"

namespace pt::runtime::store_wire {

std::string mac(const std::string& secret, const char* role, const std::string& a, const std::string& b) {
  Digest256 d = hmac_sha256(secret, role + a + b);
  return std::string(d.begin(), d.end());
}

bool same_mac(const std::string& a, const std::string& b) {
  if (a.size() != 32 || b.size() != 32) return false;
  Digest256 x, y;
  std::copy(a.begin(), a.end(), x.begin());
  std::copy(b.begin(), b.end(), y.begin());
  return equal_in_constant_time(x, y);
}

bool send_all(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

Io recv_exact(int fd, size_t n, std::string& out, Clock::time_point deadline, const std::atomic<bool>* stop) {
  out.clear();
  char buf[1 << 16];
  while (out.size() < n) {
    if (stop && stop->load()) return Io::kStopped;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Io::kTimeout;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Io::kClosed;
    if (r == 0) continue;
    ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return Io::kClosed;
    out.append(buf, static_cast<size_t>(got));
  }
  return Io::kOk;
}

std::string u32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string frame(const std::string& body) { return u32(static_cast<uint32_t>(body.size())) + body; }

Io read_frame(int fd, std::string& body, Clock::time_point deadline, const std::atomic<bool>* stop) {
  std::string head;
  Io io = recv_exact(fd, 4, head, deadline, stop);
  if (io != Io::kOk) return io;
  uint32_t n = read_u32(head, 0);
  if (n > kMaxMessageBytes) return Io::kClosed;  // not a message of this protocol
  return recv_exact(fd, n, body, deadline, stop);
}

std::string field(const std::string& s) { return u32(static_cast<uint32_t>(s.size())) + s; }

std::string Reader::next() {
  if (body.size() < at + 4) throw FormatError("truncated store message");
  uint32_t n = read_u32(body, at);
  if (body.size() - at - 4 < n) throw FormatError("truncated store message");
  std::string s = body.substr(at + 4, n);
  at += 4 + n;
  return s;
}

std::string bytes_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> vector_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

addrinfo* resolve(const std::string& host, int port, const std::string& where) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res) throw TransportError(str("rendezvous at ", where, ": address does not resolve (", gai_strerror(rc), ")"));
  return res;
}

}  // namespace pt::runtime::store_wire
