// A process's peak resident set as the OS counts it is its own: a child forked and exec'd (a gloo
// worker its launcher started so) does not start at its parent's. getrusage's ru_maxrss survives
// execve: each such worker read the launcher's resident set at the fork as its own floor.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/memory_meter.h"

namespace pt::model {
namespace {

constexpr const char* kChildVar = "PT_PEAK_RSS_CHILD";

// The child's part (this binary exec'd again by the test below): it prints its own peak.
TEST(PeakRss, ChildSaysItsPeak) {
  if (!std::getenv(kChildVar)) GTEST_SKIP() << "the child of PeakRss.AnExecdChildsPeakIsItsOwn";
  std::printf("peak %lld\n", static_cast<long long>(process_peak_rss_bytes()));
}

TEST(PeakRss, AnExecdChildsPeakIsItsOwn) {
  const int64_t held = int64_t{512} << 20;
  std::vector<char> big(static_cast<size_t>(held), 1);  // written: resident
  const int64_t parent = process_peak_rss_bytes();
  ASSERT_GT(parent, held);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::setenv(kChildVar, "1", 1);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::execl("/proc/self/exe", "peak_rss_child", "--gtest_filter=PeakRss.ChildSaysItsPeak", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::unsetenv(kChildVar);
  ::close(fds[1]);
  ASSERT_GT(pid, 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  size_t at = out.find("peak ");
  ASSERT_NE(at, std::string::npos) << out;
  const int64_t child = std::stoll(out.substr(at + 5));
  EXPECT_GT(child, 0) << out;
  EXPECT_LT(child, held / 2) << "the child's peak took its parent's " << parent << " bytes as its own";
  EXPECT_EQ(big[static_cast<size_t>(held) - 1], 1);  // held until the child has said its peak
}

}  // namespace
}  // namespace pt::model
