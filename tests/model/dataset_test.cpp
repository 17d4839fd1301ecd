// Data sets: Fashion-MNIST as Debian ships it, the text corpus, synthetic data, batch order.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "model/batch_sampler.h"
#include "model/dataset.h"
#include "model/zoo.h"

namespace pt::model {
namespace {

TEST(Dataset, FashionMnistFromTheDebianPackage) {
  DataSplit d = load_fashion_mnist(kFashionMnistDir);
  EXPECT_EQ(d.train.inputs.sizes().vec(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(d.test.inputs.sizes().vec(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(d.train.targets.min().item<int64_t>(), 0);
  EXPECT_EQ(d.train.targets.max().item<int64_t>(), 9);
  // Held as the files' bytes; drawn normalised with the training set's own mean and std.
  EXPECT_EQ(d.train.inputs.scalar_type(), torch::kUInt8);
  EXPECT_EQ(d.train.bytes(), 60000 * 784 + 60000 * 8);
  torch::Tensor x = d.train.input_rows(0, d.train.size());
  EXPECT_EQ(x.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 0.01);
}

// Rows scaled as they are drawn hold the floats that scaling the whole set once gave, bit for bit.
TEST(Dataset, PixelsKeptAsBytesAreDrawnAsTheFloatsAWholeCopyHeld) {
  DataSplit d = load_fashion_mnist(kFashionMnistDir);
  torch::Tensor whole = d.test.inputs.to(torch::kFloat32);
  whole.div_(255.0).sub_(0.2860).div_(0.3530);
  EXPECT_TRUE(torch::equal(d.test.input_rows(0, d.test.size()), whole));
  EXPECT_TRUE(torch::equal(d.test.input_rows(77, 5), whole.narrow(0, 77, 5)));
  std::vector<int64_t> rows{9999, 3, 3, 4100};
  EXPECT_TRUE(torch::equal(d.test.gather_inputs(rows), whole.index_select(0, torch::tensor(rows))));
  EXPECT_TRUE(torch::equal(d.test.first_inputs(4), whole.narrow(0, 0, 4)));
}

TEST(Dataset, MissingDirectorySaysWhichPackage) {
  try {
    load_fashion_mnist("/nonexistent/fmnist");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}

TEST(Dataset, ImageLabelCountMismatchNamesBothFiles) {
  std::string dir = ::testing::TempDir() + "mismatch";
  std::system(("mkdir -p " + dir).c_str());
  auto write = [&](const std::string& name, std::vector<uint8_t> header, int64_t n) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), header.size());
    f << std::string(n, '\1');
  };
  for (std::string split : {"train", "t10k"}) {
    write(split + "-images-idx3-ubyte", {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2}, 12);
    write(split + "-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0, 0, 2}, 2);
  }
  try {
    load_fashion_mnist(dir);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/train-images-idx3-ubyte holds 3 images but " + dir +
                                         "/train-labels-idx1-ubyte holds 2 labels");
  }
}

TEST(Dataset, ImagesOfTheWrongSizeOrNoneNameTheFile) {
  struct Case {
    std::vector<uint8_t> header;  // images: count, rows, cols
    int64_t bytes;
    std::string message;
  };
  std::vector<Case> cases = {
      {{0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 32, 0, 0, 0, 32}, 2 * 32 * 32, "images are 32x32, Fashion-MNIST's are 28x28"},
      {{0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28}, 0, "holds no images"},
      // A labels file's header where the images belong: named so (it was "bytes after the 2").
      {{0, 0, 8, 1, 0, 0, 0, 2}, 2 * 28 * 28,
       "expected 3 dimensions (count, rows, cols; magic number 0x00000803), found 1 (magic number 0x00000801)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string dir = ::testing::TempDir() + "badimages" + std::to_string(i);
    std::system(("mkdir -p " + dir).c_str());
    int64_t n = cases[i].header[7];
    for (std::string split : {"train", "t10k"}) {
      std::ofstream f(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
      f.write(reinterpret_cast<const char*>(cases[i].header.data()), cases[i].header.size());
      f << std::string(cases[i].bytes, '\1');
      std::ofstream l(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
      l << std::string("\0\0\x08\x01\0\0\0", 7) << static_cast<char>(n) << std::string(n, '\1');
    }
    try {
      load_fashion_mnist(dir);
      ADD_FAILURE() << cases[i].message;
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()), dir + "/train-images-idx3-ubyte: " + cases[i].message);
    }
  }
}

TEST(Dataset, TextCorpusErrorsNameTheFileOrFlag) {
  auto error_of = [](const std::string& path, int64_t seq) {
    try {
      load_text(path, seq);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string tiny = ::testing::TempDir() + "tiny.txt";
  std::ofstream(tiny) << "short";
  EXPECT_EQ(error_of(tiny, 8), tiny + ": 5 bytes is too short for 8-character samples (need at least 90)");
  EXPECT_EQ(error_of(tiny, 0), "--seq-len: must be in 1..65536, got 0");
  EXPECT_EQ(error_of(tiny, INT64_MAX), "--seq-len: must be in 1..65536, got 9223372036854775807");
  std::string dir = ::testing::TempDir();
  EXPECT_EQ(error_of(dir, 8), dir + ": is a directory, not a file");
}

TEST(Dataset, SyntheticDataOfAbsurdSizeIsRefused) {
  auto m = build_mnist_cnn({});
  try {
    synthetic_data(*m, 1000000000, 8, 10, 1);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--synthetic-samples: 1000000000 training and 8 test samples of mnist-cnn", 0), 0u)
        << e.what();
  }
}

TEST(Dataset, TextIsCharacterLevelAndShifted) {
  std::string path = ::testing::TempDir() + "corpus.txt";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat. ";
  std::ofstream(path) << text;
  DataSplit d = load_text(path, 8);
  EXPECT_EQ(d.vocab, 8);  // " .acehst"
  int64_t windows = static_cast<int64_t>(text.size()) / 9;
  EXPECT_EQ(d.train.size() + d.test.size(), windows);
  EXPECT_EQ(d.train.inputs.sizes().vec(), (std::vector<int64_t>{d.train.size(), 8}));
  // Targets are the inputs shifted by one character.
  EXPECT_TRUE(torch::equal(d.train.inputs[0].narrow(0, 1, 7), d.train.targets[0].narrow(0, 0, 7)));
  EXPECT_THROW(load_text("/nonexistent.txt", 8), Error);
}

TEST(Dataset, DefaultCorpusFromTheFortunesPackage) {
  DataSplit d = load_text(kDefaultTextFile, 64);
  EXPECT_GT(d.train.size(), 3000);
  EXPECT_GT(d.vocab, 60);
}

TEST(Dataset, SyntheticIsSeeded) {
  auto m = build_mnist_cnn({});
  auto a = synthetic_data(*m, 16, 4, 10, 7), b = synthetic_data(*m, 16, 4, 10, 7), c = synthetic_data(*m, 16, 4, 10, 8);
  EXPECT_TRUE(torch::equal(a.train.inputs, b.train.inputs));
  EXPECT_TRUE(torch::equal(a.train.targets, b.train.targets));
  EXPECT_FALSE(torch::equal(a.train.inputs, c.train.inputs));
}

TEST(BatchSampler, SeededShufflePerEpoch) {
  BatchSampler a(100, 10, 3), b(100, 10, 3), c(100, 10, 4);
  EXPECT_EQ(a.batches_per_epoch(), 10);
  std::vector<int64_t> seen;
  for (int s = 0; s < 10; ++s) {
    auto batch = a.batch(s);
    EXPECT_EQ(batch, b.batch(s));
    seen.insert(seen.end(), batch.begin(), batch.end());
  }
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);  // each sample once per epoch
  EXPECT_NE(a.batch(10), a.batch(0));                  // a new order next epoch
  EXPECT_NE(c.batch(0), b.batch(0));
}

// --no-shuffle walks the data's order and stores none: it stored every index (a token file of
// 17 M windows held 122 MiB more); of 2^40 samples it could not have.
TEST(BatchSampler, TheDatasOrderIsNotStored) {
  const int64_t samples = int64_t{1} << 40;
  BatchSampler plain(samples, 4, 3, /*shuffle=*/false);
  EXPECT_EQ(plain.batch(1), (std::vector<int64_t>{4, 5, 6, 7}));
  int64_t per_epoch = plain.batches_per_epoch();
  EXPECT_EQ(plain.batch(per_epoch + 2), (std::vector<int64_t>{8, 9, 10, 11}));  // the next epoch, alike
  EXPECT_EQ(plain.batch(per_epoch - 1).back(), samples - 1);
}

}  // namespace
}  // namespace pt::model
