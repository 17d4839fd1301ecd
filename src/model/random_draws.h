#pragma once
// Which layers draw random numbers in training (dropout): each such layer draws from a stream of
// its own (LayeredModel::set_random_stream), never from the process's one generator.
#include <torch/torch.h>

namespace torch::jit {
struct Module;
}

namespace pt::model {

// A layer module that knows whether its forward draws random numbers (an imported layer reads
// its graph); LibTorch's own dropout modules are recognised by type.
class RandomDrawing {
 public:
  virtual ~RandomDrawing() = default;
  virtual bool draws_random() const = 0;
};

// Whether `module` or a module inside it draws random numbers in training: a RandomDrawing that
// says so, or LibTorch's Dropout, Dropout2d/3d, AlphaDropout, FeatureAlphaDropout or RReLU.
bool draws_random(const torch::nn::Module& module);

// Whether a TorchScript module's forward, or a function or method it calls, calls an operator
// that draws random numbers: dropout's, bernoulli, rand*, normal, multinomial, the in-place
// samplers, rrelu. (The callees are followed here: torch::jit::Inline left F.dropout's call in
// place once LibTorch's graph optimisation was off, and the layer's dropout went unseen.)
bool script_draws_random(const torch::jit::Module& module);

}  // namespace pt::model
