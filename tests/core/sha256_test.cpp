// SHA-256 and HMAC-SHA256 against the standards' own test vectors (FIPS 180-2 appendix B,
// RFC 4231 section 4).
#include <gtest/gtest.h>

#include "core/sha256.h"

#include <algorithm>
#include <fstream>

#include "core/error.h"

namespace pt {
namespace {

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Pieces of any size (a file read in chunks) give the digest of the whole.
TEST(Sha256, PiecesAndFilesGiveTheWholesDigest) {
  std::string data(200003, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7919 % 251);
  for (size_t piece : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(4096)}) {
    Sha256 s;
    for (size_t off = 0; off < data.size(); off += piece) s.update(data.data() + off, std::min(piece, data.size() - off));
    EXPECT_EQ(to_hex(s.finish()), to_hex(sha256(data))) << piece;
  }
  std::string path = testing::TempDir() + "/sha256_test.bin";
  std::ofstream(path, std::ios::binary) << data;
  EXPECT_EQ(to_hex(sha256_of_file(path)), to_hex(sha256(data)));
  EXPECT_THROW(sha256_of_file(path + ".missing"), Error);
}

TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, ComparesInConstantTimeAndExactly) {
  Digest256 a = sha256("x"), b = a;
  EXPECT_TRUE(equal_in_constant_time(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(equal_in_constant_time(a, b));
}

}  // namespace
}  // namespace pt
