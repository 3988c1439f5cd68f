// nn/data/tokens: token files in llm.c's and nanoGPT's formats (written byte by byte here, from
// the format's description, and by write_token_file), their values, every malformed file's
// message, and the windows: x/y shifted by one, random starts in [0, n - T - 1] that depend on the
// seed and the batch only (not the thread count, not the rank split), and llm.c's sequential
// order with its wrap.
#include <omp.h>

#include <cstring>
#include <fstream>
#include <set>

#include "nn/data/tokens.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using namespace vitrine::nn::data;

namespace {

/// Token i of the test files: distinct for i < 50000, and not the position itself.
uint16_t token_at(int64_t i) { return static_cast<uint16_t>((i * 7 + 3) % 50000); }

std::vector<uint16_t> test_tokens(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = token_at(i);
  return t;
}

/// llm.c's layout built by hand: 256 little-endian int32 (magic, version, count, zeros), then
/// the tokens as little-endian uint16.
std::string llmc_bytes(int32_t magic, int32_t version, int32_t count,
                       const std::vector<uint16_t>& tokens) {
  std::string b(1024, '\0');
  const int32_t head[3] = {magic, version, count};
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 4; ++j)
      b[4 * k + j] = static_cast<char>((static_cast<uint32_t>(head[k]) >> (8 * j)) & 0xff);
  for (uint16_t t : tokens) {
    b.push_back(static_cast<char>(t & 0xff));
    b.push_back(static_cast<char>(t >> 8));
  }
  return b;
}

std::string raw_bytes(const std::vector<uint16_t>& tokens) {
  return llmc_bytes(0, 0, 0, tokens).substr(1024);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<int64_t> values(const Tensor& t) {
  return {t.data<int64_t>(), t.data<int64_t>() + t.numel()};
}

/// The message of the Error that opening path as format throws ("" when it opens).
std::string open_error(const std::string& path, TokenFormat format = TokenFormat::Auto) {
  try {
    TokenFile f(path, format);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::shared_ptr<TokenFile> token_file(const TempDir& dir, int64_t n, const std::string& name) {
  write_token_file(dir / name, test_tokens(n));
  return std::make_shared<TokenFile>(dir / name);
}

}  // namespace

TEST_CASE("tokens: llm.c's format is read back, detected by its magic, and written byte for byte") {
  TempDir dir;
  const std::vector<uint16_t> tok = test_tokens(37);
  write_file(dir / "a.bin", llmc_bytes(20240520, 1, 37, tok));

  TokenFile f(dir / "a.bin");
  CHECK(f.format() == TokenFormat::LlmC);
  CHECK(f.is_open());
  CHECK(f.path() == dir / "a.bin");
  REQUIRE(f.size() == 37);
  for (int64_t i = 0; i < 37; ++i) CHECK(f[i] == token_at(i));
  CHECK(f.at(36) == token_at(36));
  CHECK(std::vector<uint16_t>(f.tokens().begin(), f.tokens().end()) == tok);
  const auto part = f.tokens(30, 7);
  CHECK(std::vector<uint16_t>(part.begin(), part.end()) ==
        std::vector<uint16_t>(tok.begin() + 30, tok.end()));
  CHECK(f.tokens(37, 0).empty());
  CHECK_THROWS_WITH(f.at(37), doctest::Contains("a.bin': token 37 is out of range (size 37)"));
  CHECK_THROWS_WITH(f.at(-1), doctest::Contains("token -1 is out of range"));
  CHECK_THROWS_WITH(f.tokens(30, 8), doctest::Contains("tokens [30, 30 + 8) are out of range"));

  // write_token_file writes what llm.c's write_datafile does, and a raw file is the tokens alone.
  write_token_file(dir / "w.bin", tok);
  CHECK(file_bytes(dir / "w.bin") == llmc_bytes(20240520, 1, 37, tok));
  write_token_file(dir / "w.raw", tok, TokenFormat::Raw);
  CHECK(file_bytes(dir / "w.raw") == raw_bytes(tok));
  CHECK(dir.files() == std::vector<std::string>{"a.bin", "w.bin", "w.raw"});  // no temp file left
  CHECK_THROWS_WITH(write_token_file(dir / "x.bin", tok, TokenFormat::Auto),
                    doctest::Contains("the format must be TokenFormat::LlmC or TokenFormat::Raw"));

  // Forced raw, the same file is its header's int32 as uint16 pairs, then the tokens.
  TokenFile r(dir / "a.bin", TokenFormat::Raw);
  CHECK(r.format() == TokenFormat::Raw);
  REQUIRE(r.size() == 512 + 37);
  CHECK(r[0] == (20240520 & 0xffff));
  CHECK(r[1] == (20240520 >> 16));
  CHECK(r[2] == 1);
  CHECK(r[4] == 37);
  CHECK(r[512] == token_at(0));
}

TEST_CASE("tokens: nanoGPT's raw .bin is the tokens, and an empty file holds none") {
  TempDir dir;
  const std::vector<uint16_t> tok = test_tokens(1001);
  write_file(dir / "train.bin", raw_bytes(tok));
  TokenFile f(dir / "train.bin");
  CHECK(f.format() == TokenFormat::Raw);
  REQUIRE(f.size() == 1001);
  CHECK(std::vector<uint16_t>(f.tokens().begin(), f.tokens().end()) == tok);
  TokenFile forced(dir / "train.bin", TokenFormat::Raw);
  CHECK(forced.size() == 1001);
  CHECK(forced[1000] == token_at(1000));

  write_file(dir / "empty.bin", "");
  TokenFile e(dir / "empty.bin");
  CHECK(e.is_open());
  CHECK(e.format() == TokenFormat::Raw);
  CHECK(e.size() == 0);
  CHECK(e.tokens().empty());
  CHECK_THROWS_WITH(e.at(0), doctest::Contains("token 0 is out of range (size 0)"));
  CHECK_THROWS_WITH(
      TokenWindows(std::make_shared<TokenFile>(dir / "empty.bin"),
                   {.batch_size = 1, .block_size = 1}),
      doctest::Contains("empty.bin' holds 0 tokens, too few for one window of block_size 1"));
  CHECK(open_error(dir / "empty.bin", TokenFormat::LlmC)
            .find("empty.bin' is too short for llm.c's header: 0 bytes, expected at least 1024") !=
        std::string::npos);
}

TEST_CASE("tokens: close unmaps, a move hands the map over") {
  TempDir dir;
  write_token_file(dir / "a.bin", test_tokens(10));
  TokenFile f(dir / "a.bin");
  TokenFile g(std::move(f));
  CHECK(f.size() == 0);
  CHECK(!f.is_open());
  REQUIRE(g.size() == 10);
  CHECK(g[9] == token_at(9));
  TokenFile h(dir / "a.bin", TokenFormat::Raw);
  h = std::move(g);
  CHECK(h.format() == TokenFormat::LlmC);
  CHECK(h.size() == 10);
  CHECK(h[3] == token_at(3));
  h.close();
  CHECK(!h.is_open());
  CHECK(h.size() == 0);
  CHECK_THROWS_WITH(h.at(0), doctest::Contains("token 0 is out of range (size 0, closed)"));
  h.close();  // twice is fine
}

TEST_CASE("tokens: every malformed file is an Error naming it, what was found and expected") {
  TempDir dir;
  const std::vector<uint16_t> tok = test_tokens(50);
  auto check_error = [&](const std::string& name, const std::string& bytes, TokenFormat format,
                         const std::string& expected) {
    write_file(dir / name, bytes);
    const std::string e = open_error(dir / name, format);
    INFO(name, ": ", e);
    CHECK(e.find(fmt::format("token file '{}", dir / name)) != std::string::npos);
    CHECK(e.find(expected) != std::string::npos);
  };
  // A raw file (tokens 3, 10, ...: 3 + 10 * 65536) opened as llm.c's.
  check_error("raw.bin", raw_bytes(test_tokens(600)), TokenFormat::LlmC,
              "has magic 655363 (not an llm.c file); expected 20240520 (llm.c's uint16 token "
              "file) (a raw nanoGPT .bin? open it with TokenFormat::Raw)");
  check_error("short.bin", raw_bytes(test_tokens(5)), TokenFormat::LlmC,
              "is too short for llm.c's header: 10 bytes, expected at least 1024");
  check_error("version.bin", llmc_bytes(20240520, 2, 50, tok), TokenFormat::Auto,
              "has llm.c header version 2; expected 1 (uint16 tokens)");
  check_error("long_count.bin", llmc_bytes(20240520, 1, 80, tok), TokenFormat::Auto,
              "is truncated: its header counts 80 tokens (160 bytes) but 100 bytes follow the "
              "1024-byte header (room for 50 tokens)");
  check_error("huge_count.bin", llmc_bytes(20240520, 1, 2147483647, tok), TokenFormat::Auto,
              "its header counts 2147483647 tokens (4294967294 bytes) but 100 bytes follow");
  check_error("short_count.bin", llmc_bytes(20240520, 1, 49, tok), TokenFormat::Auto,
              "has 2 bytes after its tokens: its header counts 49 tokens (98 bytes) and 100 bytes "
              "follow the 1024-byte header; expected exactly 98");
  check_error("negative.bin", llmc_bytes(20240520, 1, -4, tok), TokenFormat::Auto,
              "its llm.c header counts -4 tokens; expected >= 0");
  check_error("cut_header.bin", llmc_bytes(20240520, 1, 0, {}).substr(0, 1000), TokenFormat::Auto,
              "is too short for llm.c's header: 1000 bytes");
  check_error("odd.bin", raw_bytes(tok).substr(0, 7), TokenFormat::Auto,
              "has an odd size, 7 bytes: a raw token file (nanoGPT's .bin) is uint16 tokens");
  check_error("odd_forced.bin", raw_bytes(tok) + "x", TokenFormat::Raw, "has an odd size, 101");
  check_error("llama3.bin", llmc_bytes(20240801, 7, 0, {}), TokenFormat::Auto,
              "starts with magic 20240801, llm.c's LLaMA-3 token file, of uint32 tokens, which "
              "TokenFile does not read");
  // ... which a raw reading takes as 512 tokens.
  CHECK(TokenFile(dir / "llama3.bin", TokenFormat::Raw).size() == 512);

  CHECK(open_error(dir / "missing.bin") ==
        fmt::format("token file '{}': cannot open it: No such file or directory",
                    dir / "missing.bin"));
  CHECK(open_error(dir.dir.string()) ==
        fmt::format("token file '{}' is not a regular file", dir.dir.string()));
}

TEST_CASE("tokens: random windows are x and the next tokens y, starts in [0, n - T - 1]") {
  TempDir dir;
  const int64_t n = 13, T = 10;  // starts 0, 1 or 2
  auto file = token_file(dir, n, "a.bin");
  TokenWindows w(file, {.batch_size = 16, .block_size = T, .seed = 7});
  CHECK(w.batches_per_epoch() == (n - 1) / (16 * T));
  std::set<int64_t> seen;
  for (int k = 0; k < 8; ++k) {
    CHECK(w.position() == k);
    const TokenBatch b = w.next();
    CHECK(b.x.shape() == Dims{16, T});
    CHECK(b.y.shape() == Dims{16, T});
    CHECK(b.x.dtype() == kInt64);
    CHECK(b.y.dtype() == kInt64);
    REQUIRE(b.starts.size() == 16);
    const std::vector<int64_t> x = values(b.x), y = values(b.y);
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t s = b.starts[static_cast<size_t>(r)];
      seen.insert(s);
      for (int64_t i = 0; i < T; ++i) {
        CHECK(x[r * T + i] == token_at(s + i));
        CHECK(y[r * T + i] == token_at(s + i + 1));
        if (i + 1 < T) CHECK(y[r * T + i] == x[r * T + i + 1]);
      }
    }
  }
  CHECK(seen == std::set<int64_t>{0, 1, 2});  // the last start, n - T - 1, is drawn, none past it

  // One window fits exactly: n = T + 1 gives start 0 every time.
  auto exact = token_file(dir, T + 1, "exact.bin");
  TokenWindows one(exact, {.batch_size = 3, .block_size = T});
  CHECK(one.next().starts == std::vector<int64_t>{0, 0, 0});
  CHECK(values(one.next().y)[T - 1] == token_at(T));

  // windows() at given starts, and its bounds.
  const TokenBatch at = w.windows({2, 0});
  CHECK(values(at.x)[0] == token_at(2));
  CHECK(values(at.y)[2 * T - 1] == token_at(T));
  CHECK_THROWS_WITH(w.windows({3}),
                    doctest::Contains("window start 3 is out of range for token file"));
  CHECK_THROWS_WITH(w.windows({-1}),
                    doctest::Contains("(13 tokens, block_size 10: starts in [0, 2])"));
}

TEST_CASE("tokens: random windows depend on the seed and the batch only") {
  TempDir dir;
  auto file = token_file(dir, 5000, "a.bin");
  const TokenWindowsOptions opt{.batch_size = 100, .block_size = 8, .seed = 11};
  TokenWindows a(file, opt), b(file, opt);
  std::vector<std::vector<int64_t>> starts;
  for (int k = 0; k < 4; ++k) {
    starts.push_back(a.next().starts);
    CHECK(b.next().starts == starts.back());
  }
  CHECK(starts[0] != starts[1]);

  // Batch k is a function of k: resuming at 2 gives batch 2.
  TokenWindows c(file, opt);
  c.set_position(2);
  CHECK(c.next().starts == starts[2]);
  CHECK(c.position() == 3);
  CHECK_THROWS_WITH(c.set_position(-1), doctest::Contains("the batch must be >= 0, got -1"));

  // Another seed, other starts; one thread, the same starts.
  TokenWindows d(file, {.batch_size = 100, .block_size = 8, .seed = 12});
  CHECK(d.next().starts != starts[0]);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  TokenWindows e(file, opt);
  const std::vector<int64_t> single = e.next().starts;
  omp_set_num_threads(threads);
  CHECK(single == starts[0]);

  // Two ranks' batch k together are batch k of one process with twice the batch size.
  TokenWindows whole(file, {.batch_size = 200, .block_size = 8, .seed = 11});
  TokenWindows r0(file, {.batch_size = 100, .block_size = 8, .seed = 11, .num_replicas = 2});
  TokenWindows r1(file,
                  {.batch_size = 100, .block_size = 8, .seed = 11, .num_replicas = 2, .rank = 1});
  for (int k = 0; k < 3; ++k) {
    std::vector<int64_t> both = r0.next().starts;
    const std::vector<int64_t> second = r1.next().starts;
    both.insert(both.end(), second.begin(), second.end());
    CHECK(both == whole.next().starts);
  }

  // sample(gen) is nanoGPT's get_batch: ops::randint(0, n - T, {B}, gen), gen advanced by B.
  Generator g(3), h(3);
  const TokenBatch s = a.sample(g);
  CHECK(g.offset() == 100);
  CHECK(s.starts == values(ops::randint(0, 5000 - 8, {100}, h)));
  CHECK(values(s.x)[8] == token_at(s.starts[1]));
}

TEST_CASE("tokens: sequential windows follow llm.c's loader and wrap to the start") {
  TempDir dir;
  // n = 49, B = 2, T = 4: K = (49 - 1) / 8 = 6 batches; batch 5 reads tokens 40..48, the last.
  auto file = token_file(dir, 49, "a.bin");
  TokenWindows w(file, {.batch_size = 2, .block_size = 4, .order = WindowOrder::Sequential});
  REQUIRE(w.batches_per_epoch() == 6);
  for (int64_t k = 0; k < 13; ++k) {
    const TokenBatch b = w.next();
    const int64_t o = (k % 6) * 8;
    CHECK(b.starts == std::vector<int64_t>{o, o + 4});
    const std::vector<int64_t> x = values(b.x), y = values(b.y);
    for (int64_t i = 0; i < 8; ++i) {  // the rows are consecutive: B T + 1 tokens from o
      CHECK(x[i] == token_at(o + i));
      CHECK(y[i] == token_at(o + i + 1));
    }
  }

  // Rank 1 of 2 takes the second B T of each 2 B T: K = 48 / 16 = 3.
  TokenWindows r1(file, {.batch_size = 2,
                         .block_size = 4,
                         .order = WindowOrder::Sequential,
                         .num_replicas = 2,
                         .rank = 1});
  CHECK(r1.batches_per_epoch() == 3);
  CHECK(r1.next().starts == std::vector<int64_t>{8, 12});
  CHECK(r1.next().starts == std::vector<int64_t>{24, 28});
  CHECK(r1.next().starts == std::vector<int64_t>{40, 44});
  CHECK(r1.next().starts == std::vector<int64_t>{8, 12});
  r1.set_position(5);
  CHECK(r1.next().starts == std::vector<int64_t>{40, 44});
}

TEST_CASE("tokens: bad window options are Errors") {
  TempDir dir;
  auto file = token_file(dir, 16, "a.bin");
  auto error = [&](TokenWindowsOptions o) -> std::string {
    try {
      TokenWindows w(file, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error({.batch_size = 0, .block_size = 4}) ==
        "TokenWindows: batch_size must be >= 1, got 0");
  CHECK(error({.batch_size = 1, .block_size = 0}) ==
        "TokenWindows: block_size must be >= 1, got 0");
  CHECK(error({.batch_size = 1, .block_size = 4, .num_replicas = 0}) ==
        "TokenWindows: num_replicas must be >= 1, got 0");
  CHECK(error({.batch_size = 1, .block_size = 4, .num_replicas = 2, .rank = 2}) ==
        "TokenWindows: rank must be in [0, num_replicas = 2), got 2");
  CHECK(error({.batch_size = 1, .block_size = 16}) ==
        fmt::format("TokenWindows: token file '{}' holds 16 tokens, too few for one window of "
                    "block_size 16 (it needs block_size + 1 = 17: x and the token after it)",
                    dir / "a.bin"));
  CHECK(error({.batch_size = 1, .block_size = 15}).empty());
  CHECK(error({.batch_size = 3, .block_size = 5, .order = WindowOrder::Sequential}).empty());
  CHECK(error({.batch_size = 4, .block_size = 4, .order = WindowOrder::Sequential}) ==
        fmt::format("TokenWindows: token file '{}' holds 16 tokens, too few for one sequential "
                    "batch of 4 x 4 tokens on 1 replica(s) (it needs num_replicas * batch_size * "
                    "block_size + 1 = 17)",
                    dir / "a.bin"));
  CHECK_THROWS_WITH(TokenWindows(nullptr, {}), doctest::Contains("the token file is null"));
}
