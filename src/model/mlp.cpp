// mlp: a stack of dense layers, the plainest model whose size a flag sets: `depth` layers of
// hidden x hidden + ReLU (hidden = 1024 x width), then a head to the classes. Its state grows as
// depth x hidden^2, which makes it the zoo's model for memory: --width 4 --depth 8 holds 134M
// parameters (1.6 GB of weights, gradients and momentum), more than a small device holds.
//   x [N,H] -fc1-> [N,H] ... -fcD-> [N,H] -head-> [N,classes]
#include <algorithm>
#include <cmath>

#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

std::shared_ptr<LayeredModel> build_mlp(const ModelOptions& model_options, const LayerSet& held) {
  int64_t hidden = std::max<int64_t>(1, std::llround(1024 * model_options.width));
  int64_t depth = model_options.depth > 0 ? model_options.depth : 4;
  int64_t classes = model_options.classes > 0 ? model_options.classes : 10;
  auto m = std::make_shared<LayeredModel>("mlp", Task::kClassification, std::vector<int64_t>{hidden}, false, held,
                                          model_options.seed);
  for (int64_t i = 0; i < depth; ++i)
    m->add("fc" + std::to_string(i + 1), [hidden] { return nn::Sequential(nn::Linear(hidden, hidden), nn::ReLU()); });
  m->add("head", [hidden, classes] { return nn::Sequential(nn::Linear(hidden, classes)); });
  return m;
}

}  // namespace pt::model
