#pragma once
// Parsing of human-written sizes and lists on the command line.
#include <cstdint>
#include <string>
#include <vector>

namespace pt {

// "17179869184", "16GB", "16GiB", "512MB", "1.5G": memory sizes are binary (GB = GiB = 2^30),
// the convention of device memory. `what` names the flag for the error message.
int64_t parse_bytes(const std::string& text, const std::string& what);

// "4,4" -> {4, 4}; "80,10" -> {80.0, 10.0}. Errors name `what` and the bad item.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);
std::vector<double> parse_double_list(const std::string& text, const std::string& what);

// Bytes per second in one Gbit/s (the cluster format's bandwidth unit).
constexpr double kBytesPerSecPerGbps = 1.25e8;

std::string human_bytes(double bytes);  // "12.3 MiB"
std::string fixed(double v, int digits);  // fixed(2.5, 3) = "2.500"
// counted(1, "worker") = "1 worker", counted(4, "worker") = "4 workers", counted(2, "batch", "batches"):
// a count in a sentence.
std::string counted(int64_t n, const std::string& one, const std::string& many = "");

}  // namespace pt
