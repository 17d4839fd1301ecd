#include "profile/profile_fits_model.h"

#include "core/error.h"
#include "core/units.h"

namespace pt::profile {

LayerBytes layer_bytes(const torch::nn::Sequential& module) {
  LayerBytes b;
  for (const auto& p : module->parameters())
    (p.requires_grad() ? b.parameters : b.buffers) += p.numel() * static_cast<int64_t>(p.element_size());
  for (const auto& buffer : module->buffers()) b.buffers += buffer.numel() * static_cast<int64_t>(buffer.element_size());
  return b;
}

void check_profile_fits_model(const Profile& profile, const std::string& source, const model::LayeredModel& model) {
  if (profile.num_layers() != model.num_layers())
    throw ConfigError(str(source, ": has ", profile.num_layers(), " layers but ", model.name(), " has ",
                          model.num_layers()));
  for (int i = 0; i < model.num_layers(); ++i) {
    if (!model.holds(i)) continue;
    LayerBytes built = layer_bytes(model.layer(i).module);
    const Layer& l = profile.layers[i];
    auto differ = [&](const char* field, int64_t recorded, int64_t held) {
      if (recorded == held) return;
      throw ConfigError(str(source, ": layer ", i, " ('", l.name, "') field '", field, "' is ", recorded, " (",
                            human_bytes(static_cast<double>(recorded)), "), but the model built, ", model.name(),
                            ", holds ", held, " (", human_bytes(static_cast<double>(held)), ") there: the profile is "
                            "of another model or size (`pipetrain profile` with this run's model flags measures it)"));
    };
    differ("parameter_bytes", l.parameter_bytes, built.parameters);
    differ("buffer_bytes", l.buffer_bytes, built.buffers);
  }
}

}  // namespace pt::profile
