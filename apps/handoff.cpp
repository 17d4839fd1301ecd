// The subcommands that need LibTorch: the front end hands them to pipetrain-torch (main.cpp).
#include "apps/command.h"

namespace pt::app {
namespace {
Register train({"train", kTrainDescription, nullptr});
Register profile({"profile", kProfileDescription, nullptr});
Register calibrate({"calibrate", kCalibrateDescription, nullptr});
}  // namespace
}  // namespace pt::app
