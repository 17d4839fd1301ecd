// A language model's tokenized corpus as training data (token_data.h).
#include "model/token_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <iostream>

#include "core/error.h"
#include "model/check_forward.h"
#include "model/data_checks.h"
#include "model/token_stream.h"

namespace pt::model {

namespace {

// The test set of a token stream, held in memory for the evaluations: its first windows.
constexpr int64_t kMostTestWindows = 1024;

}  // namespace

DataSplit load_token_stream(const std::string& path, LayeredModel& model, const std::string& given,
                            const std::string& eval_path) {
  std::vector<int64_t> shape = model.sample_shape();
  // A file's own loss takes the windows' next tokens as its targets, where it accepts them (below).
  bool lm = model.task() == Task::kLanguageModel || model.has_own_loss();
  if (!lm && model.integer_input() && shape.size() == 1)
    throw UsageError(str("--data ", path, ": a file of token ids trains a language model; give --loss lm"));
  if (!lm || !model.integer_input() || shape.size() != 1)
    throw UsageError(str("--data ", path, ": a file of token ids trains a language model that takes [N, T] token ids ",
                         "(a model file exported with --input-dtype int64, trained with --loss lm); ", model.name(),
                         " is not one"));
  int64_t seq = shape[0];
  const std::string dtype = given.empty() ? "uint16" : given;  // "": not given
  TokenFile train = scan_token_file(path, dtype);
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  std::string val = eval_path.empty() ? dir + "/val.bin" : eval_path;
  struct stat a, b;
  if (!eval_path.empty() && ::stat(eval_path.c_str(), &b) != 0)
    throw UsageError(str("--eval-data: ", eval_path, " does not exist"));
  bool separate = ::stat(val.c_str(), &b) == 0 && ::stat(path.c_str(), &a) == 0 && (a.st_ino != b.st_ino || a.st_dev != b.st_dev);
  TokenFile test = separate ? scan_token_file(val, dtype, eval_path.empty() ? "val.bin beside --data" : "--eval-data") : train;
  // Read so, uint32 ids trained on every other token as id 0, exit 0, after a note: refused unless
  // the user says they are uint16.
  for (const TokenFile* f : {&train, &test})
    if (f->like_uint32 && (f == &train || separate)) {
      std::string what = str(f->path, ": every other id is ", f->odd_max == 0 ? "0" : str("at most ", f->odd_max),
                             ", as uint32 ids read as uint16 are (their high halves)");
      if (given.empty())
        throw FormatError(str(what, ": give --token-dtype uint32, or --token-dtype uint16 if they are uint16 ids"));
      std::cerr << "note: " << what << ": if it holds uint32 ids, give --token-dtype uint32\n";
    }
  int64_t n = TokenStream::windows(train.tokens, seq);
  int64_t held = separate ? 0 : n / 10;
  if (n - held < 1 || (separate ? TokenStream::windows(test.tokens, seq) : held) < 1)
    throw FormatError(str(separate && n >= 1 ? val : path, ": ", separate && n >= 1 ? test.tokens : train.tokens,
                          " tokens make too few windows of ", seq + 1, " (the model's ", seq, " tokens and the next) ",
                          separate && n >= 1 ? "to test on (the test set; --eval-data names another)"
                          : separate         ? "to train"
                                             : "to train and hold a tenth out for testing"));
  DataSplit split;
  split.name = "tokens:" + path;
  auto train_stream = std::make_shared<TokenStream>(train, seq, 0, n - held);
  int64_t test_first = separate ? 0 : n - held;
  int64_t test_windows = separate ? TokenStream::windows(test.tokens, seq) : held;
  int64_t test_n = std::min(kMostTestWindows, test_windows);
  // Where the test set comes from, unless --eval-data named another file: a stale val.bin beside
  // the data, or --eval-data naming the training file itself, was taken without a word.
  if (separate && eval_path.empty())
    std::cerr << "note: tests on " << val << ", beside --data (--eval-data names another)\n";
  else if (!separate)
    std::cerr << "note: "
              << (eval_path.empty() ? str("no val.bin beside ", path)
                                    : str("--eval-data ", eval_path, " is the --data file"))
              << ": tests on its last tenth (" << held << (held == 1 ? " window" : " windows") << "), held out of training\n";
  if (test_n < test_windows)
    std::cerr << "note: " << (separate ? val : path) << ": tests on the first " << test_n << " of its " << test_windows
              << (separate ? "" : " held-out") << " windows (the test set is held in memory)\n";
  TokenStream test_stream(test, seq, test_first, test_n);
  std::vector<int64_t> rows(static_cast<size_t>(test_n));
  for (int64_t i = 0; i < test_n; ++i) rows[static_cast<size_t>(i)] = i;
  split.test = {test_stream.gather(rows, false), test_stream.gather(rows, true)};
  // Ids against the vocabulary the model outputs, and its embedding: the window of the largest.
  // The vocabulary is read from a forward of id 0, which every embedding holds: the test's own
  // first windows, holding an id past it, failed the lookup in a TorchScript traceback.
  torch::Tensor first = split.test.inputs.narrow(0, 0, std::min<int64_t>(1, split.test.inputs.size(0)));
  torch::Tensor out = probe_output(model, torch::zeros_like(first), separate ? val : path);
  if (model.task() == Task::kLanguageModel) check_lm_output(out, first.sizes().slice(1), separate ? val : path);
  int64_t vocab = out.size(-1);
  for (const TokenFile* f : {&train, &test})
    if (f->max_id >= vocab)
      // uint16 ids read as uint32 pair up past 65535; uint32 read as uint16 never exceed one.
      throw FormatError(str(f->path, ": token ", f->max_at, " is id ", f->max_id, ", past the model's vocabulary of ",
                            vocab, " (ids 0..", vocab - 1,
                            f->token_bytes == 4 && f->max_id > 65535 ? "; is it uint16 data, --token-dtype?)"
                            // uint32 ids whose high halves are not all 0 pass the check above.
                            : f->token_bytes == 2 && f->tokens % 2 == 0
                                ? "; tokenized for another vocabulary, or uint32 ids: --token-dtype uint32?)"
                                : "; tokenized for another vocabulary?)"));
  split.train.on_disk = train_stream;
  check_token_ids(model, train_stream->gather({std::min(train.max_at / seq, n - held - 1)}, false), "tokens", path);
  // The windows tested on, held in memory: the largest id may lie among them alone (the held-out
  // tenth, val.bin), and an id the embedding lacks failed the evaluation after training.
  check_token_ids(model, split.test.inputs, "test windows", separate ? val : path);
  split.vocab = vocab;
  if (model.has_own_loss()) {
    check_targets(split.test.inputs, split.test.targets, "tokens", "next tokens", model, out, separate ? val : path);
    split.loss_not_a_mean = loss_not_a_mean(model, split.test.inputs, split.test.targets);
    say_if_no_accuracy(split, model, out);
  }
  return split;
}

}  // namespace pt::model
