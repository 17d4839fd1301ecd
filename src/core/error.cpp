#include "core/error.h"

namespace pt::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  throw InternalError(str("internal check failed at ", file, ":", line, ": ", expr,
                          msg.empty() ? "" : " (", msg, msg.empty() ? "" : ")"));
}

}  // namespace pt::detail
