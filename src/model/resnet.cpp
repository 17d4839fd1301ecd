// ResNet-18 / ResNet-50 (He et al., 2016). Each residual block is one cuttable layer:
//   stem -> block1..blockK -> head
// stem: 7x7/2 conv + BN + ReLU + 3x3/2 max-pool at images >= 64 px; a 3x3/1 conv + BN + ReLU
// (the CIFAR stem) below that, so small inputs keep their resolution. `width` scales channels.
#include <algorithm>
#include <cmath>

#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

namespace {

// Appends conv + batch norm (+ ReLU) to s; a flat Sequential (LibTorch cannot nest them).
nn::Sequential conv_bn(int64_t in, int64_t out, int64_t k, int64_t stride, bool relu,
                       nn::Sequential s = nn::Sequential()) {
  s->push_back(nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false)));
  s->push_back(nn::BatchNorm2d(out));
  if (relu) s->push_back(nn::ReLU());
  return s;
}

// out = relu(body(x) + shortcut(x)); body is two 3x3 convs (basic) or 1x1-3x3-1x1 (bottleneck).
struct ResidualBlockImpl : nn::Module {
  ResidualBlockImpl(int64_t in, int64_t mid, int64_t out, int64_t stride, bool bottleneck) {
    if (bottleneck) {
      body = conv_bn(mid, out, 1, 1, false, conv_bn(mid, mid, 3, stride, true, conv_bn(in, mid, 1, 1, true)));
    } else {
      body = conv_bn(out, out, 3, 1, false, conv_bn(in, out, 3, stride, true));
    }
    register_module("body", body);
    if (stride != 1 || in != out) {
      shortcut = conv_bn(in, out, 1, stride, false);
      register_module("shortcut", shortcut);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor skip = shortcut.is_empty() ? x : shortcut->forward(x);
    return torch::relu(body->forward(x) + skip);
  }
  nn::Sequential body{nullptr};
  nn::Sequential shortcut{nullptr};
};
TORCH_MODULE(ResidualBlock);

}  // namespace

std::shared_ptr<LayeredModel> build_resnet(int depth, const ModelOptions& model_options, const LayerSet& held) {
  int64_t size = model_options.image_size > 0 ? model_options.image_size : 224;
  int64_t channels = model_options.channels > 0 ? model_options.channels : 3;
  int64_t classes = model_options.classes > 0 ? model_options.classes : 1000;
  auto scaled = [&](int64_t c) { return std::max<int64_t>(1, std::llround(c * model_options.width)); };
  bool bottleneck = depth == 50;
  const int blocks[] = {bottleneck ? 3 : 2, bottleneck ? 4 : 2, bottleneck ? 6 : 2, bottleneck ? 3 : 2};
  int64_t expansion = bottleneck ? 4 : 1;
  auto m = std::make_shared<LayeredModel>("resnet" + std::to_string(depth), Task::kClassification,
                                          std::vector<int64_t>{channels, size, size}, false, held, model_options.seed);
  int64_t in = scaled(64);
  m->add("stem", [size, channels, in] {
    if (size < 64) return conv_bn(channels, in, 3, 1, true);
    nn::Sequential stem = conv_bn(channels, in, 7, 2, true);
    stem->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    return stem;
  });
  int index = 1;
  for (int g = 0; g < 4; ++g) {
    int64_t mid = scaled(64 << g);
    int64_t out = mid * expansion;
    for (int b = 0; b < blocks[g]; ++b) {
      int64_t stride = (g > 0 && b == 0) ? 2 : 1;
      m->add("block" + std::to_string(index++),
             [=] { return nn::Sequential(ResidualBlock(in, mid, out, stride, bottleneck)); });
      in = out;
    }
  }
  m->add("head", [in, classes] {
    return nn::Sequential(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})), nn::Flatten(),
                          nn::Linear(in, classes));
  });
  return m;
}

}  // namespace pt::model
