// A worker's test-set evaluation: forwards of the test set's batches through the stages, no
// graph, the last stage counting what is correct (worker.h).
#include <algorithm>
#include <deque>
#include <map>

#include "core/error.h"
#include "runtime/worker.h"

namespace pt::runtime {

using schedule::Action;
using schedule::ActionKind;

Evaluation Worker::evaluate(const schedule::Schedule& s, const model::Dataset& test, int64_t batch) {
  setup(s);
  torch::NoGradGuard no_grad;
  model_->train(false);
  EvaluationTally tally;
  bool holds_last = false;
  // A negative tag space keeps evaluation apart from training transfers: the activation into
  // stage st of round r, then (after every round's) the credit its receiver returns for it.
  const int64_t rounds = (test.size() + batch - 1) / batch, stages = s.num_stages;
  auto data_tag = [&](int64_t round, int st) { return -(round * stages + st) - 1; };
  auto credit_tag = [&](int64_t round, int st) { return -((rounds + round) * stages + st) - 1; };
  // A stage sends round r only once its next stage has taken round r - kEvaluationAhead: no
  // schedule bounds a chain of forwards, and a send through shared memory or within one process
  // completes without its receiver, so the first stage ran through the test set ahead of the
  // second and its activations piled up at the receiver (mnist-cnn's worker 1 held 14-37 MiB of
  // them, and a stage of a transformer would hold its output for the whole test set).
  std::map<int, std::deque<std::shared_ptr<PendingTransfer>>> credits;  // stage sent to -> credits posted
  // Credits this worker sent, each waited for and dropped once kEvaluationAhead more follow it:
  // its sender's upstream stage posts that receive as soon as the activation it answers has
  // gone. Kept to the end of the test set, a transfer made each round sat among the blocks the
  // rounds free, which malloc could then not reuse whole: the README's llama (2 gloo processes)
  // left its last stage 60-140 MiB more resident in about one evaluation of three.
  std::deque<std::shared_ptr<PendingTransfer>> returned;
  const torch::Tensor token = torch::zeros({1});
  for (int64_t round = 0; round < rounds; ++round) {
    int64_t first = round * batch, n = std::min(batch, test.size() - first);
    torch::Tensor x;
    for (int st = 0; st < s.num_stages; ++st) {
      int w = s.stage_workers[st][0];
      if (w != rank_) continue;
      const auto& layers = s.stage_layers[st];
      if (st == 0) {
        x = test.input_rows(first, n);
      } else {
        int from = s.stage_workers[st - 1][0];
        if (from != rank_) {
          x = transport_.irecv(from, data_tag(round, st))->wait();
          returned.push_back(transport_.isend(token, from, credit_tag(round, st)));
          if (static_cast<int>(returned.size()) > kEvaluationAhead) {
            returned.front()->wait();
            returned.pop_front();
          }
        }
      }
      x = model_->forward(x, layers.front(), layers.back() + 1);
      transport_.progress();  // the workers outside the chain wait in pause_barrier meanwhile
      if (st == s.num_stages - 1) {
        tally.add(*model_, x, test.target_rows(first, n));
        holds_last = true;
      } else {
        int to = s.stage_workers[st + 1][0];
        if (to == rank_) continue;
        auto& posted = credits[st + 1];
        if (static_cast<int>(posted.size()) == kEvaluationAhead) {
          posted.front()->wait();
          posted.pop_front();
        }
        transport_.isend(x, to, data_tag(round, st + 1))->wait();
        posted.push_back(transport_.irecv(to, credit_tag(round, st + 1)));
      }
    }
  }
  for (auto& [st, posted] : credits)
    for (auto& c : posted) c->wait();
  for (auto& r : returned) r->wait();
  model_->train(true);
  return holds_last ? tally.result() : Evaluation();
}


}  // namespace pt::runtime
