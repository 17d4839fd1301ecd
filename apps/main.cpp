// pipetrain: one binary, one thin subcommand per step of the data flow (DESIGN.md).
#include <algorithm>
#include <iostream>
#include <map>

#include "apps/command.h"
#include "core/error.h"

namespace pt::app {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace pt::app

int main(int argc, char** argv) {
  CLI::App app{"pipetrain: pipeline-parallel DNN training (PipeDream, GPipe, 1F1B, 2BW, ...)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipetrain 0.1");
  auto& commands = pt::app::registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::string name = "pipetrain";
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) {
        name += " " + sub->get_name();
        return run();
      }
    }
  } catch (const pt::UsageError& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
