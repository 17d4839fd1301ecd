#include "apps/command.h"

namespace pt::app {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace pt::app
