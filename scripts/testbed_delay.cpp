// The testbed's added latency where the kernel's tc has no netem (scripts/testbed.sh --delay):
// every packet that the worker's namespace sends through NFQUEUE queue Q is held D microseconds
// and then let go, in the order it came. On SIGTERM it prints how long it held them.
//   testbed_delay Q D_US
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>

namespace {

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

struct Held {
  uint32_t id;
  int64_t arrived, due;
};
std::deque<Held> held;
int64_t delay_ns = 0;
std::atomic<bool> stop{false};

int hold(nfq_q_handle*, nfgenmsg*, nfq_data* d, void*) {
  nfqnl_msg_packet_hdr* h = nfq_get_msg_packet_hdr(d);
  int64_t t = now_ns();
  held.push_back({h ? ntohl(h->packet_id) : 0, t, t + delay_ns});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: testbed_delay QUEUE DELAY_US\n");
    return 2;
  }
  int queue = std::atoi(argv[1]);
  delay_ns = static_cast<int64_t>(std::atof(argv[2]) * 1000);
  nfq_handle* h = nfq_open();
  nfq_q_handle* q = h ? nfq_create_queue(h, queue, hold, nullptr) : nullptr;
  if (!q || nfq_set_mode(q, NFQNL_COPY_META, 0) < 0) {
    std::perror("testbed_delay: NFQUEUE");
    return 1;
  }
  nfq_set_queue_maxlen(q, 1 << 16);
  std::signal(SIGTERM, [](int) { stop = true; });
  int fd = nfq_fd(h);
  static char buf[1 << 16];
  int64_t packets = 0;
  double held_ns = 0, longest_ns = 0;
  while (!stop) {
    timespec wait{0, 0}, *timeout = nullptr;
    if (!held.empty()) {
      int64_t ns = std::max<int64_t>(0, held.front().due - now_ns());
      wait.tv_sec = ns / 1000000000, wait.tv_nsec = ns % 1000000000;
      timeout = &wait;
    }
    pollfd p{fd, POLLIN, 0};
    if (ppoll(&p, 1, timeout, nullptr) > 0) {
      int n = static_cast<int>(recv(fd, buf, sizeof buf, MSG_DONTWAIT));
      if (n > 0) nfq_handle_packet(h, buf, n);
    }
    for (int64_t t = now_ns(); !held.empty() && held.front().due <= t; held.pop_front()) {
      nfq_set_verdict(q, held.front().id, NF_ACCEPT, 0, nullptr);
      double ns = static_cast<double>(now_ns() - held.front().arrived);
      held_ns += ns, longest_ns = std::max(longest_ns, ns), ++packets;
    }
  }
  for (const Held& x : held) nfq_set_verdict(q, x.id, NF_ACCEPT, 0, nullptr);
  std::fprintf(stderr, "testbed_delay: held %lld packets for %.1f us on average (longest %.1f us; asked %.1f)\n",
               static_cast<long long>(packets), packets ? held_ns / packets / 1e3 : 0.0, longest_ns / 1e3,
               delay_ns / 1e3);
  nfq_destroy_queue(q);
  nfq_close(h);
  return 0;
}
