#pragma once
// The secret that authenticates a job's workers to each other at rendezvous (job_store.h): where
// a worker finds it, and how the launcher makes one.
#include <cstddef>
#include <string>

namespace pt::runtime {

// The job's secret: PIPETRAIN_JOB_SECRET, or the first line of the file PIPETRAIN_JOB_SECRET_FILE
// (at least 16 characters either way). ConfigError naming both variables when neither is set:
// the launcher sets one for its workers; under mpirun or torchrun, give every worker the same.
std::string job_secret_from_env();
// A fresh secret: 32 random bytes in hexadecimal (the launcher's).
std::string new_job_secret();
inline constexpr const char* kJobSecretVar = "PIPETRAIN_JOB_SECRET";
inline constexpr const char* kJobSecretFileVar = "PIPETRAIN_JOB_SECRET_FILE";

// n bytes from the operating system's random source (secrets, the store's nonces).
std::string random_bytes(size_t n);

}  // namespace pt::runtime
