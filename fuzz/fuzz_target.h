#pragma once
// What every fuzz target checks (issue 7): any input either parses or is rejected with a
// pt::Error subclass that names the input. Any other exception, a PT_CHECK failure
// (InternalError: input got past validation and broke an invariant), a crash, a hang or a
// sanitizer report is a bug.
//
// A target is one file fuzz/<name>_fuzz.cpp ending in PT_FUZZ_TARGET(name, function). Built
// with -DPT_FUZZ=ON (clang) that is a libFuzzer entry point; in the normal build it registers
// the function with tests/fuzz/corpus_replay_test.cpp, which replays fuzz/corpus/<name>/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace pt::fuzz {

enum class Outcome { kParsed, kRejected };

// Reports a contract violation and aborts, which libFuzzer records as a crash with the input.
[[noreturn]] inline void violation(const char* target, const std::string& what) {
  std::fprintf(stderr, "\n*** %s: contract violated: %s\n", target, what.c_str());
  std::abort();
}

// Runs `parse` under the contract; tells whether the input parsed or was rejected.
template <typename F>
Outcome check_contract(const char* target, F&& parse) {
  try {
    parse();
    return Outcome::kParsed;
  } catch (const InternalError& e) {
    violation(target, std::string("internal check failed (validation let the input through): ") + e.what());
  } catch (const Error& e) {
    if (std::string(e.what()).empty()) violation(target, "pt::Error with an empty message");
    return Outcome::kRejected;
  } catch (const std::exception& e) {
    violation(target, std::string("exception that is not a pt::Error: ") + e.what());
  } catch (...) {
    violation(target, "unknown exception");
  }
}

// Runs `f` on something the parser itself produced (a written-out profile, say): there even a
// pt::Error is a bug.
template <typename F>
void must_succeed(const char* target, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    violation(target, std::string("rejected its own output: ") + e.what());
  }
}

// The fuzz input as text (the JSON and graph.txt parsers take a string).
inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

using TargetFn = Outcome (*)(const uint8_t* data, size_t size);
struct Target {
  std::string name;
  TargetFn run;
};
inline std::vector<Target>& targets() {
  static std::vector<Target> all;
  return all;
}
struct Register {
  Register(const char* name, TargetFn run) { targets().push_back({name, run}); }
};

}  // namespace pt::fuzz

#ifdef PT_LIBFUZZER
#define PT_FUZZ_TARGET(name, fn)                                            \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    fn(data, size);                                                         \
    return 0;                                                               \
  }
#else
#define PT_FUZZ_TARGET(name, fn) static const ::pt::fuzz::Register pt_fuzz_register_##name(#name, fn);
#endif
