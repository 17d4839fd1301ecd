#include "apps/torch/model_flags.h"

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <limits>

#include <torch/torch.h>

#include "apps/command.h"
#include "core/error.h"
#include "model/check_forward.h"
#include "model/own_data.h"
#include "model/scripted_model.h"
#include "profile/pipedream_graph.h"

namespace pt::app {

void ModelFlags::add_to(CLI::App& app) {
  std::string names;
  for (const auto& n : model::model_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--model", model, "Model: " + names + ", or a model file from `pipetrain export` (FILE.pt)")
      ->each([this](const std::string&) { model_given = true; })
      ->capture_default_str();
  app.add_option("--loss", loss,
                 "Model files: cross-entropy, mse or lm (next-token cross-entropy); default the file's own "
                 "loss method, else cross-entropy")
      ->check(CLI::IsMember(model::loss_names()));
  app.add_option("--width", options.width, "Channel/hidden-size multiplier (vgg16, resnet*, lstm-lm, gpt)")
      ->capture_default_str();
  // 0 is the model's own default inside (model::ModelOptions): given, it would pass for it unsaid.
  auto not_zero = CLI::Validator(
      [](std::string& v) {
        return v.find_first_not_of("0") == std::string::npos ? "must be >= 1, got " + v + " (leave the flag out for the "
                                                               "model's default)"
                                                             : std::string();
      },
      "", "not 0");
  app.add_option("--image-size", options.image_size, "Square input size for vgg16/resnet* (default 224, or 28 on fashion-mnist)")
      ->check(not_zero);
  app.add_option("--classes", options.classes, "Output classes (default from the data set)")->check(not_zero);
  app.add_option("--seq-len", options.seq_len, "Tokens per sample for lstm-lm/gpt")->check(not_zero);
  app.add_option("--depth", options.depth, "Transformer blocks (gpt) or LSTM layers (lstm-lm)")->check(not_zero);
  app.add_option("--data", data,
                 "Data: fashion-mnist, text, synthetic (default: the model's natural data), or your own: FILE.pt "
                 "(torch.save of {'x', 'y'[, 'x_test', 'y_test']}), a DIR of such shards, or FILE.bin, a language "
                 "model's token ids (windows of the model's length + 1, shifted here; val.bin beside it tests)")
      ->check([](const std::string& d) {
        if (d == "fashion-mnist" || d == "text" || d == "synthetic" || model::is_own_data(d)) return std::string();
        // A name with an extension is a file the user meant: say it is missing.
        if (d.find('.') != std::string::npos) return "'" + d + "' does not exist";
        return "'" + d + "' is not fashion-mnist, text, synthetic or a data file (FILE.pt, DIR, FILE.bin)";
      });
  app.add_option("--eval-data", eval_data,
                 "--data FILE.bin: the token file to test on (default: val.bin beside it, else its last tenth)");
  app.add_option("--token-dtype", token_dtype,
                 "--data FILE.bin: its ids' type, uint16 (nanoGPT's; the default, but a file whose every other id is 0, "
                 "as uint32 ids read so, is refused unless given) or uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  app.add_option("--data-dir", data_dir, "Directory of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--text", text, "Text file for the language models (character level)")->capture_default_str();
  app.add_option("--synthetic-samples", synthetic_samples, "Training samples of synthetic data")
      ->check(finite_positive())->capture_default_str();
  // CLI11 took -1 for an unsigned seed and wrapped it to 18446744073709551615, and a seed past
  // 2^64 - 1 became that one: two seeds, one run.
  app.add_option("--seed", seed,
                 "Seed for the zoo's initial weights (a model file's are the file's), data order and synthetic data")
      ->check([](const std::string& s) -> std::string {
        errno = 0;
        bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        if (digits) std::strtoull(s.c_str(), nullptr, 10);
        return digits && errno != ERANGE ? ""
                                         : str("must be an integer in 0..", std::numeric_limits<uint64_t>::max(), ", got ", s);
      })
      ->capture_default_str();
  app.add_option("--label-smoothing", label_smoothing,
                 "The built-in cross-entropy's label smoothing in training, as PyTorch's label_smoothing (0.1 in ViT "
                 "and translation recipes); the test loss stays the plain cross-entropy")
      ->capture_default_str();
  app.add_option("--precision", precision,
                 "fp32, or bf16 as torch.autocast(\"cpu\", torch.bfloat16) computes, with fp32 weights and optimizer "
                 "state; activations and their gradients cross stages in bf16 and arrive as fp32 (a pipeline's "
                 "weights differ slightly from one worker's where a cut's next layer does not cast its input to bf16: "
                 "docs/runtime.md)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
}

void ModelFlags::add_emulation_to(CLI::App& app) {
  app.add_option("--compute", compute,
                 "real: LibTorch layers on this CPU; emulated: each layer of --profile waits its profiled time "
                 "and moves its profiled bytes (docs/emulation.md)")
      ->check(CLI::IsMember({"real", "emulated"}))->capture_default_str();
  app.add_option("--time-scale", emulation.time_scale, "Emulated compute: profiled times x this")
      ->check(finite_positive())->capture_default_str();
  app.add_option("--byte-scale", emulation.byte_scale,
                 "Emulated compute: activation and parameter bytes x this (links shaped to bandwidth x B / S)")
      ->check(finite_positive())->capture_default_str();
}

const profile::Profile& ModelFlags::emulated_profile() {
  if (!profile_) {
    if (profile_path.empty()) throw UsageError("--compute emulated: needs --profile P, the profile to emulate");
    profile_ = std::make_shared<const profile::Profile>(profile::read_any_profile(profile_path));
  }
  return *profile_;
}

namespace {
// A data flag the data read does not use is refused: each was dropped without a word (--text
// beside a model file trained it on synthetic tokens, exit 0). `kind` is the data read.
void refuse_data_flags_unused(const ModelFlags& f, const std::string& kind) {
  const ModelFlags defaults;
  bool tokens = kind.size() > 4 && kind.compare(kind.size() - 4, 4, ".bin") == 0;
  auto refuse = [&](const std::string& flag, const std::string& for_what) {
    throw UsageError(str(flag, ": for ", for_what, "; this run reads --data ", kind));
  };
  if (f.text != defaults.text && kind != "text")
    refuse("--text " + f.text, "--data text (the zoo's lstm-lm and gpt, by character; a model file trains on its "
                               "token ids, --data FILE.bin)");
  if (f.token_dtype != defaults.token_dtype && !tokens) refuse("--token-dtype " + f.token_dtype, "--data FILE.bin");
  if (f.data_dir != defaults.data_dir && kind != "fashion-mnist") refuse("--data-dir " + f.data_dir, "--data fashion-mnist");
  if (f.synthetic_samples != defaults.synthetic_samples && kind != "synthetic")
    refuse(str("--synthetic-samples ", f.synthetic_samples), "--data synthetic");
}
}  // namespace

std::shared_ptr<model::LayeredModel> ModelFlags::build(model::DataSplit* data_out) {
  const model::LayerSet none = model::LayerSet::none();
  if (emulated() && precision != "fp32")
    throw UsageError(str("--precision ", precision, ": emulated compute runs in fp32 only; it takes its times "
                         "and bytes from --profile, which stands for the precision it was measured in (`pipetrain "
                         "profile --precision ", precision, "` measures a model's layers in ", precision, ")"));
  const profile::EmulationOptions unscaled;
  if (!emulated() && (emulation.time_scale != unscaled.time_scale || emulation.byte_scale != unscaled.byte_scale))
    throw UsageError(str(emulation.time_scale != unscaled.time_scale ? "--time-scale" : "--byte-scale",
                         ": for --compute emulated, which waits the profiled times; this run computes for real"));
  bool token_file = data.size() > 4 && data.compare(data.size() - 4, 4, ".bin") == 0;
  if (!eval_data.empty() && !token_file)
    throw UsageError(str("--eval-data: for a token file (--data FILE.bin); ",
                         data.empty() ? std::string("the default data") : "'" + data + "'",
                         " has its own test set"));
  if (emulated()) {
    // It runs the profile's layers on synthetic data: a --model or --data beside it was dropped
    // (vgg16 on fashion-mnist printed "training mnist-cnn (5 layers) on synthetic", exit 0).
    const std::string& profiled = emulated_profile().model;
    if (model_given && model != profiled)
      throw UsageError(str("--model ", model, ": emulated compute runs the layers of --profile ", profile_path,
                           ", a profile of '", profiled, "'; give ", model, "'s profile, or --compute real"));
    if (!data.empty() && data != "synthetic")
      throw UsageError(str("--data ", data, ": emulated compute trains on synthetic data shaped as --profile ",
                           profile_path, "'s layers take it; leave --data out, or --compute real"));
    auto m = build_model_only(none);
    *data_out = profile::emulated_data(*m, synthetic_samples, seed + 1);
    return m;
  }
  if (model::is_model_file(model)) return build_from_file(data_out);
  if (!loss.empty()) throw UsageError(str("--loss: for model files; ", model, " has its own loss"));
  bool lm = model::is_language_model(model);
  std::string kind = data;
  if (model::is_own_data(kind))
    throw UsageError(str("--data: ", kind, " is your own data; it trains a model file (--model FILE.pt from "
                         "`pipetrain export`), the zoo's models take fashion-mnist, text or synthetic"));
  if (kind.empty()) kind = lm ? "text" : (model == "mnist-cnn" ? "fashion-mnist" : "synthetic");
  refuse_data_flags_unused(*this, kind);
  if (lm && kind == "fashion-mnist")
    throw UsageError(str("--data: ", model, " is a language model; use --data text or synthetic"));
  if (!lm && kind == "text") throw UsageError(str("--data: ", model, " is an image model; text needs lstm-lm or gpt"));
  if (model == "mlp" && kind == "fashion-mnist")
    throw UsageError("--data fashion-mnist: mlp takes vectors of its hidden size (1024 x --width); use --data synthetic");
  model::check_model_options(options);  // before loading data that a bad value would waste
  model::DataSplit data_split;
  model::ModelOptions model_options = options;
  if (kind == "fashion-mnist") {
    data_split = model::load_fashion_mnist(data_dir);
    if (model != "mnist-cnn") {
      if (model_options.image_size && model_options.image_size != 28)
        throw UsageError(str("--image-size: fashion-mnist images are 28x28, got ", model_options.image_size));
      model_options.image_size = 28;
      model_options.channels = 1;
    }
    if (model_options.classes > 0 && model_options.classes != data_split.classes)
      throw UsageError(str("--classes: fashion-mnist has ", data_split.classes, " classes, got ", model_options.classes));
    model_options.classes = data_split.classes;
  } else if (kind == "text") {
    int64_t seq = model_options.seq_len > 0 ? model_options.seq_len : (model == "gpt" ? 64 : 70);
    data_split = model::load_text(text, seq);
    model_options.seq_len = seq;
    model_options.vocab = data_split.vocab;
  }
  resolved_ = model_options;
  auto m = build_model_only(none);
  if (kind == "synthetic") {
    int64_t n = lm ? (model_options.vocab > 0 ? model_options.vocab : 10000) : (model_options.classes > 0 ? model_options.classes : (model == "mnist-cnn" || model == "mlp" ? 10 : 1000));
    data_split = model::synthetic_data(*m, synthetic_samples, std::max<int64_t>(1, synthetic_samples / 8), n, seed + 1);
  }
  *data_out = std::move(data_split);
  return m;
}

std::shared_ptr<model::LayeredModel> ModelFlags::build_from_file(model::DataSplit* data_out) {
  // The zoo's sizes: a model file's are its own (they were ignored, and the run trained the file's).
  const model::ModelOptions zoo;
  for (const auto& [flag, given] : {std::pair<const char*, bool>{"--width", options.width != zoo.width},
                                    {"--image-size", options.image_size != zoo.image_size},
                                    {"--classes", options.classes != zoo.classes},
                                    {"--seq-len", options.seq_len != zoo.seq_len},
                                    {"--depth", options.depth != zoo.depth}})
    if (given)
      throw UsageError(str(flag, ": sizes the zoo's models; ", model, " has its own (export it again to change it)"));
  auto m = build_model_only(model::LayerSet::none());
  std::cerr << "model file " << model << ": sha256 " << m->file_sha256()
            << " (a model file is code, run as PyTorch runs it: docs/runtime.md, what pipetrain trusts)\n";
  std::string kind = data.empty() ? "synthetic" : data;
  if (kind == "text")
    throw UsageError("--data text: for lstm-lm and gpt; a model file trains on FILE.pt, a DIR of .pt shards, FILE.bin "
                     "(token ids), fashion-mnist or synthetic");
  refuse_data_flags_unused(*this, kind);
  if (model::is_own_data(kind)) {
    *data_out = model::load_own_data(kind, *m, token_dtype, eval_data);
  } else if (kind == "fashion-mnist") {
    if (m->sample_shape() != std::vector<int64_t>{1, 28, 28} || m->integer_input())
      throw UsageError(str("--data fashion-mnist: its images are float32 [N, 1, 28, 28]; ", model, " takes another input"));
    *data_out = model::load_fashion_mnist(data_dir);
    // A model file of fewer classes failed at its first forward, in LibTorch's "Target 6 is out of
    // bounds" and its stack; own data's labels are checked so (check_forward.h).
    // (The zoo's take their classes from the data.)
    if (!m->file_sha256().empty() && m->task() == model::Task::kClassification && !m->has_own_loss()) {
      torch::Tensor out = model::probe_output(*m, data_out->train.gather_inputs({0, 1}), data_dir);
      if (out.dim() == 2 && out.size(1) < data_out->classes)
        throw UsageError(str("--data fashion-mnist: its labels are classes 0..", data_out->classes - 1, ", but ", model,
                             " outputs ", out.size(1), " classes"));
    }
  } else {
    // Synthetic data of the model's input, its targets in the range of what it outputs (a
    // forward that builds one layer at a time: this process holds none), checked as a data
    // file's first samples are (a failing model printed a TorchScript traceback).
    std::vector<int64_t> shape{1};
    for (int64_t d : m->sample_shape()) shape.push_back(d);
    torch::Tensor out = model::probe_output(
        *m, m->integer_input() ? torch::zeros(shape, torch::kInt64) : torch::zeros(shape), "--data synthetic");
    if (m->task() == model::Task::kRegression)
      throw UsageError("--loss mse: synthetic data has class targets; give --data FILE.pt with float32 'y'");
    *data_out = model::synthetic_data(*m, synthetic_samples, std::max<int64_t>(1, synthetic_samples / 8),
                                      out.size(-1), seed + 1);
  }
  return m;
}

std::shared_ptr<model::LayeredModel> ModelFlags::build_model_only(const model::LayerSet& held) const {
  torch::manual_seed(seed);  // what else draws from the global generator follows --seed too (dropout has its own streams)
  std::shared_ptr<model::LayeredModel> m;
  if (profile_) {
    m = profile::build_emulated_model(*profile_, emulation, held);
    m->set_label_smoothing(label_smoothing);
    return m;
  }
  if (model::is_model_file(model)) {
    m = model::load_scripted_model(model, loss, held, seed);
  } else {
    model::ModelOptions model_options = resolved_;
    model_options.seed = seed;
    m = model::build_model(model, model_options, held);
  }
  m->set_precision(model::parse_precision(precision, "--precision"));
  m->set_label_smoothing(label_smoothing);
  return m;
}

std::vector<FlagPath> ModelFlags::input_paths() const {
  return {{"--model", model},         {"--model's checksum", model + ".sha256"}, {"--data", data},
          {"--eval-data", eval_data}, {"--data-dir", data_dir},                  {"--text", text}};
}

}  // namespace pt::app
