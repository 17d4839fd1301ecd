// lstm-lm: a stacked-LSTM language model after AWD-LM (Merity et al., 2018): embedding 400,
// three LSTM layers of 1150 hidden units (the last one back to 400, tied size), a decoder.
// Each LSTM layer is one cuttable layer. `width` scales the sizes. Each sequence starts from a
// zero state (no state carried across minibatches), so minibatches are independent, as a
// pipeline needs.
//   tokens [N,T] -embed-> [N,T,E] -lstm1-> [N,T,H] -lstm2-> [N,T,H] -lstm3-> [N,T,E] -decoder-> [N,T,V]
#include <algorithm>
#include <cmath>

#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

namespace {

// nn::LSTM returns (output, (h, c)); a pipeline layer passes on the output only.
struct LstmLayerImpl : nn::Module {
  LstmLayerImpl(int64_t in, int64_t hidden)
      : lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(in, hidden).batch_first(true)))) {}
  torch::Tensor forward(torch::Tensor x) { return std::get<0>(lstm->forward(x)); }
  nn::LSTM lstm;
};
TORCH_MODULE(LstmLayer);

}  // namespace

std::shared_ptr<LayeredModel> build_lstm_lm(const ModelOptions& model_options, const LayerSet& held) {
  int64_t vocab = model_options.vocab > 0 ? model_options.vocab : 10000;
  int64_t seq = model_options.seq_len > 0 ? model_options.seq_len : 70;
  int64_t layers = model_options.depth > 0 ? model_options.depth : 3;
  auto scaled = [&](int64_t c) { return std::max<int64_t>(1, std::llround(c * model_options.width)); };
  int64_t emb = scaled(400), hidden = scaled(1150);
  auto m = std::make_shared<LayeredModel>("lstm-lm", Task::kLanguageModel, std::vector<int64_t>{seq}, true, held, model_options.seed);
  m->add("embed", [vocab, emb] { return nn::Sequential(nn::Embedding(vocab, emb)); });
  for (int64_t i = 0; i < layers; ++i) {
    int64_t in = i == 0 ? emb : hidden;
    int64_t out = i + 1 == layers ? emb : hidden;
    m->add("lstm" + std::to_string(i + 1), [in, out] { return nn::Sequential(LstmLayer(in, out)); });
  }
  m->add("decoder", [emb, vocab] { return nn::Sequential(nn::Linear(emb, vocab)); });
  return m;
}

}  // namespace pt::model
