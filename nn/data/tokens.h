// Token data for language models: a file of uint16 token ids, memory-mapped, and the [B, T]
// windows a GPT trains on.
//
// Two file formats, both little-endian uint16 token ids (GPT-2's vocabulary, 50257, fits):
//   llm.c's (dev/data/data_common.py's write_datafile): a header of 256 int32,
//     header[0] = 20240520 (the magic), header[1] = 1 (the version), header[2] = n (the count),
//     the rest 0; then the n tokens. The file is exactly 1024 + 2n bytes (llm.c checks the same).
//   nanoGPT's raw .bin (data/*/prepare.py's ids.tofile): no header, the file is the tokens, so
//     its size must be even.
// TokenFormat::Auto tells them apart by the magic: a file whose first int32 is 20240520 is llm.c's;
// anything else is raw (force Raw for a raw file whose first two tokens happen to spell the
// magic). The file is mapped read-only and never copied: a 10 GB training set costs address
// space, and the pages a batch touches. Truncating the file while it is mapped is undefined
// (SIGBUS), as for any memory map.
//
// Windows (TokenWindows) are nanoGPT's and llm.c's training inputs: x[b] = tokens[s_b, s_b + T)
// and y[b] = tokens[s_b + 1, s_b + T + 1), the next token at each place, as int64 [B, T].
//   Random (nanoGPT's get_batch): s_b = randint(0, n - T) (uniform in [0, n - T - 1]), drawn by
//     ops::randint from a Philox Generator: batch k of rank r of R uses the generator's counters
//     [(k R + r) B, (k R + r + 1) B) under key seed, so batch k of all ranks together is batch k
//     of one process with batch size R B, and a batch depends on (seed, k) only.
//   Sequential (llm.c's DataLoader): batch k reads B T + 1 consecutive tokens from
//     o = (k mod K) R B T + r B T, K = (n - 1) / (R B T) batches an epoch, s_b = o + b T: the rows
//     are consecutive, y's last token is the next row's first, and after K batches it starts over.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "backends/generator.h"

namespace vitrine::nn::data {

enum class TokenFormat {
  Auto,  ///< llm.c's when the file starts with its magic, else raw
  LlmC,  ///< llm.c's header + uint16 tokens
  Raw,   ///< nanoGPT's .bin: only uint16 tokens
};

/// llm.c's header: 256 int32 (1024 bytes); magic and version of its uint16 (GPT-2) token files.
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int32_t kLlmcTokensMagic = 20240520;
inline constexpr int32_t kLlmcTokensVersion = 1;

/// A file of uint16 tokens, memory-mapped read-only. Reading it is thread-safe; moving it moves
/// the mapping; destroying or close()-ing it unmaps it (spans from tokens() then dangle).
class TokenFile {
 public:
  /// Maps path and checks it (see the top of this file); a bad file is an Error naming it, what
  /// was found and what was expected. An empty file is a raw file of no tokens.
  explicit TokenFile(const std::string& path, TokenFormat format = TokenFormat::Auto);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  /// The number of tokens (0 once closed).
  int64_t size() const { return size_; }
  /// Token i, unchecked (0 <= i < size()).
  uint16_t operator[](int64_t i) const { return tokens_[i]; }
  /// Token i; an index out of range is an Error.
  uint16_t at(int64_t i) const;
  /// All the tokens, or count of them from start (checked: never past the end).
  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(size_)}; }
  std::span<const uint16_t> tokens(int64_t start, int64_t count) const;
  const std::string& path() const { return path_; }
  /// The format read: LlmC or Raw.
  TokenFormat format() const { return format_; }
  bool is_open() const { return open_; }
  /// Unmaps the file; size() becomes 0.
  void close();

 private:
  std::string path_;
  TokenFormat format_ = TokenFormat::Raw;
  bool open_ = false;
  void* map_ = nullptr;  // the whole file, or null for an empty one
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t size_ = 0;
};

/// Writes tokens to path as format (LlmC: llm.c's header, then the tokens; Raw: the tokens),
/// atomically (a temp file renamed). LlmC holds at most 2^31 - 1 tokens (an int32 count).
void write_token_file(const std::string& path, std::span<const uint16_t> tokens,
                      TokenFormat format = TokenFormat::LlmC);

struct TokenBatch {
  Tensor x;                     // [B, T] int64: tokens [s_b, s_b + T)
  Tensor y;                     // [B, T] int64: tokens [s_b + 1, s_b + T + 1)
  std::vector<int64_t> starts;  // [B] s_b
};

enum class WindowOrder {
  Random,     ///< nanoGPT's get_batch: B random starts per batch
  Sequential  ///< llm.c's DataLoader: B T + 1 consecutive tokens per batch, wrapping
};

struct TokenWindowsOptions {
  /// B and T (nanoGPT's train.py defaults: batch_size 12, block_size 1024).
  int64_t batch_size = 12;
  int64_t block_size = 1024;
  WindowOrder order = WindowOrder::Random;
  /// Seeds the random starts (Random only).
  uint64_t seed = 0;
  /// Data-parallel sharding: this object serves rank `rank` of num_replicas (see the top).
  int64_t num_replicas = 1;
  int64_t rank = 0;
};

/// Batches of [B, T] windows over a TokenFile (see the top of this file).
class TokenWindows {
 public:
  /// Errors: B or T < 1, a bad rank, a file with fewer than T + 1 tokens (Random) or
  /// R B T + 1 tokens (Sequential).
  TokenWindows(std::shared_ptr<const TokenFile> file, TokenWindowsOptions options);

  /// Batch position() in the options' order; then position() advances by one.
  TokenBatch next();
  /// The batch next() returns next (batches taken so far, when counting from 0).
  int64_t position() const { return position_; }
  /// Makes next() continue from batch k (for --resume: the batches are a function of k).
  void set_position(int64_t k);
  /// (n - 1) / (R B T): a Sequential epoch's batches; in Random order, the batches that read as
  /// many tokens as the file holds.
  int64_t batches_per_epoch() const;

  /// nanoGPT's get_batch with a generator of the caller's: B starts ops::randint(0, n - T, {B},
  /// gen) (gen advances by B), whatever the options' order, seed and rank.
  TokenBatch sample(Generator& gen) const;
  /// The windows at the given starts (each in [0, n - T - 1]; else an Error).
  TokenBatch windows(const std::vector<int64_t>& starts) const;

  const TokenFile& file() const { return *file_; }
  const TokenWindowsOptions& options() const { return options_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  TokenWindowsOptions options_;
  int64_t position_ = 0;
};

}  // namespace vitrine::nn::data
