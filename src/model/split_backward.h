#pragma once
// Zero-bubble's split of a stage's backward (Qi et al., ICLR 2024) on the graph autograd built in
// the forward: B runs the chain of input gradients alone and keeps, for each node of that chain
// which also feeds a weight (a matmul, a convolution, a norm's scale), the gradient that reached
// it, and frees what the chain's other nodes saved; W runs only those nodes' weight sides from the
// kept gradients. Two backward calls (to the input at B, to the weights at W) ran the chain again
// at W, where autograd keeps no intermediate gradient: gpt's second stage, real compute, took B
// 16.9 ms and W 28.7 ms against a whole backward's 24.6.
#include <torch/csrc/autograd/edge.h>
#include <torch/torch.h>

#include <vector>

namespace pt::model {

// What one microbatch's W runs: per node of the input-gradient chain that feeds weights, the
// gradients that reached it at B and the weights' accumulators its weight side ends in.
struct WeightBackward {
  struct Part {
    torch::autograd::edge_list roots;  // the node, one edge per input of it
    std::vector<torch::Tensor> grads;  // [roots] what reached it at B
    torch::autograd::edge_list weights;
  };
  std::vector<Part> parts;
};

// B: the gradient of `input` (a leaf that requires one) from `output`'s gradient, with nothing
// computed for a weight; the graph is kept for W. Returns false, having run nothing, where W
// could not run apart from the chain: a weight side shared by two of its nodes (a weight used
// twice, as a tied one in one stage) or an output that does not depend on the input. The caller
// then runs a backward to the input and one to the weights.
bool input_gradient(const torch::Tensor& output, const torch::Tensor& output_grad, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& weights, torch::Tensor* input_grad, WeightBackward* w);

// B where input_gradient could not split it: a backward to `input` alone, the graph kept for a
// backward to the weights at W, which alone accumulates their gradients.
void backward_to_input(const torch::Tensor& output, const torch::Tensor& output_grad, const torch::Tensor& input,
                       const std::vector<torch::Tensor>& weights);

// W: accumulates the weights' gradients (their accumulators' hooks run, as in a backward).
void weight_gradients(WeightBackward& w);

}  // namespace pt::model
