#include "model/zoo.h"

#include "core/error.h"

namespace pt::model {

std::vector<std::string> model_names() {
  return {"mnist-cnn", "vgg16", "resnet18", "resnet50", "lstm-lm", "gpt", "mlp"};
}

bool is_language_model(const std::string& name) { return name == "lstm-lm" || name == "gpt"; }

void check_model_options(const ModelOptions& model_options) {
  if (!(model_options.width > 0 && model_options.width <= 16)) throw UsageError(str("--width: must be in (0, 16], got ", model_options.width));
  // Upper bounds so that an absurd value is an error naming the flag, not an allocation of
  // terabytes that the kernel ends with SIGKILL. 0 means "the model's default".
  struct Bound {
    const char* flag;
    int64_t value, max;
  };
  for (const Bound& b : {Bound{"--image-size", model_options.image_size, 4096}, Bound{"--classes", model_options.classes, 1000000},
                         Bound{"--seq-len", model_options.seq_len, kMaxSeqLen}, Bound{"--depth", model_options.depth, 1024}})
    // 1..max: the flags refuse 0, the default's mark here (-1 read "must be in 0..", 0 "must be >= 1").
    if (b.value < 0 || b.value > b.max) throw UsageError(str(b.flag, ": must be in 1..", b.max, ", got ", b.value));
}

std::shared_ptr<LayeredModel> build_model(const std::string& name, const ModelOptions& model_options, const LayerSet& held) {
  check_model_options(model_options);
  if (name == "mnist-cnn") return build_mnist_cnn(model_options, held);
  if (name == "vgg16") return build_vgg16(model_options, held);
  if (name == "resnet18") return build_resnet(18, model_options, held);
  if (name == "resnet50") return build_resnet(50, model_options, held);
  if (name == "lstm-lm") return build_lstm_lm(model_options, held);
  if (name == "gpt") return build_gpt(model_options, held);
  if (name == "mlp") return build_mlp(model_options, held);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError(str("--model: unknown model '", name, "' (known: ", known, ")"));
}

}  // namespace pt::model
