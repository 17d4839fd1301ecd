// A tokenized corpus as a flat file of ids (--data FILE.bin, token_stream.h): windows of the
// model's length + 1, shifted here; val.bin beside it is the test set; bad files are named
// with the offending id; epochs too large to store an order are shuffled by a bijection.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/error.h"
#include "model/batch_sampler.h"
#include "model/own_data.h"
#include "model/token_stream.h"
#include "model/zoo.h"

namespace pt::model {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("pt_tokens_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

template <class T>
void write_ids(const fs::path& p, const std::vector<T>& ids) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T));
}

std::shared_ptr<LayeredModel> small_gpt() {  // vocab 64, 8 tokens a sample
  ModelOptions o;
  o.vocab = 64;
  o.seq_len = 8;
  o.depth = 1;
  o.width = 0.25;
  return build_gpt(o);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(TokenStream, WindowsAreShiftedHereAndValBinTests) {
  TempDir d;
  std::vector<uint16_t> ids(801);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i % 64);
  write_ids(d.path / "train.bin", ids);
  auto m = small_gpt();
  std::string train = (d.path / "train.bin").string();
  // Where the test set comes from is said, unless --eval-data names another file.
  auto said = [&](const std::function<DataSplit()>& load) {
    ::testing::internal::CaptureStderr();
    load();
    return ::testing::internal::GetCapturedStderr();
  };
  DataSplit held = load_own_data(train, *m);
  // 800 / 8 = 100 windows of 9 tokens; without val.bin the last tenth tests.
  EXPECT_NE(said([&] {
              return load_own_data(train, *m);
            }).find("no val.bin beside " + train + ": tests on its last tenth (10 windows), held out of training"),
            std::string::npos);
  // --eval-data naming the training file itself: the same, said.
  EXPECT_NE(said([&] {
              return load_own_data(train, *m, "uint16", train);
            }).find("--eval-data " + train + " is the --data file: tests on its last tenth (10 windows)"),
            std::string::npos);
  EXPECT_EQ(load_own_data(train, *m, "uint16", train).train.size(), 90);
  EXPECT_EQ(held.train.size(), 90);
  EXPECT_EQ(held.test.size(), 10);
  EXPECT_EQ(held.vocab, 64);
  auto x = held.train.gather_inputs({0, 3}), y = held.train.gather_targets({0, 3});
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(x[1][0].item<int64_t>(), 24);  // window 3 starts at token 24
  EXPECT_TRUE(torch::equal(y.narrow(1, 0, 7), x.narrow(1, 1, 7)));
  EXPECT_EQ(y[1][7].item<int64_t>(), 32);  // the next token
  EXPECT_EQ(held.test.inputs[0][0].item<int64_t>(), (90 * 8) % 64);
  EXPECT_EQ(held.train.on_disk->crcs().size(), 1u);
  write_ids(d.path / "val.bin", std::vector<uint16_t>(81, 5));
  DataSplit split = load_own_data((d.path / "train.bin").string(), *m);
  EXPECT_EQ(split.train.size(), 100);
  EXPECT_EQ(split.test.size(), 10);
  EXPECT_EQ(split.test.inputs.max().item<int64_t>(), 5);
  EXPECT_NE(said([&] {
              return load_own_data(train, *m);
            }).find("tests on " + (d.path / "val.bin").string() + ", beside --data"),
            std::string::npos);
  // --eval-data names the test set's file, over val.bin.
  write_ids(d.path / "other.bin", std::vector<uint16_t>(41, 9));
  DataSplit named = load_own_data((d.path / "train.bin").string(), *m, "uint16", (d.path / "other.bin").string());
  EXPECT_EQ(said([&] { return load_own_data(train, *m, "uint16", (d.path / "other.bin").string()); }).find("tests on"),
            std::string::npos);
  EXPECT_EQ(named.test.size(), 5);
  EXPECT_EQ(named.test.inputs.min().item<int64_t>(), 9);
  // uint32 ids read as such.
  write_ids(d.path / "wide.bin", std::vector<uint32_t>(801, 7));
  fs::remove(d.path / "val.bin");
  DataSplit wide = load_own_data((d.path / "wide.bin").string(), *m, "uint32");
  EXPECT_EQ(wide.train.gather_targets({5})[0][3].item<int64_t>(), 7);
}

// A file written to while training was trained on unsaid, exit 0, the checkpoints vouching for
// the CRC it had at the start (a shard folder's files are refused so).
TEST(TokenStream, AFileChangedWhileTrainingIsRefused) {
  TempDir d;
  fs::path path = d.path / "train.bin";
  write_ids(path, std::vector<uint16_t>(801, 1));
  TokenStream stream(scan_token_file(path.string(), "uint16"), 8, 0, 100);
  EXPECT_EQ(stream.gather({0, 5}, false).sum().item<int64_t>(), 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a modification time of its own
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);  // in place, the same size
    f.write(std::string(16, '\0').data(), 16);
  }
  std::string changed = error_of([&] { stream.gather({0}, false); });
  EXPECT_NE(changed.find("train.bin: changed since it was checked when training began (written to since; its CRC-32 "
                         "was "),
            std::string::npos)
      << changed;
  write_ids(path, std::vector<uint16_t>(900, 1));  // longer
  changed = error_of([&] { stream.gather({0}, false); });
  EXPECT_NE(changed.find("(1800 bytes, was 1602;"), std::string::npos) << changed;
}

TEST(TokenStream, BadFilesAreNamedWithTheOffendingId) {
  TempDir d;
  auto m = small_gpt();
  std::ofstream(d.path / "odd.bin", std::ios::binary) << std::string(1001, '\0');
  std::string odd = error_of([&] { load_own_data((d.path / "odd.bin").string(), *m); });
  EXPECT_NE(odd.find("odd.bin: 1001 bytes is not a whole number of uint16 token ids (2 bytes each)"), std::string::npos)
      << odd;
  std::vector<uint16_t> ids(801, 1);
  ids[333] = 64;  // one past the vocabulary
  write_ids(d.path / "past.bin", ids);
  std::string past = error_of([&] { load_own_data((d.path / "past.bin").string(), *m); });
  // uint16 data: no hint of uint32, which read as uint16 never passes 65535 (it was always given).
  EXPECT_NE(past.find("past.bin: token 333 is id 64, past the model's vocabulary of 64 (ids 0..63; tokenized for another "
                      "vocabulary?)"),
            std::string::npos)
      << past;
  // uint32 ids past 65535 read as uint16 (their high halves not all 0, so not caught as such): the
  // hint names --token-dtype too, where the ids pair up (an even count).
  std::vector<uint16_t> wide(802, 0);
  for (size_t i = 0; i < wide.size(); i += 2) wide[i] = 4464, wide[i + 1] = 1;  // 70000 each
  write_ids(d.path / "wide.bin", wide);
  std::string wide_said = error_of([&] { load_own_data((d.path / "wide.bin").string(), *m); });
  EXPECT_NE(wide_said.find("wide.bin: token 0 is id 4464, past the model's vocabulary of 64 (ids 0..63; tokenized for "
                           "another vocabulary, or uint32 ids: --token-dtype uint32?)"),
            std::string::npos)
      << wide_said;
  // Read as uint32, uint16 ids pair up past 65535: that hint is given.
  write_ids(d.path / "paired.bin", std::vector<uint16_t>(802, 1));  // as uint32: 401 ids of 65537
  std::string paired = error_of([&] { load_own_data((d.path / "paired.bin").string(), *m, "uint32"); });
  EXPECT_NE(paired.find("; is it uint16 data, --token-dtype?)"), std::string::npos) << paired;
  // uint32 ids read as uint16: every other id 0 (the high halves), said; uint16 ids are not.
  std::vector<uint16_t> halves(1602, 0);
  for (size_t i = 0; i < halves.size(); i += 2) halves[i] = static_cast<uint16_t>(1 + i % 50);
  write_ids(d.path / "u32.bin", halves);
  testing::internal::CaptureStderr();
  load_own_data((d.path / "u32.bin").string(), *m);
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("u32.bin: every other id is 0, as uint32 ids read as uint16 are"), std::string::npos) << said;
  // --token-dtype not given (""): refused, not noted (read so, they trained on every other token as id 0).
  std::string refused = error_of([&] { load_own_data((d.path / "u32.bin").string(), *m, ""); });
  EXPECT_NE(refused.find("u32.bin: every other id is 0, as uint32 ids read as uint16 are (their high halves): give "
                         "--token-dtype uint32, or --token-dtype uint16 if they are uint16 ids"),
            std::string::npos)
      << refused;
  // Ids of a vocabulary past 65,536 (cl100k's 100,277): their high halves are 0 or 1, and read so
  // they trained on garbage, exit 0.
  std::vector<uint16_t> large(1602, 0);
  for (size_t i = 0; i < large.size(); i += 2) {
    uint32_t id = 30000 + 50 * static_cast<uint32_t>(i);  // up to 110,000
    large[i] = static_cast<uint16_t>(id & 0xffff);
    large[i + 1] = static_cast<uint16_t>(id >> 16);
  }
  write_ids(d.path / "u32-large.bin", large);
  refused = error_of([&] { load_own_data((d.path / "u32-large.bin").string(), *m, ""); });
  EXPECT_NE(refused.find("u32-large.bin: every other id is at most 1, as uint32 ids read as uint16 are (their high "
                         "halves): give --token-dtype uint32"),
            std::string::npos)
      << refused;
  testing::internal::CaptureStderr();
  load_own_data((d.path / "u32.bin").string(), *m, "uint32");
  write_ids(d.path / "plain.bin", std::vector<uint16_t>(802, 1));
  load_own_data((d.path / "plain.bin").string(), *m);
  said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(said.find("every other id"), std::string::npos) << said;
  // An embedding of fewer rows than the vocabulary the head scores: an id past it among the windows
  // tested on alone (the held-out tenth, val.bin) passed, and failed the evaluation after training.
  auto narrow = std::make_shared<LayeredModel>("narrow-lm", Task::kLanguageModel, std::vector<int64_t>{8}, true,
                                               LayerSet{}, 1);
  narrow->add("embed", [] { return torch::nn::Sequential(torch::nn::Embedding(32, 16)); });
  narrow->add("head", [] { return torch::nn::Sequential(torch::nn::Linear(16, 64)); });
  std::vector<uint16_t> held_out(801, 1);
  held_out[790] = 40;  // in the last tenth
  write_ids(d.path / "held-out.bin", held_out);
  std::string tested = error_of([&] { load_own_data((d.path / "held-out.bin").string(), *narrow); });
  EXPECT_NE(tested.find("held-out.bin: 'test windows' holds token id 40 (sample 8), which the model refuses"),
            std::string::npos)
      << tested;
  write_ids(d.path / "short.bin", std::vector<uint16_t>(12, 1));
  std::string shrt = error_of([&] { load_own_data((d.path / "short.bin").string(), *m); });
  EXPECT_NE(shrt.find("12 tokens make too few windows of 9"), std::string::npos) << shrt;
  ModelOptions cnn;
  auto classifier = build_mnist_cnn(cnn);
  write_ids(d.path / "ok.bin", std::vector<uint16_t>(801, 1));
  std::string wrong = error_of([&] { load_own_data((d.path / "ok.bin").string(), *classifier); });
  EXPECT_NE(wrong.find("a file of token ids trains a language model"), std::string::npos) << wrong;
  // A test set that cannot be read is named by where it came from (both said --data).
  fs::create_directories(d.path / "dir.bin");
  std::string given =
      error_of([&] { load_own_data((d.path / "ok.bin").string(), *m, "uint16", (d.path / "dir.bin").string()); });
  EXPECT_NE(given.find("--eval-data: " + (d.path / "dir.bin").string() + " is not a regular file"), std::string::npos)
      << given;
  fs::create_directories(d.path / "val.bin");
  std::string beside = error_of([&] { load_own_data((d.path / "ok.bin").string(), *m); });
  EXPECT_NE(beside.find("val.bin beside --data: " + (d.path / "val.bin").string() + " is not a regular file"),
            std::string::npos)
      << beside;
}

// Past kStoredOrderMost samples an epoch's order is worked out per sample: still each sample
// once an epoch, the same for the same seed, another for another epoch.
TEST(BatchSampler, AnOrderTooLargeToStoreIsStillAPermutation) {
  int64_t n = BatchSampler::kStoredOrderMost + 12345, batch = 4096;
  BatchSampler a(n, batch, 3), b(n, batch, 3);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  int64_t count = 0;
  for (int64_t s = 0; s < a.batches_per_epoch(); ++s)
    for (int64_t i : a.batch(s)) {
      ASSERT_TRUE(i >= 0 && i < n);
      ASSERT_FALSE(seen[static_cast<size_t>(i)]) << "sample " << i << " twice";
      seen[static_cast<size_t>(i)] = true;
      ++count;
    }
  EXPECT_EQ(count, a.batches_per_epoch() * batch);
  EXPECT_EQ(a.batch(7), b.batch(7));
  EXPECT_NE(a.batch(a.batches_per_epoch()), a.batch(0));
}

}  // namespace
}  // namespace pt::model
