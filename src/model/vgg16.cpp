// VGG-16 (Simonyan & Zisserman, 2015): 13 conv layers (each conv+ReLU, with the 2x2 pool that
// follows it folded in) and 3 dense layers = 16 cuttable layers. `width` scales channels and
// the dense size so that it trains on a CPU; width 1 and image 224 is the full network.
//   x [N,3,S,S] -> conv1_1..conv5_3 -> [N,512w,S/32,S/32] -> pool to k x k -> fc6 [N,4096w] -> fc7 -> fc8 [N,classes]
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

std::shared_ptr<LayeredModel> build_vgg16(const ModelOptions& model_options, const LayerSet& held) {
  int64_t size = model_options.image_size > 0 ? model_options.image_size : 224;
  int64_t channels = model_options.channels > 0 ? model_options.channels : 3;
  int64_t classes = model_options.classes > 0 ? model_options.classes : 1000;
  // Else LibTorch's "Output size is too small" and its stack, at the first forward (fashion-mnist's 28).
  if (size < 32)
    throw UsageError(str("vgg16: its five 2x2 max-pools need images of 32 px or more, got ", size, " (--image-size, or "
                         "the data's own: fashion-mnist's are 28; --data synthetic --image-size 32 runs it)"));
  auto scaled = [&](int64_t c) { return std::max<int64_t>(1, std::llround(c * model_options.width)); };
  auto m = std::make_shared<LayeredModel>("vgg16", Task::kClassification,
                                          std::vector<int64_t>{channels, size, size}, false, held, model_options.seed);
  // Channels per conv; 0 marks a 2x2 max-pool after the previous conv.
  const int64_t cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  const int n = sizeof(cfg) / sizeof(cfg[0]);
  int64_t in = channels;
  int block = 1, index = 1;
  for (int i = 0; i < n; ++i) {
    if (cfg[i] == 0) continue;
    int64_t out = scaled(cfg[i]);
    bool pool = i + 1 < n && cfg[i + 1] == 0;
    m->add("conv" + std::to_string(block) + "_" + std::to_string(index), [in, out, pool] {
      nn::Sequential seq(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::ReLU());
      if (pool) seq->push_back(nn::MaxPool2d(2));
      return seq;
    });
    in = out;
    if (pool) ++block, index = 1;
    else ++index;
  }
  // As torchvision's VGG: adaptive pooling to 7x7 at 224 (S/32 in general, at least 1).
  int64_t k = std::max<int64_t>(1, size / 32);
  int64_t hidden = scaled(4096);
  m->add("fc6", [k, in, hidden] {
    return nn::Sequential(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({k, k})), nn::Flatten(),
                          nn::Linear(in * k * k, hidden), nn::ReLU());
  });
  m->add("fc7", [hidden] { return nn::Sequential(nn::Linear(hidden, hidden), nn::ReLU()); });
  m->add("fc8", [hidden, classes] { return nn::Sequential(nn::Linear(hidden, classes)); });
  return m;
}

}  // namespace pt::model
