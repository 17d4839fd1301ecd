// gpt: a small decoder-only transformer (Radford et al., 2018/2019): token + position
// embedding, `depth` pre-norm blocks (causal self-attention, MLP), final norm + output head.
// Each block is one cuttable layer. Defaults: d_model 128 x width, 4 heads, 4 blocks, 64 tokens.
//   tokens [N,T] -embed-> [N,T,D] -block1..blockL-> [N,T,D] -head-> [N,T,V]
#include <algorithm>
#include <cmath>

#include "model/zoo.h"

namespace pt::model {

namespace nn = torch::nn;

namespace {

struct EmbedImpl : nn::Module {
  EmbedImpl(int64_t vocab, int64_t seq, int64_t d)
      : tokens(register_module("tokens", nn::Embedding(vocab, d))),
        positions(register_module("positions", nn::Embedding(seq, d))) {}
  torch::Tensor forward(torch::Tensor x) {  // x [N,T] -> [N,T,D]
    auto pos = torch::arange(x.size(1), x.options().dtype(torch::kLong));
    return tokens->forward(x) + positions->forward(pos).unsqueeze(0);
  }
  nn::Embedding tokens, positions;
};
TORCH_MODULE(Embed);

struct BlockImpl : nn::Module {
  BlockImpl(int64_t d, int64_t heads)
      : heads_(heads),
        norm1(register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", nn::Linear(d, 3 * d))),
        proj(register_module("proj", nn::Linear(d, d))),
        norm2(register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({d})))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(d, 4 * d), nn::GELU(), nn::Linear(4 * d, d)))) {}
  torch::Tensor forward(torch::Tensor x) {  // x [N,T,D] -> [N,T,D]
    int64_t n = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
    auto parts = qkv->forward(norm1->forward(x)).chunk(3, -1);  // 3 x [N,T,D]
    auto split = [&](const torch::Tensor& a) { return a.view({n, t, heads_, hd}).transpose(1, 2); };
    auto q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);  // [N,H,T,hd]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));  // [N,H,T,T]
    auto mask = torch::ones({t, t}, x.options().dtype(torch::kBool)).triu(1);
    auto att = torch::softmax(scores.masked_fill(mask, -1e9), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).reshape({n, t, d});  // [N,T,D]
    x = x + proj->forward(y);
    return x + mlp->forward(norm2->forward(x));
  }
  int64_t heads_;
  nn::LayerNorm norm1;
  nn::Linear qkv, proj;
  nn::LayerNorm norm2;
  nn::Sequential mlp;
};
TORCH_MODULE(Block);

}  // namespace

std::shared_ptr<LayeredModel> build_gpt(const ModelOptions& model_options, const LayerSet& held) {
  int64_t vocab = model_options.vocab > 0 ? model_options.vocab : 10000;
  int64_t seq = model_options.seq_len > 0 ? model_options.seq_len : 64;
  int64_t depth = model_options.depth > 0 ? model_options.depth : 4;
  int64_t heads = 4;
  // d_model is a multiple of the head count.
  int64_t d = std::max<int64_t>(1, std::llround(32 * model_options.width)) * heads;
  auto m = std::make_shared<LayeredModel>("gpt", Task::kLanguageModel, std::vector<int64_t>{seq}, true, held, model_options.seed);
  m->add("embed", [=] { return nn::Sequential(Embed(vocab, seq, d)); });
  for (int64_t i = 0; i < depth; ++i)
    m->add("block" + std::to_string(i + 1), [=] { return nn::Sequential(Block(d, heads)); });
  m->add("head", [=] { return nn::Sequential(nn::LayerNorm(nn::LayerNormOptions({d})), nn::Linear(d, vocab)); });
  return m;
}

}  // namespace pt::model
