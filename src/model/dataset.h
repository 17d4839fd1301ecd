#pragma once
// Data sets held in memory as tensors: Fashion-MNIST, seeded synthetic data, a text corpus.
#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "model/layered_model.h"
#include "model/sample_store.h"

namespace pt::model {

// Images kept as the bytes their files hold, a quarter of float32 (Fashion-MNIST's training
// set: 47 MB against 188), and scaled as their rows are drawn: x / 255, less `mean`, over `std`,
// the operations a whole float copy took, so a minibatch holds the same floats.
struct PixelScale {
  double mean = 0, std = 0;
  bool on() const { return std > 0; }
};

struct Dataset {
  torch::Tensor inputs;   // [N, ...] float or uint8 (`pixels`) images, or int64 token ids (undefined with `on_disk`)
  torch::Tensor targets;  // [N] class ids or [N, T] token ids
  // --data DIR or FILE.bin: the samples stay on disk (sample_store.h).
  std::shared_ptr<const SampleStore> on_disk = {};
  PixelScale pixels = {};  // on: `inputs` are uint8 pixels, scaled as they are drawn
  int64_t size() const {
    return on_disk ? on_disk->size() : inputs.defined() ? inputs.size(0) : released_rows >= 0 ? released_rows : 0;
  }
  // Rows of a minibatch, from memory or from disk, as the model takes them.
  torch::Tensor gather_inputs(const std::vector<int64_t>& indices) const;
  torch::Tensor gather_targets(const std::vector<int64_t>& indices) const;
  // Rows first..first+n of samples held in memory (the test set's rounds).
  torch::Tensor input_rows(int64_t first, int64_t n) const;
  torch::Tensor target_rows(int64_t first, int64_t n) const;
  torch::Tensor first_inputs(int64_t n) const;   // the first n samples' inputs (profiling)
  torch::Tensor first_targets(int64_t n) const;  // and their targets
  // Samples per shard ({} in memory): the batch sampler walks shards one at a time.
  std::vector<int64_t> shard_sizes() const { return on_disk ? on_disk->shard_sizes() : std::vector<int64_t>{}; }
  // The bytes it holds in memory (samples on disk: none).
  int64_t bytes() const { return held(inputs) + held(targets); }
  // The bytes loaded into memory, held or released since.
  int64_t input_bytes() const { return held(inputs) + released_input_bytes; }
  int64_t target_bytes() const { return held(targets) + released_target_bytes; }
  // Lets go of the inputs (or the targets), which a gloo worker whose stages never read them
  // need not hold (job::release_unread_data): the sample count and their bytes stay known, and
  // a read of them throws.
  void release(bool targets);
  // What release() let go of (members, not private: the struct is built as {inputs, targets}).
  int64_t released_rows = -1;  // -1: nothing released
  int64_t released_input_bytes = 0, released_target_bytes = 0;

 private:
  static int64_t held(const torch::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }
};

struct DataSplit {
  std::string name;       // "fashion-mnist", "synthetic", "text:<file>"
  Dataset train, test;
  int64_t classes = 0;    // classification
  int64_t vocab = 0;      // language modelling
  // A model file's own loss that is not a mean over samples (a sum, or a mean over the targets
  // an ignore_index keeps): how the first samples showed it ("" where it is one). Split into
  // microbatches, a minibatch would train another model (job::make_job refuses it).
  std::string loss_not_a_mean;
  int64_t bytes() const { return train.bytes() + test.bytes(); }
};

// " (N more are held out for testing)" where the data holds a test set: a batch refused as larger
// than the training samples of a 40-sample file named 36 of them and said no more.
inline std::string held_out_text(const DataSplit& d) {
  const int64_t n = d.test.size();
  return n > 0 ? " (" + std::to_string(n) + (n == 1 ? " more is" : " more are") + " held out for testing)" : "";
}

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Text the Debian package `fortunes` ships: plain English prose and verse (~230 KB).
inline constexpr const char* kDefaultTextFile = "/usr/share/games/fortunes/songs-poems";

// Reads train-images-idx3-ubyte(.gz) etc. from `dir`; images held as bytes, drawn scaled to
// [0,1] and normalised with Fashion-MNIST's mean and std. A missing directory names the Debian package to install.
DataSplit load_fashion_mnist(const std::string& dir);

// Seeded random inputs of the model's sample shape with random labels (or tokens): for
// profiling and throughput, any model.
DataSplit synthetic_data(const LayeredModel& model, int64_t train_samples, int64_t test_samples,
                         int64_t classes_or_vocab, uint64_t seed);

// Character-level corpus: the vocabulary is the set of bytes in the file (sorted); samples are
// consecutive windows of seq_len+1 characters (input = first seq_len, target = shifted by one);
// the last 10% of windows are the test set.
DataSplit load_text(const std::string& path, int64_t seq_len);

}  // namespace pt::model
