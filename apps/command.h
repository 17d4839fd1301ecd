#pragma once
// Subcommand registry: each apps/<name>.cpp registers itself with a static Register object,
// so adding a subcommand touches no other file.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pt::app {

struct Command {
  std::string name;
  std::string description;
  // Adds the subcommand's options to `sub` and returns the function that runs it.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& registry();

struct Register {
  explicit Register(Command c) { registry().push_back(std::move(c)); }
};

}  // namespace pt::app
