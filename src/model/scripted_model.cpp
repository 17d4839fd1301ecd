#include "model/scripted_model.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include "core/error.h"
#include "core/json_doc.h"
#include "core/tensor_file.h"
#include "model/file_range.h"
#include "model/model_digest.h"
#include "model/random_draws.h"
#include "model/scripted_layer.h"

namespace pt::model {

namespace {

// One layer of a file of separate layers: where its archive lies and what it must hold.
struct LayerEntry {
  std::string file;                 // the record's name, under extra/
  uint64_t offset = 0, bytes = 0;   // in the model file
  std::vector<std::string> params;  // names, in named_parameters order
};

torch::nn::Sequential load_layer(const std::string& path, const LayerEntry& e, int index, const std::string& name) {
  torch::jit::Module m;
  try {
    m = torch::jit::load(std::make_shared<FileRange>(path, e.offset, e.bytes));
  } catch (const c10::Error& err) {
    throw FormatError(str(path, ": layer ", index, " ('", name, "', ", e.file, "): not a TorchScript archive LibTorch can "
                          "load: ", err.what_without_backtrace()));
  }
  auto layer = ScriptedLayer(m);
  if (layer->parameter_names() != e.params)
    throw FormatError(str(path, ": layer ", index, " ('", name, "', ", e.file, ") holds ", layer->parameter_names().size(),
                          " parameters, not the ", e.params.size(), " its pipetrain.json lists in that order"));
  torch::nn::Sequential seq;
  seq->push_back(layer);
  return seq;
}

int64_t element_bytes(const JsonField& f) {
  int64_t bytes = dtype_size(f.as_string());
  if (bytes == 0) f.fail(str("'", f.as_string(), "' is not a parameter dtype pipetrain knows"));
  return bytes;
}

torch::Dtype input_dtype(const JsonField& f) {
  std::string d = f.as_string();
  if (d == "float32") return torch::kFloat32;
  if (d == "int64") return torch::kInt64;
  f.fail(str("'", d, "' is not an input dtype pipetrain trains on (float32, int64)"));
}

// The tie groups a file of separate layers records: [[{"layer": i, "parameter": path}, ...], ...].
std::vector<TieGroup> recorded_ties(const JsonField& meta, const std::vector<LayerEntry>& entries,
                                    const JsonField& layer_files) {
  std::vector<TieGroup> out;
  if (!meta.has("ties")) return out;
  JsonField ties = meta["ties"];
  for (size_t g = 0; g < ties.size(); ++g) {
    TieGroup group;
    for (size_t k = 0; k < ties[g].size(); ++k) {
      JsonField member = ties[g][k];
      int layer = static_cast<int>(member["layer"].as_int_in(0, static_cast<int64_t>(entries.size()) - 1));
      std::string name = member["parameter"].as_string();
      const auto& params = entries[layer].params;
      auto it = std::find(params.begin(), params.end(), name);
      if (it == params.end()) member["parameter"].fail(str("layer ", layer, " has no parameter '", name, "'"));
      int index = static_cast<int>(it - params.begin());
      if (!group.members.empty() && group.members.back().layer >= layer)
        member["layer"].fail("a tie group's members must be in layer order, one per layer");
      group.members.push_back({layer, index});
      JsonField p = layer_files[layer]["parameters"][index];
      int64_t numel = 1;
      for (int64_t d : p["shape"].as_int_list()) numel *= d;
      group.bytes = numel * element_bytes(p["dtype"]);
      group.trains = p["requires_grad"].as_bool();
    }
    if (group.members.size() < 2) ties[g].fail("a tie group needs two members or more");
    out.push_back(std::move(group));
  }
  return out;
}

// A tie group's copies held by this model are made one tensor (the first held copy's).
void tie_held_copies(LayeredModel& m, const std::vector<TieGroup>& ties) {
  for (const auto& g : ties) {
    torch::Tensor first;
    for (const auto& member : g.members) {
      if (!m.holds(member.layer)) continue;
      auto* layer = m.layer(member.layer).module->ptr(0)->as<ScriptedLayerImpl>();
      PT_CHECK(layer);
      if (!first.defined()) first = m.layer_parameters(member.layer).at(member.param);
      else layer->share_parameter(static_cast<size_t>(member.param), first);
    }
  }
}

}  // namespace

bool is_model_file(const std::string& model) {
  return (model.size() > 3 && model.compare(model.size() - 3, 3, ".pt") == 0) || model.find('/') != std::string::npos;
}

std::vector<std::string> loss_names() { return {"cross-entropy", "mse", "lm"}; }

std::shared_ptr<LayeredModel> load_scripted_model(const std::string& path, const std::string& loss, const LayerSet& held,
                                                  uint64_t seed) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw UsageError(str("--model: ", path, " is not a file (a model file comes from `pipetrain export`)"));
  // A model file is code (docs/runtime.md, "What pipetrain trusts"): its digest is printed and
  // kept in checkpoints, and checked against the one `pipetrain export` wrote beside it.
  std::string digest = verified_digest(path, st);
  // Only pipetrain.json is read here: a file of separate layers (pipetrain.model/2) is then read
  // a layer at a time, and only the layers this model holds.
  std::string meta_text;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  bool scripted = false;  // TorchScript's archive holds constants.pkl; torch.save's holds data.pkl alone
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    scripted = reader->hasRecord("constants.pkl");
    if (reader->hasRecord("extra/pipetrain.json")) {
      auto [data, size] = reader->getRecord("extra/pipetrain.json");
      meta_text.assign(static_cast<const char*>(data.get()), size);
    }
  } catch (const c10::Error& e) {
    throw FormatError(str(path, ": not a TorchScript file LibTorch can load: ", e.what_without_backtrace()));
  }
  if (meta_text.empty() && !scripted)
    throw FormatError(str(path, ": a file torch.save wrote (a pickle), not TorchScript: export the nn.Module with "
                              "`pipetrain export --model MODULE:CALLABLE --input-shape ...` (docs/import.md)"));
  if (meta_text.empty())
    throw FormatError(str(path, ": a TorchScript file without pipetrain.json: write it with `pipetrain export "
                              "--model ", path, " --input-shape ...`, which checks it is a chain of layers"));
  interpret_plainly();  // for the loss method, run on the thread that loads the file too
  std::string source = path + ": pipetrain.json";
  json doc = parse_json(meta_text, source);
  JsonField meta(doc, source, "");
  std::string format = meta["format"].as_string();
  bool per_layer = format == "pipetrain.model/2";
  if (!per_layer && format != "pipetrain.model/1")
    meta["format"].fail(str("unknown format '", format, "' (this pipetrain reads pipetrain.model/1 and /2)"));
  JsonField input = meta["input"];
  std::vector<int64_t> shape = input["shape"].as_int_list();
  for (int64_t d : shape)
    if (d < 1) input["shape"].fail(str("sizes must be positive, found ", d));
  bool integer_input = input_dtype(input["dtype"]) == torch::kInt64;

  Task task = Task::kClassification;
  if (loss == "mse") task = Task::kRegression;
  else if (loss == "lm") task = Task::kLanguageModel;
  else if (!loss.empty() && loss != "cross-entropy")
    throw UsageError(str("--loss: unknown loss '", loss, "' (cross-entropy, mse, lm)"));
  if (task == Task::kLanguageModel && !integer_input)
    throw UsageError(str("--loss lm: ", path, " takes float32 inputs; a language model takes int64 token ids"));
  JsonField layers = meta["layers"], children = meta["children"];
  if (layers.size() == 0) layers.fail("a model needs at least one layer");
  if (children.size() != layers.size())
    children.fail(str("names ", children.size(), " children for ", layers.size(), " layers"));
  // Named by the file's name, so a plan or checkpoint made with it follows the file around.
  auto model = std::make_shared<LayeredModel>(path.substr(path.rfind('/') + 1), task, shape, integer_input, held, seed);
  model->set_file_sha256(digest);
  if (integer_input && input.has("high")) model->set_input_high(input["high"].as_int_at_least(1));

  // The top-level module: every layer in a pipetrain.model/1 file, the loss alone in a /2 file.
  torch::jit::Module top;
  bool has_loss = meta.has("loss") && meta["loss"].as_bool();
  if (!per_layer || has_loss) {
    try {
      top = torch::jit::load(path);
    } catch (const c10::Error& e) {
      throw FormatError(str(path, ": not a TorchScript file LibTorch can load: ", e.what_without_backtrace()));
    }
  }
  if (per_layer) {
    JsonField files = meta["layer_files"];
    if (files.size() != layers.size()) files.fail(str("lists ", files.size(), " layer files for ", layers.size(), " layers"));
    std::vector<LayerEntry> entries(files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      LayerEntry& e = entries[i];
      e.file = files[i]["file"].as_string();
      std::string record = "extra/" + e.file;
      if (!reader->hasRecord(record)) files[i]["file"].fail(str("the file holds no record '", record, "'"));
      e.offset = reader->getRecordOffset(record);
      e.bytes = static_cast<uint64_t>(files[i]["bytes"].as_int_at_least(1));
      if (e.offset + e.bytes > static_cast<uint64_t>(st.st_size))
        files[i]["bytes"].fail(str(e.bytes, " bytes from offset ", e.offset, " run past the file's end (", st.st_size, ")"));
      JsonField params = files[i]["parameters"];
      for (size_t k = 0; k < params.size(); ++k) e.params.push_back(params[k]["name"].as_string());
    }
    reader.reset();
    for (size_t i = 0; i < entries.size(); ++i) {
      std::string name = layers[i].as_string();
      model->add(name, [path, e = entries[i], i, name] { return load_layer(path, e, static_cast<int>(i), name); });
    }
    auto ties = recorded_ties(meta, entries, files);
    tie_held_copies(*model, ties);
    model->set_tie_groups(std::move(ties));
  } else {
    reader.reset();
    static std::once_flag noted;  // once a process, not once a worker
    if (!held.all())
      std::call_once(noted, [&] {
        std::cerr << "note: " << path << " is a pipetrain.model/1 file, read whole by every worker; export it again: "
                  << "`pipetrain export` now writes each layer apart (pipetrain.model/2), so that a worker reads "
                  << "only its stage's layers\n";
      });
    std::vector<torch::nn::Sequential> built;
    for (size_t i = 0; i < layers.size(); ++i) {
      std::string child = children[i].as_string();
      c10::optional<torch::jit::Module> found;
      for (const auto& c : top.named_children())
        if (c.name == child) found = c.value;
      if (!found) children[i].fail(str("the file has no child module '", child, "'"));
      torch::nn::Sequential seq;
      seq->push_back(ScriptedLayer(*found));
      built.push_back(seq);
    }
    // Ties by identity while every layer is here; then the layers this model does not hold go.
    LayeredModel whole(model->name(), task, shape, integer_input);
    for (size_t i = 0; i < built.size(); ++i) whole.add(layers[i].as_string(), built[i]);
    auto ties = whole.tie_groups();
    for (size_t i = 0; i < built.size(); ++i) {
      std::string child = children[i].as_string();
      // A layer built afresh is read from the file again: keeping this one for it would keep
      // the whole model alive in a process that holds a stage.
      model->add(layers[i].as_string(), [path, child] {
        torch::jit::Module again = torch::jit::load(path);
        torch::nn::Sequential seq;
        seq->push_back(ScriptedLayer(again.attr(child).toModule()));
        return seq;
      }, held.contains(static_cast<int>(i)) ? built[i] : torch::nn::Sequential(nullptr));
    }
    model->set_tie_groups(std::move(ties));
  }
  // Outputs that pack an integer tensor into a float one cross stages exact (wire_precision), as
  // export records them; a file from before the record packs several tensors where it may.
  std::vector<bool> exact(layers.size(), false);
  const char* record = meta.has("exact_boundaries") ? "exact_boundaries" : "boundary_tensors";
  if (meta.has(record)) {
    JsonField boundaries = meta[record];
    if (boundaries.size() + 1 != layers.size())
      boundaries.fail(str("lists ", boundaries.size(), " boundaries but the model has ", layers.size(), " layers"));
    for (size_t j = 0; j < boundaries.size(); ++j)
      exact[j] = meta.has("exact_boundaries") ? boundaries[j].as_bool() : boundaries[j].as_int_at_least(1) > 1;
  }
  model->set_exact_outputs(std::move(exact));
  bool own_loss = (!per_layer || has_loss) && top.find_method("loss").has_value();
  if (per_layer && has_loss && !own_loss) meta["loss"].fail("is true but the file's module has no loss method");
  if (own_loss && !loss.empty()) {  // the user's own, dropped without a word; said once a process
    static std::mutex mutex;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mutex);
    if (said.insert(path).second)
      std::cerr << "note: --loss " << loss << " replaces " << path << "'s own loss (export --loss; leave --loss out to "
                << "train with it)\n";
  }
  if (own_loss && loss.empty()) {
    // A pipetrain.model/1 file's top module holds every layer: the loss keeps a copy of it alone.
    torch::jit::Module holder = top;
    model->set_loss([holder](const torch::Tensor& out, const torch::Tensor& target) mutable {
      interpret_plainly();
      return holder.run_method("loss", out, target).toTensor();
    });
  }
  return model;
}

}  // namespace pt::model
