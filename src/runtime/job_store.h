#pragma once
// The rendezvous store of a gloo job: c10d's Store interface (what ProcessGroupGloo and the
// workers' agreement check use) over pipetrain's own small TCP key-value server, in place of
// LibTorch 1.13's TCPStore, which listens on every interface, admits anyone, and aborts the
// process from its own thread when a peer misbehaves during teardown.
//
// Worker 0 serves it on the job's address only (MASTER_ADDR:MASTER_PORT, resolved; loopback
// when the job is local). Every connection proves the job's secret both ways before a key
// moves: the server sends a nonce, the client answers with its own nonce and
// HMAC-SHA256(secret, "client" | server nonce | client nonce), the server with
// HMAC-SHA256(secret, "server" | client nonce | server nonce); a wrong proof closes the
// connection. Messages and the store's contents are bounded. A peer that does not answer
// within the timeout, or goes away, is a TransportError naming the address: never a hang or an
// abort. The secret itself never crosses the wire. What stays open: gloo's own data
// connections are not authenticated (docs/runtime.md).
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace pt::runtime {

class JobStore : public c10d::Store {
 public:
  // `serve`: this process runs the server (worker 0) as well as being a client of it.
  // Connecting waits up to `timeout` for the server to come up.
  JobStore(const std::string& host, int port, bool serve, const std::string& secret,
           std::chrono::milliseconds timeout);
  ~JobStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  // Waits (up to the timeout) until the key exists, as c10d's stores do.
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  class Server;

 private:
  std::string request(const std::string& body);
  std::string where_;                // "host:port", for messages
  std::unique_ptr<Server> server_;   // worker 0 only
  int fd_ = -1;
  std::mutex mu_;                    // one request at a time on the connection
};

}  // namespace pt::runtime
