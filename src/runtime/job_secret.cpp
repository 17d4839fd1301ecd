#include "runtime/job_secret.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/sha256.h"

namespace pt::runtime {

std::string random_bytes(size_t n) {
  std::random_device rd;
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rd() & 0xff);
  return s;
}

std::string job_secret_from_env() {
  std::string secret;
  const char* value = std::getenv(kJobSecretVar);
  const char* file = std::getenv(kJobSecretFileVar);
  if (value && *value) {
    secret = value;
  } else if (file && *file) {
    try {
      secret = read_regular_file(file, 4096);
    } catch (const Error& e) {
      throw ConfigError(str(kJobSecretFileVar, ": ", e.what()));
    }
    secret = secret.substr(0, secret.find('\n'));
  } else {
    throw ConfigError(str("gloo transport: set ", kJobSecretVar, " (or ", kJobSecretFileVar, ", a file holding it) ",
                          "to the same secret on every worker; it authenticates the workers at rendezvous. The ",
                          "launcher (pipetrain train --transport gloo) makes one itself"));
  }
  if (secret.size() < 16)
    throw ConfigError(str(value && *value ? kJobSecretVar : kJobSecretFileVar, ": the secret must have at least 16 ",
                          "characters, got ", secret.size()));
  return secret;
}

std::string new_job_secret() {
  std::string bytes = random_bytes(32);
  Digest256 d;
  std::copy(bytes.begin(), bytes.end(), d.begin());
  return to_hex(d);
}

}  // namespace pt::runtime
