#pragma once
// Flags shared by the subcommands that build a model and load data (train, profile).
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/json_doc.h"
#include "model/dataset.h"
#include "model/zoo.h"
#include "profile/profile.h"
#include "profile/emulation.h"

namespace pt::app {

struct ModelFlags {
  std::string model = "mnist-cnn";
  bool model_given = false;  // --model on the command line (emulated compute refuses one of another model)
  model::ModelOptions options;
  std::string loss;  // model files only: "" = the file's loss method or cross-entropy
  std::string data;  // "" = the model's default: fashion-mnist, text or synthetic; or FILE.pt, DIR
  std::string data_dir = model::kFashionMnistDir;
  std::string token_dtype;  // --data FILE.bin: "" not given (uint16, and ids that look uint32 refused)
  std::string eval_data;               // --eval-data FILE.bin
  std::string text = model::kDefaultTextFile;
  int64_t synthetic_samples = 2048;
  uint64_t seed = 0;
  std::string precision = "fp32";  // --precision: fp32 or bf16 (model/precision.h)
  double label_smoothing = 0;      // --label-smoothing (LayeredModel::set_label_smoothing)

  // Emulated compute (docs/emulation.md): with compute == "emulated" the model is built from the
  // profile at profile_path (set by the subcommand: train's --profile), not from --model.
  std::string compute = "real";
  std::string profile_path;
  profile::EmulationOptions emulation;

  void add_to(CLI::App& app);
  // --compute, --time-scale, --byte-scale (train only).
  void add_emulation_to(CLI::App& app);
  bool emulated() const { return compute == "emulated"; }
  // The files and folders these flags read, for check_outputs_apart (a model file's .sha256 too).
  std::vector<FlagPath> input_paths() const;
  // Reads profile_path once (emulated compute only); UsageError when it is not set.
  const profile::Profile& emulated_profile();
  std::shared_ptr<const profile::Profile> shared_emulated_profile() { return emulated_profile(), profile_; }
  // Loads the data first (it fixes classes, channels or vocabulary), then describes the model:
  // its layers' names, graph and ties, none of them built (build_model_only builds them).
  std::shared_ptr<model::LayeredModel> build(model::DataSplit* data_out);
  // The model with the layers of `held` built (after build(): the data fixed its options), its
  // initial weights from --seed alone, whichever layers are built (layered_model.h).
  std::shared_ptr<model::LayeredModel> build_model_only(const model::LayerSet& held = {}) const;

 private:
  std::shared_ptr<model::LayeredModel> build_from_file(model::DataSplit* data_out);
  model::ModelOptions resolved_;
  std::shared_ptr<const profile::Profile> profile_;  // emulated compute
};

}  // namespace pt::app
