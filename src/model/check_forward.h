#pragma once
// The forwards the data checks (data_checks.h) run on the model before training: in eval mode,
// without gradients, leaving the model as training will start it. A gloo worker takes the result
// its launcher recorded instead of running them again.
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/layered_model.h"

namespace pt::model {

// "[2, 10]" and "Float", as the checks' errors name a tensor.
std::string shape_of(const torch::Tensor& t);
std::string dtype_of(const torch::Tensor& t);
// The last line of an error (a TorchScript traceback ends with the cause).
std::string last_line(const std::string& s);

// The checks' forwards, in eval mode, leave the model as training will start it: each takes rows
// of its own (a model that modified its input in place, x.mul_(2), changed the data set's first
// rows, which training then drew), and every buffer of the held layers is put back (a module that
// updates an average in any mode trained from the checks' values).
class CheckForward {
 public:
  explicit CheckForward(LayeredModel& model);
  ~CheckForward();
  CheckForward(const CheckForward&) = delete;
  CheckForward& operator=(const CheckForward&) = delete;
  // A layer at a time: one whose forward changes its weights in place (an embedding's max_norm
  // renormalises the rows it looks up) gets them back, since a check trains nothing. A layer's
  // weights are copied while it runs, not the model's.
  torch::Tensor operator()(const torch::Tensor& x);

 private:
  torch::NoGradGuard no_grad_;
  LayeredModel& model_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

// What the model computes on the first two samples of `x`, in eval mode.
torch::Tensor probe_output(LayeredModel& model, const torch::Tensor& x, const std::string& source);
// The sample holding the largest token id run through the model.
void check_token_ids(LayeredModel& model, const torch::Tensor& x, const std::string& xk, const std::string& source);

}  // namespace pt::model
