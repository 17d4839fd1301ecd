// The gloo transport's environment: which worker of which job this process is (torchrun's and
// our launcher's RANK/WORLD_SIZE, or mpirun's OMPI_COMM_WORLD_*), where the master is, and this
// host's own address towards it.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "runtime/gloo_transport.h"
#include "runtime/job_secret.h"

namespace pt::runtime {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, const char* value, int min, int max) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < min || v > max)
    throw ConfigError(str("gloo transport: ", name, "='", value, "' is not an integer in ", min, "..", max));
  return static_cast<int>(v);
}

}  // namespace

// This host's address on the route to `master` (what a UDP socket connected there binds to). Gloo
// listens on the address its device is made for, and peers connect to it: with workers on several
// hosts (or network namespaces), that must be this worker's own address, not the master's.
// Falls back to `master` when the route cannot be found (the single-host case: 127.0.0.1).
std::string local_address_towards(const std::string& master, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(master.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return master;
  std::string out = master;
  int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char host[NI_MAXHOST];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0)
      out = host;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

bool gloo_rank_in_env() { return env("RANK") || env("OMPI_COMM_WORLD_RANK"); }

int gloo_world_size_in_env() {
  // RANK/WORLD_SIZE (torchrun), OpenMPI's, or another MPI's (PMI: MPICH, Intel MPI, Slurm's srun),
  // which pipetrain cannot join but must not train beside as if alone.
  const char* size = env("RANK") ? env("WORLD_SIZE") : env("OMPI_COMM_WORLD_SIZE") ? env("OMPI_COMM_WORLD_SIZE")
                                                                                   : env("PMI_SIZE");
  return size ? std::atoi(size) : 0;
}

int gloo_local_world_size_in_env() {
  const char* size = env("RANK") ? env("LOCAL_WORLD_SIZE") : env("OMPI_COMM_WORLD_LOCAL_SIZE");
  return size ? std::atoi(size) : 0;
}

GlooConfig gloo_config_from_env() {
  GlooConfig c;
  // Both torchrun's and mpirun's, disagreeing (a RANK left in the environment under mpirun):
  // RANK was taken, and every process claimed the same rank.
  for (auto [ours, mpis] : {std::pair{"RANK", "OMPI_COMM_WORLD_RANK"}, std::pair{"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}})
    if (env(ours) && env(mpis) && std::string(env(ours)) != env(mpis))
      throw ConfigError(str("gloo transport: ", ours, "=", env(ours), " and ", mpis, "=", env(mpis),
                            " disagree: unset ", ours, " under mpirun, or run without mpirun"));
  const char *rank_var = "RANK", *size_var = "WORLD_SIZE";
  if (!env("RANK") && env("OMPI_COMM_WORLD_RANK")) {
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
  }
  const char* rank = env(rank_var);
  const char* size = env(size_var);
  if (!rank) throw ConfigError("gloo transport: set RANK and WORLD_SIZE (or run under mpirun, which sets OMPI_COMM_WORLD_RANK)");
  if (!size) throw ConfigError(str("gloo transport: ", rank_var, " is set but ", size_var, " is not"));
  c.world_size = env_int(size_var, size, 1, 65536);
  c.rank = env_int(rank_var, rank, 0, 65535);
  if (c.rank >= c.world_size)
    throw ConfigError(str("gloo transport: ", rank_var, "=", c.rank, " must be below ", size_var, "=", c.world_size));
  if (const char* a = env("MASTER_ADDR")) c.master_addr = a;
  if (const char* p = env("MASTER_PORT")) c.master_port = env_int("MASTER_PORT", p, 1, 65535);
  // Resolved once here: an address that does not resolve fails now, not after the rendezvous
  // has retried it for its whole timeout.
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(c.master_addr.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw ConfigError(str("gloo transport: MASTER_ADDR=", c.master_addr, " does not resolve (", gai_strerror(rc), ")"));
  freeaddrinfo(res);
  c.secret = job_secret_from_env();
  if (const char* v = std::getenv("PIPETRAIN_SHARED_MEMORY")) c.shared_memory = std::string(v) != "0";
  return c;
}

}  // namespace pt::runtime
