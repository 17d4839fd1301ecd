#include "apps/command.h"

#include "plan/plan.h"

#include <cmath>
#include <exception>

#include "core/error.h"

namespace pt::app {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

namespace {

CLI::Validator finite_at_least(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        bool ok = used == text.size() && std::isfinite(v) && (zero_allowed ? v >= 0 : v > 0);
        return ok ? "" : str("must be a finite number ", zero_allowed ? ">= 0" : "> 0", ", got '", text, "'");
      },
      zero_allowed ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

CLI::Validator finite_positive() { return finite_at_least(false); }
CLI::Validator finite_non_negative() { return finite_at_least(true); }

CLI::Validator bucket_mb_range() {
  return CLI::Validator(
      [](std::string& text) {
        std::string why = finite_non_negative()(text);
        if (!why.empty() || std::stod(text) <= plan::kMaxBucketMb) return why;
        return str("must be at most ", static_cast<int64_t>(plan::kMaxBucketMb), " MiB, got '", text, "'");
      },
      "MiB in 0.." + std::to_string(static_cast<int64_t>(plan::kMaxBucketMb)));
}

}  // namespace pt::app
