// TensorBoard's event files (train/tfevents.h, tensorboard.h): CRC-32C and TFRecord's mask
// against known answers, the record framing, metrics lines as tagged scalars, the confusion
// matrix image; a tiny run's event file read back by tests/train/read_tfevents.py, an independent
// reader in Python (its own framing and CRC-32C, python3-protobuf over the same .proto; the case
// skips where /usr/bin/python3, its google.protobuf or protoc is missing), also after a kill and a
// resume; train.tensorboard false; a file that cannot be written is an Error naming it.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>

#include "nn/data/image_decode.h"
#include "nn/state.h"
#include "run_files.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/config.h"
#include "train/tensorboard.h"
#include "train/tfevents.h"
#include "train/trainer.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace tr = vitrine::train;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

/// The data of every record of an event file, both CRCs checked (with the writer's CRC: the
/// Python reader has its own).
std::vector<std::string> records(const std::string& path) {
  const std::string blob = bytes_of(path);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < blob.size()) {
    REQUIRE(blob.size() - at >= 12);
    const uint64_t n = le(blob, at, 8);
    REQUIRE(le(blob, at + 8, 4) == tr::masked_crc32c(std::string_view(blob).substr(at, 8)));
    REQUIRE(blob.size() - at - 12 >= n + 4);
    const std::string data = blob.substr(at + 12, n);
    REQUIRE(le(blob, at + 12 + n, 4) == tr::masked_crc32c(data));
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C and TFRecord's mask give the known answers") {
  CHECK(tr::crc32c("123456789") == 0xE3069283u);  // the check value of CRC-32C
  CHECK(tr::crc32c("") == 0u);
  // RFC 3720 (iSCSI), B.4: 32 bytes of zeros, of ones, ascending 0..31.
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  CHECK(tr::crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(tr::crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  CHECK(tr::crc32c(ascending) == 0x46DD794Eu);
  CHECK(tr::crc32c("6789", tr::crc32c("12345")) == 0xE3069283u);  // continued
  // ((c >> 15) | (c << 17)) + 0xa282ead8 for c = 0xE3069283: 0x1C60D | 0x25060000, + 0xa282ead8.
  CHECK(tr::masked_crc32c("123456789") == 0xC78AB0E5u);
}

TEST_CASE("tensorboard: a record is the length, its masked CRC, the data, the data's masked CRC") {
  const std::string r = tr::tfrecord("abc");
  REQUIRE(r.size() == 8 + 4 + 3 + 4);
  CHECK(r.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(le(r, 8, 4) == tr::masked_crc32c(r.substr(0, 8)));
  CHECK(r.substr(12, 3) == "abc");
  CHECK(le(r, 15, 4) == tr::masked_crc32c("abc"));
  CHECK(tr::event_file_name(1700000000, "box") == "events.out.tfevents.1700000000.box");
  CHECK(tr::is_event_file_name("events.out.tfevents.1700000000.box"));
  CHECK_FALSE(tr::is_event_file_name("metrics.jsonl"));
}

TEST_CASE("tensorboard: a metrics line's numbers become tagged scalars, its position the step") {
  const json eval = {{"type", "eval"},      {"epoch", 1},    {"step", 30},
                     {"global_step", 60},   {"loss", 0.25},  {"accuracy", 0.5},
                     {"train_seconds", 12}, {"note", "text"}};
  CHECK(tr::metrics_scalars(eval) == std::vector<tr::Scalar>{{"val/accuracy", 0.5},
                                                             {"val/loss", 0.25},
                                                             {"val/train_seconds", 12}});
  const json train = {{"type", "train"},
                      {"global_step", 4},
                      {"loss", std::numeric_limits<double>::quiet_NaN()},  // null in the file
                      {"lr", 1e-3}};
  CHECK(tr::metrics_scalars(train) == std::vector<tr::Scalar>{{"train/lr", 1e-3}});
  CHECK(tr::tensorboard_group("train_eval") == "train_eval");
  CHECK_ERROR_CONTAINS(tr::metrics_scalars({{"loss", 1}}), "needs a \"type\"");
}

TEST_CASE("tensorboard: the confusion matrix image has a square per cell, blue by the row") {
  const std::vector<std::vector<int64_t>> confusion = {{4, 0, 0}, {1, 3, 0}, {0, 0, 0}};
  const tr::EncodedImage image = tr::confusion_matrix_png(confusion);
  // 3 classes: squares of min(256 / 3, 32) = 32 pixels and a 1-pixel grid: 3 * 32 + 4.
  CHECK(image.height == 100);
  CHECK(image.width == 100);
  const auto decoded = nn::data::decode_image(
      {reinterpret_cast<const uint8_t*>(image.png.data()), image.png.size()}, "confusion");
  REQUIRE(decoded.channels == 3);
  REQUIRE(decoded.width == 100);
  const auto pixel = [&](int64_t y, int64_t x) {
    const uint8_t* p = &decoded.pixels[static_cast<size_t>((y * 100 + x) * 3)];
    return std::vector<int>{p[0], p[1], p[2]};
  };
  const auto centre = [&](int64_t t, int64_t p) { return pixel(1 + t * 33 + 16, 1 + p * 33 + 16); };
  CHECK(centre(0, 0) == std::vector<int>{8, 48, 107});     // all of row 0
  CHECK(centre(0, 1) == std::vector<int>{255, 255, 255});  // none
  CHECK(centre(1, 1) == std::vector<int>{70, 100, 144});   // 3 of 4: 255 + 0.75 (c - 255)
  CHECK(centre(2, 2) == std::vector<int>{255, 255, 255});  // a class without examples
  CHECK(pixel(0, 0) == std::vector<int>{200, 200, 200});   // the grid
  CHECK(tr::confusion_matrix_png(std::vector<std::vector<int64_t>>(100, std::vector<int64_t>(100)))
            .width == 200);  // 2-pixel squares, no grid
  CHECK_ERROR_CONTAINS(tr::confusion_matrix_png({{1, 2}}), "square");
  CHECK_ERROR_CONTAINS(tr::confusion_matrix_png({}), "1 to 1024 classes");
}

TEST_CASE("tensorboard: a short run's event file passes the independent reader") {
  SingleThread st;
  TempDir dir;
  Sets s;
  // 12 steps: train lines at 4, 8, 12; validations at 5, 10 and the end; train_eval and test.
  const json config = tiny_config({"train.max_steps=12", "train.eval_every=5"});
  CHECK(config.at("train").at("tensorboard") == true);  // the shipped configs say so
  tr::Trainer t(config, s.train, s.val, s.test, dir.dir.string());
  CHECK(t.config().train.tensorboard);
  t.run();
  const std::vector<std::string> files = event_files(dir.dir.string());
  REQUIRE(files.size() == 1);
  CHECK(std::regex_match(fs::path(files[0]).filename().string(),
                         std::regex(R"(events\.out\.tfevents\.\d{10}\.[^/]+)")));
  const std::vector<json> lines = metrics_lines(dir.dir.string());
  CHECK(lines.size() == 3 + 3 + 2);
  CHECK(records(files[0]).size() == 1 + lines.size() + 1);  // version, lines, the image
  check_with_independent_reader(dir, dir.dir.string());

  // One byte changed anywhere fails the reader: a record's data (a scalar's bits), a length.
  for (const size_t at : {size_t{100}, size_t{fs::file_size(files[0]) / 2}, size_t{1}}) {
    CAPTURE(at);
    const std::string bad = dir / "bad";
    fs::create_directories(bad);
    for (const char* f : {"metrics.jsonl", "confusion_matrix.json"})
      fs::copy_file(dir / f, bad + "/" + f, fs::copy_options::overwrite_existing);
    std::string blob = bytes_of(files[0]);
    blob[at] = static_cast<char>(blob[at] ^ 0x10);
    write_file(bad + "/" + fs::path(files[0]).filename().string(), blob);
    const ProcessResult r = run_independent_reader(dir, bad);
    INFO(r.output);
    CHECK((r.code == 1 || r.code == 77));
    if (r.code == 1) CHECK(r.output.find("CRC is") != std::string::npos);
  }

  // A second run in the same folder replaces the first one's file (TensorBoard would mix them).
  tr::Trainer again(tiny_config({"train.max_steps=4"}), s.train, s.val, s.test, dir.dir.string());
  again.run();
  REQUIRE(event_files(dir.dir.string()).size() == 1);
  CHECK(records(event_files(dir.dir.string())[0]).size() == 1 + 4 + 1);  // train, eval, 2 ends
}

TEST_CASE("tensorboard: train.tensorboard false writes no event file") {
  SingleThread st;
  TempDir dir;
  Sets s;
  json config = tiny_config({"train.max_steps=4"});
  tr::apply_override(config, "train.tensorboard=false");
  CHECK(config.at("train").at("tensorboard") == false);
  json bad = tiny_config();
  bad["train"]["tensorboard"] = "yes";
  CHECK_ERROR_CONTAINS(tr::validate_config(bad), "train.tensorboard");
  tr::Trainer t(config, s.train, s.val, s.test, dir.dir.string());
  t.run();
  CHECK(event_files(dir.dir.string()).empty());
  CHECK(fs::exists(dir / "metrics.jsonl"));
  const json state =
      nn::metadata_json(nn::read_safetensors(dir / "last.safetensors").metadata, nn::kStateKey);
  CHECK(state.at("events_file") == "");
}

TEST_CASE("tensorboard: killed between checkpoints and resumed, each step is in the file once") {
  SingleThread st;
  TempDir dir;
  Sets s;
  // Validations (and checkpoints) every 4 steps, train lines every 3.
  const json config = tiny_config({"train.eval_every=4", "train.log_every=3", "train.epochs=1"});
  struct Killed {};
  {
    tr::Trainer first(config, s.train, s.val, s.test, dir.dir.string());
    first.set_on_step([](const tr::StepInfo& i) {
      if (i.global_step == 15) throw Killed{};
    });
    CHECK_THROWS_AS(first.run(), Killed);
  }
  const json saved =
      nn::metadata_json(nn::read_safetensors(dir / "last.safetensors").metadata, nn::kStateKey);
  REQUIRE(saved.at("global_step") == 12);
  const std::vector<std::string> files = event_files(dir.dir.string());
  REQUIRE(files.size() == 1);
  CHECK(fs::path(files[0]).filename() == saved.at("events_file").get<std::string>());
  // Steps 13 to 15 wrote a train line (step 15) after the checkpoint: in the file, cut on resume.
  CHECK(fs::file_size(files[0]) > saved.at("events_bytes").get<uintmax_t>());

  tr::Trainer second(config, s.train, s.val, s.test, dir.dir.string());
  second.resume(dir.dir.string());
  REQUIRE(event_files(dir.dir.string()) == files);  // the same file, continued
  const std::vector<json> lines = metrics_lines(dir.dir.string());
  CHECK(records(files[0]).size() == 1 + lines.size() + 1);
  check_with_independent_reader(dir, dir.dir.string());
}

TEST_CASE("tensorboard: an event file that cannot be written is an Error naming it") {
  TempDir dir;
  CHECK_ERROR_CONTAINS(tr::EventWriter(dir / "no/such/folder/events.out.tfevents.1.x"),
                       "no/such/folder/events.out.tfevents.1.x", "TensorBoard event file");
  const std::string path = dir / "events.out.tfevents.1.x";
  {
    tr::EventWriter w(path);
    w.add_scalars(1, {{"train/loss", 0.5}});
    const uint64_t before = w.size();
    CHECK(before == fs::file_size(path));
    FileSizeLimit limit(before + 20);  // room for a record's header, not for the record
    CHECK_ERROR_CONTAINS(w.add_scalars(2, {{"train/loss", 0.25}, {"train/accuracy", 0.75}}), path,
                         "File too large", "the event was not added");
    CHECK(w.size() == before);
    CHECK(fs::file_size(path) == before);  // cut back to its last whole record
  }
  // Reopened, it goes on after its records (no second file_version).
  tr::EventWriter w(path);
  w.add_scalars(2, {{"train/loss", 0.25}});
  CHECK(records(path).size() == 3);
}
