#pragma once
// The emulation tests' profile (tests/profile and tests/runtime).
#include <string>
#include <vector>

#include "profile/profile.h"

namespace pt::testing {

// A chain of 4 layers at batch 8: each 8 ms forward, 16 ms backward per minibatch; activations
// of 8 x 1000 floats, parameters of 40 KB.
inline profile::Profile chain_profile() {
  profile::Profile p;
  p.model = "emulated-chain";
  p.batch_size = 8;
  for (int i = 0; i < 4; ++i)
    p.layers.push_back({"layer" + std::to_string(i), 8, 16, 8 * 1000 * 4, 40000 * (i + 1),
                        i == 0 ? std::vector<int>{} : std::vector<int>{i - 1}});
  return p;
}

}  // namespace pt::testing
