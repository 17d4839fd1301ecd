#include "model/scripted_model.h"

#include <sys/stat.h>

#include <fstream>

#include <torch/script.h>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/sha256.h"

namespace pt::model {

namespace {

// Plain interpretation, op by op as eager PyTorch runs them: the graph executor's autodiff and
// specialisations would train a different computation from the user's eager PyTorch (the
// encoder-decoder on 6 stages ended 8e-8 from it), re-optimise per shape, and cost each process
// 0.3-0.5 s of CPU optimising graphs on their first runs. LibTorch keeps the switch per thread,
// so every thread that runs a layer sets it (setting it where the file was loaded left the
// pipeline's stage threads optimising).
void interpret_plainly() { torch::jit::setGraphExecutorOptimize(false); }

// One layer of the file as a torch::nn::Module: the script module's parameters and buffers are
// registered as this module's (the same tensors), so the optimizer, weight stashing and
// checkpoints, which work on parameters(), update what the script module computes with.
class ScriptedLayerImpl : public torch::nn::Module {
 public:
  explicit ScriptedLayerImpl(torch::jit::Module module) : module_(std::move(module)) {
    for (const auto& p : module_.named_parameters(/*recurse=*/true))
      register_parameter(escaped(p.name), p.value, p.value.requires_grad());
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) register_buffer(escaped(b.name), b.value);
  }

  torch::Tensor forward(torch::Tensor x) {
    interpret_plainly();
    return module_.forward({std::move(x)}).toTensor();
  }

  void train(bool on) override {
    torch::nn::Module::train(on);
    module_.train(on);
  }

  std::shared_ptr<torch::nn::Module> clone(const c10::optional<torch::Device>& device) const override {
    auto copy = std::make_shared<ScriptedLayerImpl>(module_.deepcopy());
    if (device) copy->to(*device);
    return copy;
  }

 private:
  // torch::nn::Module names may not hold dots.
  static std::string escaped(std::string name) {
    for (char& c : name)
      if (c == '.') c = '_';
    return name;
  }
  torch::jit::Module module_;
};

torch::Dtype input_dtype(const JsonField& f) {
  std::string d = f.as_string();
  if (d == "float32") return torch::kFloat32;
  if (d == "int64") return torch::kInt64;
  f.fail(str("'", d, "' is not an input dtype pipetrain trains on (float32, int64)"));
}

}  // namespace

bool is_model_file(const std::string& model) {
  return (model.size() > 3 && model.compare(model.size() - 3, 3, ".pt") == 0) || model.find('/') != std::string::npos;
}

std::vector<std::string> loss_names() { return {"cross-entropy", "mse", "lm"}; }

std::shared_ptr<LayeredModel> load_scripted_model(const std::string& path, const std::string& loss) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw UsageError(str("--model: ", path, " is not a file (a model file comes from `pipetrain export`)"));
  // A model file is code (docs/runtime.md, "What pipetrain trusts"): its digest is printed and
  // kept in checkpoints, and checked against the one `pipetrain export` wrote beside it.
  std::string digest = to_hex(sha256_of_file(path));
  if (std::ifstream recorded{path + ".sha256"}) {
    std::string expected;
    recorded >> expected;
    if (expected != digest)
      throw ConfigError(str(path, ": its SHA-256 is ", digest, " but ", path, ".sha256 (written by pipetrain export) ",
                            "says ", expected.substr(0, 64), ": the file changed since it was exported; export it again, ",
                            "or remove the .sha256 file if the change is yours"));
  }
  torch::jit::ExtraFilesMap extra{{"pipetrain.json", ""}};
  torch::jit::Module top;
  try {
    top = torch::jit::load(path, c10::nullopt, extra);
  } catch (const c10::Error& e) {
    throw FormatError(str(path, ": not a TorchScript file LibTorch can load: ", e.what_without_backtrace()));
  }
  if (extra["pipetrain.json"].empty())
    throw FormatError(str(path, ": a TorchScript file without pipetrain.json: write it with `pipetrain export "
                              "--model ", path, " --input-shape ...`, which checks it is a chain of layers"));
  interpret_plainly();  // for the loss method, run on the thread that loads the file too
  std::string source = path + ": pipetrain.json";
  json doc = parse_json(extra["pipetrain.json"], source);
  JsonField meta(doc, source, "");
  if (meta["format"].as_string() != "pipetrain.model/1")
    meta["format"].fail(str("unknown format '", meta["format"].as_string(), "' (this pipetrain reads pipetrain.model/1)"));
  JsonField input = meta["input"];
  std::vector<int64_t> shape = input["shape"].as_int_list();
  for (int64_t d : shape)
    if (d < 1) input["shape"].fail(str("sizes must be positive, found ", d));
  bool integer_input = input_dtype(input["dtype"]) == torch::kInt64;

  Task task = Task::kClassification;
  bool own_loss = top.find_method("loss").has_value();
  if (loss == "mse") task = Task::kRegression;
  else if (loss == "lm") task = Task::kLanguageModel;
  else if (!loss.empty() && loss != "cross-entropy")
    throw UsageError(str("--loss: unknown loss '", loss, "' (cross-entropy, mse, lm)"));
  if (task == Task::kLanguageModel && !integer_input)
    throw UsageError(str("--loss lm: ", path, " takes float32 inputs; a language model takes int64 token ids"));
  // Named by the file's name, so a plan or checkpoint made with it follows the file around.
  auto model = std::make_shared<LayeredModel>(path.substr(path.rfind('/') + 1), task, shape, integer_input);
  model->set_file_sha256(digest);

  JsonField layers = meta["layers"], children = meta["children"];
  if (layers.size() == 0) layers.fail("a model needs at least one layer");
  if (children.size() != layers.size())
    children.fail(str("names ", children.size(), " children for ", layers.size(), " layers"));
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string child = children[i].as_string();
    c10::optional<torch::jit::Module> found;
    for (const auto& c : top.named_children())
      if (c.name == child) found = c.value;
    if (!found) children[i].fail(str("the file has no child module '", child, "'"));
    torch::nn::Sequential seq;
    seq->push_back(std::make_shared<ScriptedLayerImpl>(*found));
    model->add(layers[i].as_string(), seq);
  }
  if (own_loss && loss.empty())
    model->set_loss([top](const torch::Tensor& out, const torch::Tensor& target) mutable {
      interpret_plainly();
      return top.run_method("loss", out, target).toTensor();
    });
  return model;
}

}  // namespace pt::model
