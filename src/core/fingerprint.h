#pragma once
// Two 64-bit running hashes of the words fed to it, with different multipliers and seeds: 128
// bits that tell apart what the planner compares by value (a collision is not a concern).
#include <cstdint>
#include <cstring>
#include <utility>

namespace pt {

class Fingerprint {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  template <class T>
  void add(const T& v) {
    uint64_t x = 0;
    static_assert(sizeof(T) <= sizeof x);
    std::memcpy(&x, &v, sizeof v);
    a_ = (a_ ^ x) * 0x9E3779B97F4A7C15ull;
    a_ ^= a_ >> 29;
    b_ = (b_ + x) * 0xC2B2AE3D27D4EB4Full;
    b_ ^= b_ >> 32;
  }
  Key key() const { return {a_, b_}; }

 private:
  uint64_t a_ = 0x243F6A8885A308D3ull, b_ = 0x13198A2E03707344ull;
};

}  // namespace pt
