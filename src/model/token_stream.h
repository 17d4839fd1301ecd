#pragma once
// A tokenized corpus as a flat file of token ids (nanoGPT's train.bin and val.bin): uint16 or
// uint32, little-endian, no header. Sample i is the window of seq_len + 1 tokens from token
// i * seq_len: its input the first seq_len, its target the same shifted by one (the shift done
// here, not by the user). Windows are read with pread as minibatches need them, neither held nor
// mapped, so a file larger than memory trains with the memory of a minibatch (a mapping's
// pages would count in the process's resident set as they are touched).
#include <cstdint>
#include <string>
#include <vector>

#include "model/sample_store.h"

namespace pt::model {

struct TokenFile {
  std::string path;
  int64_t token_bytes = 2;     // 2: uint16, 4: uint32
  int64_t tokens = 0;
  uint32_t crc32 = 0;          // of the whole file
  int64_t max_id = 0;          // the largest id, and the first token holding it
  int64_t max_at = 0;
  // uint16 ids read so look like uint32 ids (TokenFile::kHighHalvesAtMost): their odd ids are
  // the high halves, 0 below 65,536 (trained on every other token as id 0, exit 0), 0 or 1 for a
  // vocabulary of 100,277 (cl100k's: trained on garbage, exit 0). The largest odd id.
  bool like_uint32 = false;
  int64_t odd_max = 0;
  // Odd ids at most this, where the even ones reach kLowHalvesReach: no text's uint16 ids, whose
  // odd and even ones spread alike; uint32 ids of a vocabulary up to 1M (16 x 65,536).
  static constexpr int64_t kHighHalvesAtMost = 15, kLowHalvesReach = 4096;
  // What fstat said when it was read through (FileState): a file rewritten while training was
  // trained on unsaid, the checkpoints vouching for the CRC above (shards were refused).
  struct FileState {
    int64_t device = 0, inode = 0, bytes = 0, modified_ns = 0;
    bool operator==(const FileState& o) const {
      return device == o.device && inode == o.inode && bytes == o.bytes && modified_ns == o.modified_ns;
    }
  } state;
};

// Reads `path` through once (CRC-32, the largest id), in chunks. FormatError naming the file:
// a size that is not a whole number of ids of `dtype` ("uint16" or "uint32"). `flag` names where
// the path came from in a UsageError ("--data", "--eval-data", "val.bin beside --data").
TokenFile scan_token_file(const std::string& path, const std::string& dtype, const std::string& flag = "--data");

class TokenStream : public SampleStore {
 public:
  // Windows [first, first + count) of `file`, seq_len tokens each (and one more for the target).
  TokenStream(TokenFile file, int64_t seq_len, int64_t first, int64_t count);
  ~TokenStream() override;
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;
  int64_t size() const override { return count_; }
  torch::Tensor gather(const std::vector<int64_t>& indices, bool targets) const override;  // int64 [n, seq_len]
  std::vector<int64_t> shard_sizes() const override { return {}; }
  std::vector<uint32_t> crcs() const override { return {file_.crc32}; }
  bool may_pad() const override { return false; }
  // Windows of seq_len + 1 tokens a file of `tokens` holds.
  static int64_t windows(int64_t tokens, int64_t seq_len) { return tokens > seq_len ? (tokens - 1) / seq_len : 0; }

 private:
  TokenFile file_;
  int64_t seq_len_, first_, count_;
  int fd_ = -1;  // shared by the worker threads: pread keeps no offset
  void check_unchanged() const;  // FormatError where the open file is no longer what was scanned
};

}  // namespace pt::model
