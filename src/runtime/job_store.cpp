#include "runtime/job_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/sha256.h"
#include "runtime/job_secret.h"
#include "runtime/launcher.h"
#include "runtime/store_wire.h"
#include "runtime/transport.h"

namespace pt::runtime {

using namespace store_wire;  // NOLINT: this file speaks the wire

class JobStore::Server {
 public:
  Server(const std::string& host, int port, const std::string& secret, const std::string& where)
      : secret_(secret) {
    fd_ = take_reserved_rendezvous_socket(port);  // bound by the launcher that started this worker
    bool ok = fd_ >= 0 && ::listen(fd_, 128) == 0;
    if (fd_ < 0) {
      addrinfo* res = resolve(host, port, where);
      fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ok = fd_ >= 0 && ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
           ::bind(fd_, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd_, 128) == 0;
      ::freeaddrinfo(res);
    }
    int err = errno;
    if (!ok) {
      if (fd_ >= 0) ::close(fd_);
      // Worker 0 hosts the rendezvous where MASTER_ADDR points: an address not of this machine is
      // a worker 0 started on the wrong host, or a second RANK=0 (said as the errno alone).
      throw TransportError(str("rendezvous: cannot listen on ", where, " (", std::strerror(err), ")",
                               err == EADDRNOTAVAIL ? ": worker 0 (RANK=0) hosts the rendezvous at MASTER_ADDR, which is "
                                                      "not an address of this machine (worker 0 started on another host, "
                                                      "or RANK=0 given twice?)"
                                                    : err == EADDRINUSE ? ": another process listens there (another job, "
                                                                          "or RANK=0 given twice on this host?)"
                                                                        : ""));
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~Server() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(fd_);
    std::vector<std::thread> clients;
    {
      std::lock_guard<std::mutex> lock(clients_mu_);
      for (int c : client_fds_) ::shutdown(c, SHUT_RDWR);
      clients.swap(clients_);
    }
    for (auto& t : clients) t.join();
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> lock(clients_mu_);
      client_fds_.push_back(c);
      clients_.emplace_back([this, c] { serve(c); });
    }
  }

  // One client: the handshake, then requests until it goes away. Nothing escapes the thread.
  void serve(int fd) {
    try {
      std::string nonce_s = random_bytes(kNonceBytes), answer;
      if (send_all(fd, std::string(kHello, kHelloBytes) + nonce_s) &&
          recv_exact(fd, kNonceBytes + 32, answer, Clock::now() + kHandshakeTimeout, &stop_) == Io::kOk) {
        std::string nonce_c = answer.substr(0, kNonceBytes);
        if (same_mac(answer.substr(kNonceBytes), mac(secret_, "client", nonce_s, nonce_c)) &&
            send_all(fd, mac(secret_, "server", nonce_c, nonce_s))) {
          std::string body;
          while (read_frame(fd, body, Clock::time_point::max(), &stop_) == Io::kOk)
            if (body.empty() || !send_all(fd, frame(handle(body)))) break;
        }
      }
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(clients_mu_);
    client_fds_.erase(std::remove(client_fds_.begin(), client_fds_.end(), fd), client_fds_.end());
    ::close(fd);
  }

  std::string handle(const std::string& body) {
    Reader in{body};
    std::lock_guard<std::mutex> lock(data_mu_);
    switch (static_cast<Op>(body[0])) {
      case kSet: {
        std::string key = in.next(), value = in.next();
        put(key, value);
        return "";
      }
      case kGet: {
        auto it = data_.find(in.next());
        return it == data_.end() ? std::string("\0", 1) : "\1" + it->second;
      }
      case kAdd: {
        std::string key = in.next();
        int64_t delta = std::strtoll(in.next().c_str(), nullptr, 10);
        auto it = data_.find(key);
        int64_t v = (it == data_.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10)) + delta;
        put(key, std::to_string(v));
        return std::to_string(v);
      }
      case kCheck: {
        int n = std::atoi(in.next().c_str());
        bool all = true;
        for (int i = 0; i < n; ++i) all = data_.count(in.next()) > 0 && all;
        return all ? "1" : "0";
      }
      case kDelete:
        return data_.erase(in.next()) ? "1" : "0";
      case kNumKeys:
        return std::to_string(data_.size());
      case kCompareSet: {
        std::string key = in.next(), expected = in.next(), desired = in.next();
        auto it = data_.find(key);
        if (it == data_.end() ? expected.empty() : it->second == expected) {
          put(key, desired);
          return desired;
        }
        return it == data_.end() ? expected : it->second;
      }
    }
    throw FormatError("unknown store operation");
  }

  void put(const std::string& key, const std::string& value) {
    auto it = data_.find(key);
    size_t before = it == data_.end() ? 0 : key.size() + it->second.size();
    if (bytes_ - before + key.size() + value.size() > kMaxStoreBytes) throw FormatError("store full");
    bytes_ = bytes_ - before + key.size() + value.size();
    data_[key] = value;
  }

  std::string secret_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex clients_mu_;
  std::vector<std::thread> clients_;
  std::vector<int> client_fds_;
  std::mutex data_mu_;
  std::map<std::string, std::string> data_;
  size_t bytes_ = 0;
};

JobStore::JobStore(const std::string& host, int port, bool serve, const std::string& secret,
                   std::chrono::milliseconds timeout)
    : c10d::Store(timeout), where_(str(host, ":", port)) {
  if (serve) server_ = std::make_unique<Server>(host, port, secret, where_);
  auto deadline = Clock::now() + timeout;
  // Connect, retrying while worker 0 starts; a non-blocking connect so an unreachable host
  // cannot hold us past the deadline.
  std::string last = "no attempt";
  // Worker 0 serves the rendezvous: a worker whose worker 0 never started said nothing for the
  // whole timeout (300 s by default), then named no worker.
  const auto start = Clock::now();
  auto next_note = start + std::chrono::seconds(10);
  const double limit_s = static_cast<double>(timeout.count()) / 1000;
  const std::string server = serve ? "" : "; worker 0 serves it: did it start, with the same MASTER_ADDR and MASTER_PORT?";
  while (fd_ < 0) {
    addrinfo* res = resolve(host, port, where_);
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (rc != 0 && fd >= 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      int err = 0;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1000)))) == 1 &&
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
        rc = 0;
      else
        errno = err ? err : ETIMEDOUT;
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      fd_ = fd;
      break;
    }
    last = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    if (Clock::now() >= deadline)
      throw TransportError(str("rendezvous at ", where_, ": cannot connect within ", limit_s, " s (", last, ")", server));
    if (!serve && Clock::now() >= next_note) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
      print_line_to_stderr(str("pipetrain: waiting for worker 0 to serve the rendezvous at ", where_, " (", last, "; ",
                               waited, " s of ", limit_s, ")"));
      next_note += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The handshake: each side proves the secret to the other.
  auto fail = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    throw TransportError(str("rendezvous at ", where_, ": ", why));
  };
  auto hs_deadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
  std::string hello, proof;
  Io io = recv_exact(fd_, kHelloBytes + kNonceBytes, hello, hs_deadline);
  if (io == Io::kTimeout) fail("no answer to the handshake (is that a pipetrain job?)");
  if (io != Io::kOk) fail("the connection closed during the handshake");
  if (hello.compare(0, kHelloBytes, kHello, kHelloBytes) != 0) fail("not a pipetrain rendezvous (bad greeting)");
  std::string nonce_s = hello.substr(kHelloBytes), nonce_c = random_bytes(kNonceBytes);
  if (!send_all(fd_, nonce_c + mac(secret, "client", nonce_s, nonce_c))) fail("the connection closed during the handshake");
  io = recv_exact(fd_, 32, proof, hs_deadline);
  if (io != Io::kOk)
    fail(str("worker 0 refused this worker's proof of the job secret (", kJobSecretVar, " must be the same on every ",
             "worker)"));
  if (!same_mac(proof, mac(secret, "server", nonce_c, nonce_s)))
    fail("the server did not prove the job secret (another job on this port?)");
}

JobStore::~JobStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::string JobStore::request(const std::string& body) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) throw TransportError(str("rendezvous at ", where_, ": not connected"));
  if (!send_all(fd_, frame(body))) throw TransportError(str("rendezvous at ", where_, ": the connection closed"));
  std::string reply;
  Io io = read_frame(fd_, reply, Clock::now() + timeout_);
  if (io == Io::kTimeout)
    throw TransportError(str("rendezvous at ", where_, ": no answer within ",
                             std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), " s"));
  if (io != Io::kOk) throw TransportError(str("rendezvous at ", where_, ": the connection closed (worker 0 gone?)"));
  return reply;
}

void JobStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  request(char(kSet) + field(key) + field(bytes_of(value)));
}

std::vector<uint8_t> JobStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return vector_of(request(char(kCompareSet) + field(key) + field(bytes_of(expected)) + field(bytes_of(desired))));
}

std::vector<uint8_t> JobStore::get(const std::string& key) {
  wait({key});
  std::string reply = request(char(kGet) + field(key));
  if (reply.empty() || reply[0] != '\1') throw TransportError(str("rendezvous at ", where_, ": key '", key, "' vanished"));
  return vector_of(reply.substr(1));
}

int64_t JobStore::add(const std::string& key, int64_t value) {
  return std::strtoll(request(char(kAdd) + field(key) + field(std::to_string(value))).c_str(), nullptr, 10);
}

bool JobStore::deleteKey(const std::string& key) { return request(char(kDelete) + field(key)) == "1"; }

bool JobStore::check(const std::vector<std::string>& keys) {
  std::string body = char(kCheck) + field(std::to_string(keys.size()));
  for (const auto& k : keys) body += field(k);
  return request(body) == "1";
}

int64_t JobStore::getNumKeys() { return std::strtoll(request(std::string(1, char(kNumKeys))).c_str(), nullptr, 10); }

void JobStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void JobStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  auto deadline = Clock::now() + timeout;
  for (auto pause = std::chrono::milliseconds(1); !check(keys); pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (Clock::now() >= deadline) {
      std::string names;
      for (const auto& k : keys) names += (names.empty() ? "" : ", ") + k;
      throw TransportError(str("rendezvous at ", where_, ": waited ", static_cast<double>(timeout.count()) / 1000,
                               " s for ", names,
                               " (a worker did not start?)"));
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace pt::runtime
