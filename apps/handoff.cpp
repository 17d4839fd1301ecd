// The subcommands that need LibTorch: the front end hands them to pipetrain-torch (main.cpp).
#include "apps/command.h"

namespace pt::app {
namespace {
Register train_command({"train", kTrainDescription, nullptr});
Register profile_command({"profile", kProfileDescription, nullptr});
Register calibrate_command({"calibrate", kCalibrateDescription, nullptr});
}  // namespace
}  // namespace pt::app
