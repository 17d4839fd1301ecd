// The rendezvous store (issue 17): it serves only the address it is given, admits only
// clients that prove the job's secret (and proves it back), keeps serving after a stranger's
// garbage, and a rendezvous that accepts but never answers, or goes away, is an error, not a
// hang or an abort of the process.
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "runtime/job_store.h"
#include "runtime/launcher.h"
#include "runtime/transport.h"

namespace pt::runtime {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "the-secret-of-this-job";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TransportError& e) {
    return e.what();
  }
  return "(no error)";
}

// A connection to 127.0.0.1:port, or -1.
int connect_to(const std::string& addr, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The launcher holds the rendezvous port with a bound socket that worker 0 inherits: until
// worker 0 listens on it, nobody else can take the port and a worker connecting early is
// refused (and retries); a variable naming another port, or no socket, is not taken.
TEST(JobStore, WorkerZeroServesOnThePortTheLauncherHeld) {
  ReservedPort held = reserve_tcp_port();
  ASSERT_GE(held.fd, 0);
  int other = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(held.port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_NE(::bind(other, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "the held port was taken";
  ::close(other);
  EXPECT_EQ(connect_to("127.0.0.1", held.port), -1) << "a connection before worker 0 listens";

  const std::string var = "PIPETRAIN_RENDEZVOUS_SOCKET";
  ::setenv(var.c_str(), (std::to_string(held.fd) + ":" + std::to_string(held.port + 1)).c_str(), 1);
  EXPECT_EQ(take_reserved_rendezvous_socket(held.port), -1);  // another port's
  EXPECT_EQ(std::getenv(var.c_str()), nullptr);               // taken once, even when refused
  ::setenv(var.c_str(), "99999:1", 1);
  EXPECT_EQ(take_reserved_rendezvous_socket(1), -1);  // no such socket

  ::setenv(var.c_str(), (std::to_string(held.fd) + ":" + std::to_string(held.port)).c_str(), 1);
  JobStore server("127.0.0.1", held.port, true, kSecret, 5s);
  EXPECT_EQ(std::getenv(var.c_str()), nullptr);
  int listening = 0;
  socklen_t len = sizeof listening;
  ASSERT_EQ(::getsockopt(held.fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len), 0);
  EXPECT_EQ(listening, 1) << "worker 0 listens on a socket of its own, not the one held";
  JobStore client("127.0.0.1", held.port, false, kSecret, 5s);
  server.set("a", bytes("one"));
  EXPECT_EQ(client.get("a"), bytes("one"));
}

TEST(JobStore, ServesTheJobsWorkers) {
  int port = free_tcp_port();
  JobStore server("127.0.0.1", port, true, kSecret, 5s);
  JobStore client("127.0.0.1", port, false, kSecret, 5s);
  server.set("a", bytes("one"));
  EXPECT_EQ(client.get("a"), bytes("one"));
  EXPECT_EQ(client.add("n", 3), 3);
  EXPECT_EQ(server.add("n", 4), 7);
  EXPECT_EQ(client.get("n"), bytes("7"));
  EXPECT_TRUE(client.check({"a", "n"}));
  EXPECT_FALSE(client.check({"a", "missing"}));
  EXPECT_EQ(client.getNumKeys(), 2);
  EXPECT_EQ(client.compareSet("c", {}, bytes("x")), bytes("x"));
  EXPECT_EQ(client.compareSet("c", bytes("y"), bytes("z")), bytes("x"));
  EXPECT_TRUE(client.deleteKey("c"));
  EXPECT_FALSE(client.deleteKey("c"));
  // get waits for a key another worker sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    server.set("late", bytes("here"));
  });
  EXPECT_EQ(client.get("late"), bytes("here"));
  later.join();
  EXPECT_NE(error_of([&] { client.wait({"never"}, 200ms); }).find("waited 0.2 s for never"), std::string::npos);
}

TEST(JobStore, RefusesAWrongSecretAndStrangers) {
  int port = free_tcp_port();
  JobStore server("127.0.0.1", port, true, kSecret, 5s);
  EXPECT_NE(error_of([&] { JobStore("127.0.0.1", port, false, "another-secret-entirely", 5s); })
                .find("worker 0 refused this worker's proof of the job secret"),
            std::string::npos);
  // A stranger that sends garbage after the greeting is dropped; nothing of the store leaks.
  int fd = connect_to("127.0.0.1", port);
  ASSERT_GE(fd, 0);
  char greeting[40];
  ASSERT_EQ(::recv(fd, greeting, sizeof greeting, MSG_WAITALL), 40);
  EXPECT_EQ(std::string(greeting, 8), "PTSTORE1");
  std::string junk(64, 'x');
  ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  char reply;
  EXPECT_EQ(::recv(fd, &reply, 1, 0), 0);  // closed without a word
  ::close(fd);
  // ... and the job's own workers are still served.
  JobStore client("127.0.0.1", port, false, kSecret, 5s);
  client.set("k", bytes("v"));
  EXPECT_EQ(server.get("k"), bytes("v"));
}

TEST(JobStore, ListensOnlyOnTheJobsAddress) {
  // Another address of this host, if it has one: the store on 127.0.0.1 must not answer there.
  std::string other;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i && other.empty(); i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
        char buf[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
        if (std::string(buf).rfind("127.", 0) != 0) other = buf;
      }
    ::freeifaddrs(list);
  }
  if (other.empty()) GTEST_SKIP() << "this host has no address besides loopback";
  int port = free_tcp_port();
  JobStore server("127.0.0.1", port, true, kSecret, 5s);
  EXPECT_EQ(connect_to(other, port), -1) << "the store answered on " << other;
  int fd = connect_to("127.0.0.1", port);
  EXPECT_GE(fd, 0);
  ::close(fd);
}

TEST(JobStore, ARendezvousThatNeverAnswersIsAnError) {
  // A listener that accepts, says nothing, and goes away after a while.
  int port = free_tcp_port();
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  std::thread silent([&] {
    int c = ::accept(listener, nullptr, nullptr);
    std::this_thread::sleep_for(300ms);
    ::close(c);
  });
  EXPECT_NE(error_of([&] { JobStore("127.0.0.1", port, false, kSecret, 5s); })
                .find("the connection closed during the handshake"),
            std::string::npos);
  silent.join();
  ::close(listener);
  // Nobody there at all: an error once the timeout has passed, naming worker 0, which serves it
  // (and the timeout as given: 300 ms read "within 0 s").
  EXPECT_NE(error_of([&] { JobStore("127.0.0.1", port, false, kSecret, 300ms); })
                .find("cannot connect within 0.3 s (Connection refused); worker 0 serves it: did it start, with the "
                      "same MASTER_ADDR and MASTER_PORT?"),
            std::string::npos);
}

}  // namespace
}  // namespace pt::runtime
