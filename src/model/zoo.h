#pragma once
// The model zoo: every model as a LayeredModel that later steps can cut between layers.
#include <memory>
#include <string>
#include <vector>

#include "model/layered_model.h"

namespace pt::model {

// Options a user may set; 0 means "the model's default". Data sets fill in what they fix
// (channels, image size and classes for images; vocabulary for text).
struct ModelOptions {
  double width = 1.0;       // channel / hidden-size multiplier (vgg16, resnet*, lstm-lm, gpt)
  int64_t image_size = 0;   // square input side (vgg16 224, resnet 224; mnist-cnn fixed 28)
  int64_t channels = 0;     // input channels (3; mnist-cnn 1)
  int64_t classes = 0;      // output classes (1000; mnist-cnn 10)
  int64_t vocab = 0;        // token vocabulary (lstm-lm, gpt; 10000 synthetic)
  int64_t seq_len = 0;      // tokens per sample (lstm-lm 70, gpt 64)
  int64_t depth = 0;        // transformer blocks (gpt 4), LSTM layers (lstm-lm 3) or hidden layers (mlp 4)
  // Initial weights: layer i draws from a generator seeded by (seed, i) (layered_model.h), so a
  // worker that builds only its layers starts them as one worker would.
  uint64_t seed = 0;
};

// The longest sample a language model takes (--seq-len): bounds the text windows and the
// position embeddings before anything is allocated.
inline constexpr int64_t kMaxSeqLen = 65536;

std::vector<std::string> model_names();
bool is_language_model(const std::string& name);
// Throws UsageError naming the flag when an option is out of its range (0: the model's default).
void check_model_options(const ModelOptions& options);
// Throws UsageError naming --model and the known names for an unknown model.
// `held`: the layers to build (the others are described only: names and graph).
std::shared_ptr<LayeredModel> build_model(const std::string& name, const ModelOptions& options,
                                          const LayerSet& held = {});

// Builders, one file each.
std::shared_ptr<LayeredModel> build_mnist_cnn(const ModelOptions& model_options, const LayerSet& held = {});
std::shared_ptr<LayeredModel> build_vgg16(const ModelOptions& model_options, const LayerSet& held = {});
std::shared_ptr<LayeredModel> build_resnet(int depth, const ModelOptions& model_options, const LayerSet& held = {});
std::shared_ptr<LayeredModel> build_lstm_lm(const ModelOptions& model_options, const LayerSet& held = {});
std::shared_ptr<LayeredModel> build_gpt(const ModelOptions& model_options, const LayerSet& held = {});
std::shared_ptr<LayeredModel> build_mlp(const ModelOptions& model_options, const LayerSet& held = {});

}  // namespace pt::model
