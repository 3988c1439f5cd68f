// Token files and their windows (see tokens.h for the formats and the order of the windows).
#include "nn/data/tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "nn/atomic_write.h"
#include "ops/ops.h"

namespace vitrine::nn::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; this reader maps them as they are");

namespace {

constexpr int64_t kHeaderBytes = kLlmcHeaderInts * 4;

/// llm.c's other magics, for the message when one of its files is not a uint16 token file.
const char* describe_magic(int32_t magic) {
  switch (magic) {
    case kLlmcTokensMagic:
      return "llm.c's uint16 token file";
    case 20240801:
      return "llm.c's LLaMA-3 token file, of uint32 tokens";
    case 20240522:
      return "llm.c's multiple-choice eval file";
    default:
      return "not an llm.c file";
  }
}

int32_t header_int(const void* map, int64_t i) {
  int32_t v;
  std::memcpy(&v, static_cast<const char*>(map) + 4 * i, 4);
  return v;
}

/// a * b * c, or int64 max when that overflows (for size checks against a file's token count).
int64_t saturating_product(int64_t a, int64_t b, int64_t c) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
    return std::numeric_limits<int64_t>::max();
  return abc;
}

}  // namespace

// ---- TokenFile ------------------------------------------------------------------------------

TokenFile::TokenFile(const std::string& path, TokenFormat format) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VT_CHECK(fd >= 0, "token file '{}': cannot open it: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("token file '{}': cannot read its size: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("token file '{}' is not a regular file", path);
  }
  const int64_t bytes = st.st_size;
  if (bytes > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    VT_CHECK(map != MAP_FAILED, "token file '{}': cannot map its {} bytes: {}", path, bytes,
             std::strerror(e));
    map_ = map;
    map_bytes_ = static_cast<size_t>(bytes);
  } else {
    ::close(fd);
  }
  open_ = true;

  try {
    const int32_t magic = bytes >= 4 ? header_int(map_, 0) : 0;
    if (format == TokenFormat::Auto) {
      VT_CHECK(magic != 20240801 && magic != 20240522,
               "token file '{}' starts with magic {}, {}, which TokenFile does not read (it reads "
               "uint16 tokens); open it with TokenFormat::Raw if it is a raw file of uint16 tokens",
               path, magic, describe_magic(magic));
      format = magic == kLlmcTokensMagic ? TokenFormat::LlmC : TokenFormat::Raw;
    }
    format_ = format;

    if (format == TokenFormat::Raw) {
      VT_CHECK(bytes % 2 == 0,
               "token file '{}' has an odd size, {} bytes: a raw token file (nanoGPT's .bin) is "
               "uint16 tokens, 2 bytes each",
               path, bytes);
      tokens_ = static_cast<const uint16_t*>(map_);
      size_ = bytes / 2;
      return;
    }

    VT_CHECK(bytes >= kHeaderBytes,
             "token file '{}' is too short for llm.c's header: {} bytes, expected at least {} "
             "(256 int32) (a raw nanoGPT .bin? open it with TokenFormat::Raw)",
             path, bytes, kHeaderBytes);
    VT_CHECK(magic == kLlmcTokensMagic,
             "token file '{}' has magic {} ({}); expected {} ({}) (a raw nanoGPT .bin? open it "
             "with TokenFormat::Raw)",
             path, magic, describe_magic(magic), kLlmcTokensMagic,
             describe_magic(kLlmcTokensMagic));
    const int32_t version = header_int(map_, 1);
    VT_CHECK(version == kLlmcTokensVersion,
             "token file '{}' has llm.c header version {}; expected {} (uint16 tokens)", path,
             version, kLlmcTokensVersion);
    const int64_t count = header_int(map_, 2);
    VT_CHECK(count >= 0, "token file '{}': its llm.c header counts {} tokens; expected >= 0", path,
             count);
    const int64_t payload = bytes - kHeaderBytes;
    VT_CHECK(2 * count <= payload,
             "token file '{}' is truncated: its header counts {} tokens ({} bytes) but {} bytes "
             "follow the {}-byte header (room for {} tokens)",
             path, count, 2 * count, payload, kHeaderBytes, payload / 2);
    VT_CHECK(2 * count == payload,
             "token file '{}' has {} bytes after its tokens: its header counts {} tokens ({} "
             "bytes) and {} bytes follow the {}-byte header; expected exactly {}",
             path, payload - 2 * count, count, 2 * count, payload, kHeaderBytes, 2 * count);
    // The header is 1024 bytes into a page-aligned map, so the tokens are 2-byte aligned.
    tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kHeaderBytes);
    size_ = count;
  } catch (...) {
    close();
    throw;
  }
}

TokenFile::~TokenFile() { close(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      format_(other.format_),
      open_(other.open_),
      map_(other.map_),
      map_bytes_(other.map_bytes_),
      tokens_(other.tokens_),
      size_(other.size_) {
  other.open_ = false;
  other.map_ = nullptr;
  other.map_bytes_ = 0;
  other.tokens_ = nullptr;
  other.size_ = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    format_ = other.format_;
    std::swap(open_, other.open_);
    std::swap(map_, other.map_);
    std::swap(map_bytes_, other.map_bytes_);
    std::swap(tokens_, other.tokens_);
    std::swap(size_, other.size_);
  }
  return *this;
}

void TokenFile::close() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  size_ = 0;
  open_ = false;
}

uint16_t TokenFile::at(int64_t i) const {
  VT_CHECK(i >= 0 && i < size_, "token file '{}': token {} is out of range (size {}{})", path_, i,
           size_, open_ ? "" : ", closed");
  return tokens_[i];
}

std::span<const uint16_t> TokenFile::tokens(int64_t start, int64_t count) const {
  VT_CHECK(start >= 0 && count >= 0 && start <= size_ && count <= size_ - start,
           "token file '{}': tokens [{}, {} + {}) are out of range (size {}{})", path_, start,
           start, count, size_, open_ ? "" : ", closed");
  return {tokens_ + start, static_cast<size_t>(count)};
}

void write_token_file(const std::string& path, std::span<const uint16_t> tokens,
                      TokenFormat format) {
  VT_CHECK(format != TokenFormat::Auto,
           "write_token_file '{}': the format must be TokenFormat::LlmC or TokenFormat::Raw", path);
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::string bytes;
  if (format == TokenFormat::LlmC) {
    VT_CHECK(n <= std::numeric_limits<int32_t>::max(),
             "write_token_file '{}': {} tokens; llm.c's header counts at most {} (an int32)", path,
             n, std::numeric_limits<int32_t>::max());
    int32_t header[kLlmcHeaderInts] = {kLlmcTokensMagic, kLlmcTokensVersion,
                                       static_cast<int32_t>(n)};
    bytes.append(reinterpret_cast<const char*>(header), sizeof header);
  }
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes());
  write_file_atomically(path, bytes);
}

// ---- TokenWindows ---------------------------------------------------------------------------

TokenWindows::TokenWindows(std::shared_ptr<const TokenFile> file, TokenWindowsOptions options)
    : file_(std::move(file)), options_(options) {
  VT_CHECK(file_ != nullptr, "TokenWindows: the token file is null");
  const int64_t B = options_.batch_size, T = options_.block_size, R = options_.num_replicas;
  VT_CHECK(B >= 1, "TokenWindows: batch_size must be >= 1, got {}", B);
  VT_CHECK(T >= 1, "TokenWindows: block_size must be >= 1, got {}", T);
  VT_CHECK(R >= 1, "TokenWindows: num_replicas must be >= 1, got {}", R);
  VT_CHECK(options_.rank >= 0 && options_.rank < R,
           "TokenWindows: rank must be in [0, num_replicas = {}), got {}", R, options_.rank);
  const int64_t n = file_->size();
  VT_CHECK(n >= T + 1,
           "TokenWindows: token file '{}' holds {} tokens, too few for one window of block_size "
           "{} (it needs block_size + 1 = {}: x and the token after it)",
           file_->path(), n, T, T + 1);
  if (options_.order == WindowOrder::Sequential) {
    const int64_t need = saturating_product(R, B, T);
    VT_CHECK(need < n,
             "TokenWindows: token file '{}' holds {} tokens, too few for one sequential batch of "
             "{} x {} tokens on {} replica(s) (it needs num_replicas * batch_size * block_size + "
             "1 = {})",
             file_->path(), n, B, T, R,
             need == std::numeric_limits<int64_t>::max() ? need : need + 1);
  }
}

int64_t TokenWindows::batches_per_epoch() const {
  const TokenWindowsOptions& o = options_;
  return (file_->size() - 1) / saturating_product(o.num_replicas, o.batch_size, o.block_size);
}

void TokenWindows::set_position(int64_t k) {
  VT_CHECK(k >= 0, "TokenWindows::set_position: the batch must be >= 0, got {}", k);
  position_ = k;
}

TokenBatch TokenWindows::next() {
  const int64_t k = position_, B = options_.batch_size, T = options_.block_size;
  const int64_t R = options_.num_replicas, r = options_.rank;
  std::vector<int64_t> starts(static_cast<size_t>(B));
  if (options_.order == WindowOrder::Sequential) {
    const int64_t o = (k % batches_per_epoch()) * R * B * T + r * B * T;
    for (int64_t b = 0; b < B; ++b) starts[static_cast<size_t>(b)] = o + b * T;
  } else {
    Generator gen(options_.seed);
    gen.set_offset(static_cast<uint64_t>(k) * static_cast<uint64_t>(R * B) +
                   static_cast<uint64_t>(r * B));
    const Tensor s = ops::randint(0, file_->size() - T, {B}, gen);
    starts.assign(s.data<int64_t>(), s.data<int64_t>() + B);
  }
  TokenBatch batch = windows(starts);
  ++position_;
  return batch;
}

TokenBatch TokenWindows::sample(Generator& gen) const {
  const Tensor s = ops::randint(0, file_->size() - options_.block_size, {options_.batch_size}, gen);
  return windows(std::vector<int64_t>(s.data<int64_t>(), s.data<int64_t>() + s.numel()));
}

TokenBatch TokenWindows::windows(const std::vector<int64_t>& starts) const {
  const int64_t B = static_cast<int64_t>(starts.size()), T = options_.block_size;
  const int64_t last = file_->size() - T - 1;
  TokenBatch batch{Tensor::empty({B, T}, kInt64), Tensor::empty({B, T}, kInt64), starts};
  int64_t* x = batch.x.data<int64_t>();
  int64_t* y = batch.y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = starts[static_cast<size_t>(b)];
    VT_CHECK(s >= 0 && s <= last,
             "TokenWindows: window start {} is out of range for token file '{}' ({} tokens, "
             "block_size {}: starts in [0, {}])",
             s, file_->path(), file_->size(), T, last);
    const uint16_t* t = file_->tokens().data() + s;
    for (int64_t i = 0; i < T; ++i) {
      x[b * T + i] = t[i];
      y[b * T + i] = t[i + 1];
    }
  }
  return batch;
}

}  // namespace vitrine::nn::data
