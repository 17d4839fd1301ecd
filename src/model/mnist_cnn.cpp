// mnist-cnn, the network of seed 001 (docs/design.md's seeds):
//   x [N,1,28,28] -conv1-> [N,16,14,14] -conv2-> [N,32,7,7] -fc1-> [N,200] -fc2-> [N,200] -fc3-> [N,10]
#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

std::shared_ptr<LayeredModel> build_mnist_cnn(const ModelOptions& model_options, const LayerSet& held) {
  auto m = std::make_shared<LayeredModel>("mnist-cnn", Task::kClassification,
                                          std::vector<int64_t>{1, 28, 28}, false, held, model_options.seed);
  int64_t classes = model_options.classes > 0 ? model_options.classes : 10;
  // conv 5x5 1->16 pad 2 + ReLU + 2x2 max-pool: [N,1,28,28] -> [N,16,14,14]
  m->add("conv1", [] { return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2)); });
  // conv 5x5 16->32 pad 2 + ReLU + pool: -> [N,32,7,7]
  m->add("conv2", [] { return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2)); });
  // flatten + dense 1568->200 + ReLU: -> [N,200]
  m->add("fc1", [] { return nn::Sequential(nn::Flatten(), nn::Linear(32 * 7 * 7, 200), nn::ReLU()); });
  m->add("fc2", [] { return nn::Sequential(nn::Linear(200, 200), nn::ReLU()); });  // -> [N,200]
  m->add("fc3", [classes] { return nn::Sequential(nn::Linear(200, classes)); });  // -> [N,10]
  return m;
}

}  // namespace pt::model
