// Dataset readers on small files written here (IDX raw and gzipped, CIFAR-10/100 binaries, PNG /
// BMP / JPEG class folders, a tiny-imagenet-shaped folder), every bad-data message, the real
// Fashion-MNIST files when they are installed, and data sets opened by name (open_dataset).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <zlib.h>

#include "nn/data/cifar.h"
#include "nn/data/idx.h"
#include "nn/data/image_folder.h"
#include "nn/data/open.h"
#include "nn/data/pasted.h"
#include "test_util.h"

using namespace vitrine::nn::data;
using vt_test::write_bmp;
using vt_test::write_jpg;
using vt_test::write_png;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

void write_bytes(const std::string& path, const Bytes& b) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

/// Writes b gzipped (zlib, as the real .gz files are).
void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

/// The stored pixel (r, c) of IDX test image i.
uint8_t idx_pixel(int i, int r, int c) {
  return static_cast<uint8_t>((i * 31 + r * 7 + c * 13) % 256);
}

Bytes idx_images(int count, int rows, int cols, uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(count));
  put_be32(b, static_cast<uint32_t>(rows));
  put_be32(b, static_cast<uint32_t>(cols));
  for (int i = 0; i < count; ++i)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) b.push_back(idx_pixel(i, r, c));
  return b;
}

Bytes idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

/// Pixel (c, y, x) of CIFAR test record r (global index over all files).
uint8_t cifar_pixel(int r, int c, int y, int x) {
  return static_cast<uint8_t>((r * 17 + c * 101 + y * 5 + x * 3) % 256);
}

/// CIFAR records with the given labels (one or two label bytes each), starting at record first.
Bytes cifar_records(const std::vector<std::vector<uint8_t>>& labels, int first) {
  Bytes b;
  for (size_t i = 0; i < labels.size(); ++i) {
    b.insert(b.end(), labels[i].begin(), labels[i].end());
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(cifar_pixel(first + static_cast<int>(i), c, y, x));
  }
  return b;
}

/// An interleaved (HWC) test image.
Bytes hwc_image(int w, int h, int comp, int seed) {
  Bytes b(static_cast<size_t>(w * h * comp));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 37 + seed * 11) % 256);
  return b;
}

/// Checks an RGB image against interleaved 8-bit pixels exactly (lossless formats).
void check_rgb(const Image& im, int w, int h, const Bytes& hwc, int comp) {
  REQUIRE(im.channels == 3);
  REQUIRE(im.width == w);
  REQUIRE(im.height == h);
  int bad = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const uint8_t v = hwc[static_cast<size_t>((y * w + x) * comp + (comp >= 3 ? c : 0))];
        if (im.at(c, y, x) != v / 255.0f) ++bad;
      }
  CHECK(bad == 0);
}

}  // namespace

// ---- IDX ------------------------------------------------------------------------------------

TEST_CASE("idx: raw files: size, labels, default classes and exact pixels") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(3, 4, 5));
  write_bytes(tmp / "labels", idx_labels({2, 0, 1}));
  IdxDataset ds(tmp / "images", tmp / "labels");
  CHECK(ds.size() == 3);
  CHECK(ds.height() == 4);
  CHECK(ds.width() == 5);
  CHECK(ds.source() == tmp / "images");
  CHECK(ds.classes() == std::vector<std::string>{"0", "1", "2"});
  CHECK(ds.labels() == std::vector<int64_t>{2, 0, 1});
  for (int i = 0; i < 3; ++i) {
    Example ex = ds.get(i);
    CHECK(ex.label == ds.labels()[static_cast<size_t>(i)]);
    REQUIRE(ex.image.channels == 1);
    REQUIRE(ex.image.height == 4);
    REQUIRE(ex.image.width == 5);
    REQUIRE(ex.image.pixels.size() == 20);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 5; ++c) CHECK(ex.image.at(0, r, c) == idx_pixel(i, r, c) / 255.0f);
  }
  CHECK(ds.get(0).image.at(0, 0, 0) == 0.0f);
  CHECK(ds.get(2).image.at(0, 0, 0) == 62 / 255.0f);
  CHECK_ERROR_CONTAINS(ds.get(3), "index 3 is out of range (size 3)");
  CHECK_ERROR_CONTAINS(ds.get(-1), "index -1 is out of range");
}

TEST_CASE("idx: gzipped files read the same as raw ones") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(4, 6, 3));
  write_bytes(tmp / "labels", idx_labels({1, 1, 0, 3}));
  write_gz(tmp / "images.gz", idx_images(4, 6, 3));
  write_gz(tmp / "labels.gz", idx_labels({1, 1, 0, 3}));
  CHECK(read_bytes(tmp / "images.gz")[0] == 0x1f);
  // Detected by content, not by name: a gzipped file without .gz and a raw one with it.
  fs::copy_file(tmp / "images.gz", tmp / "images-gz-no-suffix");
  fs::copy_file(tmp / "labels", tmp / "labels-raw.gz");
  IdxDataset raw(tmp / "images", tmp / "labels");
  IdxDataset gz(tmp / "images.gz", tmp / "labels.gz");
  IdxDataset mixed(tmp / "images-gz-no-suffix", tmp / "labels-raw.gz");
  for (const IdxDataset* ds : {&gz, &mixed}) {
    REQUIRE(ds->size() == 4);
    CHECK(ds->labels() == raw.labels());
    CHECK(ds->classes() == raw.classes());
    for (int i = 0; i < 4; ++i) CHECK(ds->get(i).image.pixels == raw.get(i).image.pixels);
  }
}

TEST_CASE("idx: transpose (EMNIST) swaps rows and columns") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(2, 4, 5));
  write_bytes(tmp / "labels", idx_labels({0, 1}));
  IdxOptions opt;
  opt.transpose = true;
  IdxDataset ds(tmp / "images", tmp / "labels", opt);
  CHECK(ds.height() == 5);
  CHECK(ds.width() == 4);
  for (int i = 0; i < 2; ++i) {
    Example ex = ds.get(i);
    REQUIRE(ex.image.height == 5);
    REQUIRE(ex.image.width == 4);
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 4; ++x) CHECK(ex.image.at(0, y, x) == idx_pixel(i, x, y) / 255.0f);
  }
}

TEST_CASE("idx: a class list names the labels and bounds them") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(3, 2, 2));
  write_bytes(tmp / "labels", idx_labels({0, 1, 2}));
  IdxOptions opt;
  opt.classes = {"cat", "dog", "bird"};
  IdxDataset ds(tmp / "images", tmp / "labels", opt);
  CHECK(ds.classes() == opt.classes);
  opt.classes = {"cat", "dog"};
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "images", tmp / "labels", opt), std::string(tmp / "labels"),
                       "label 2 of item 2 is out of range", "expected 0 to 1 (2 classes)");
}

TEST_CASE("idx: wrong magic numbers") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(2, 3, 3));
  write_bytes(tmp / "labels", idx_labels({0, 1}));
  // Images and labels swapped.
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "labels", tmp / "images"), std::string(tmp / "labels"),
                       "wrong magic number 0x00000801 (an IDX labels file)", "expected 0x00000803");
  write_bytes(tmp / "labels3", idx_labels({0, 1}, 0x00000803));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "images", tmp / "labels3"), "IDX labels file",
                       "wrong magic number 0x00000803", "expected 0x00000801");
  write_bytes(tmp / "png", {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "png", tmp / "labels"), std::string(tmp / "png"),
                       "wrong magic number 0x89504e47 (not an IDX file)");
  write_bytes(tmp / "float", idx_images(2, 3, 3, 0x00000d03));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "float", tmp / "labels"),
                       "0x00000d03 (an IDX file of type 0x0d with 3 dimensions)");
  write_gz(tmp / "magic.gz", idx_images(2, 3, 3, 0x00000804));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "magic.gz", tmp / "labels"), std::string(tmp / "magic.gz"),
                       "wrong magic number 0x00000804");
}

TEST_CASE("idx: truncated and oversized files") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "labels", idx_labels({0, 1, 2}));
  Bytes images = idx_images(3, 4, 4);

  Bytes cut(images.begin(), images.end() - 5);
  write_bytes(tmp / "cut", cut);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "cut", tmp / "labels"), std::string(tmp / "cut"),
                       "is truncated", "3 items of 16 bytes", "only 43 bytes follow",
                       "room for 2 items");
  write_gz(tmp / "cut.gz", cut);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "cut.gz", tmp / "labels"), std::string(tmp / "cut.gz"),
                       "is truncated", "43 bytes (decompressed)");

  // A header that promises more than 4 GiB is checked against the real size, not allocated.
  Bytes huge = idx_images(1, 1, 1);
  huge[4] = huge[5] = huge[6] = huge[7] = 0xff;    // count 2^32 - 1
  huge[8] = huge[9] = huge[10] = huge[11] = 0xff;  // rows 2^32 - 1
  write_bytes(tmp / "huge", huge);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "huge", tmp / "labels"), "is truncated",
                       "4294967295 items of 4294967295 bytes", "only 1 bytes follow");

  write_bytes(tmp / "tiny", {0, 0});
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "tiny", tmp / "labels"), std::string(tmp / "tiny"),
                       "truncated: 2 bytes, too short for a header");
  write_bytes(tmp / "header", Bytes(images.begin(), images.begin() + 10));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "header", tmp / "labels"),
                       "truncated: 10 bytes, its header needs 16");
  write_bytes(tmp / "empty", {});
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "empty", tmp / "labels"), "truncated: 0 bytes");

  Bytes labels_cut = idx_labels({0, 1, 2});
  labels_cut.pop_back();
  write_bytes(tmp / "labels_cut", labels_cut);
  write_bytes(tmp / "images", images);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "images", tmp / "labels_cut"),
                       std::string(tmp / "labels_cut"), "IDX labels file", "is truncated",
                       "3 items of 1 bytes");

  Bytes longer = images;
  longer.push_back(7);
  write_bytes(tmp / "longer", longer);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "longer", tmp / "labels"), std::string(tmp / "longer"),
                       "has 1 bytes after its 3 items of 16 bytes; expected exactly 48");

  // A gzip stream cut short, and one whose compressed data is damaged.
  write_gz(tmp / "whole.gz", images);
  Bytes gz = read_bytes(tmp / "whole.gz");
  write_bytes(tmp / "stream_cut.gz",
              Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "stream_cut.gz", tmp / "labels"),
                       std::string(tmp / "stream_cut.gz"), "gzip data is corrupt or truncated");
  Bytes damaged = gz;
  for (size_t i = 12; i < damaged.size() - 8; ++i) damaged[i] = 0xff;
  write_bytes(tmp / "damaged.gz", damaged);
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "damaged.gz", tmp / "labels"),
                       std::string(tmp / "damaged.gz"), "gzip data is corrupt or truncated");
}

TEST_CASE("idx: image count and label count differ") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "images", idx_images(3, 2, 2));
  write_bytes(tmp / "labels", idx_labels({0, 1}));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "images", tmp / "labels"), std::string(tmp / "images"),
                       std::string(tmp / "labels"), "3 images but 2 labels");
  write_bytes(tmp / "zero", idx_images(0, 2, 2));
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "zero", tmp / "labels"), "holds no items");
}

TEST_CASE("idx: missing files and the standard layouts") {
  vt_test::TempDir tmp;
  CHECK_ERROR_CONTAINS(IdxDataset(tmp / "nope", tmp / "labels"), std::string(tmp / "nope"),
                       "does not exist");
  CHECK_ERROR_CONTAINS(mnist(tmp / "no-dir"), "mnist: folder", "does not exist");
  CHECK_ERROR_CONTAINS(fashion_mnist(tmp.dir.string(), false), "fashion-mnist: neither",
                       "t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte' exists");

  write_gz(tmp / "train-images-idx3-ubyte.gz", idx_images(2, 28, 28));
  write_bytes(tmp / "train-labels-idx1-ubyte", idx_labels({9, 0}));  // raw works too
  auto fm = fashion_mnist(tmp.dir.string(), true);
  CHECK(fm->size() == 2);
  CHECK(fm->source() == tmp / "train-images-idx3-ubyte.gz");
  CHECK(fm->classes() == fashion_mnist_classes());
  CHECK(fm->classes()[9] == "Ankle boot");
  CHECK(fm->classes()[0] == "T-shirt/top");
  CHECK(mnist(tmp.dir.string())->classes() ==
        std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  CHECK(kmnist(tmp.dir.string())->classes()[9] == "wo");
  write_bytes(tmp / "train-labels-idx1-ubyte", idx_labels({10, 0}));
  CHECK_ERROR_CONTAINS(mnist(tmp.dir.string()), "label 10 of item 0 is out of range");
}

TEST_CASE("idx: EMNIST splits are transposed and named") {
  vt_test::TempDir tmp;
  write_gz(tmp / "emnist-letters-test-images-idx3-ubyte.gz", idx_images(2, 3, 4));
  write_gz(tmp / "emnist-letters-test-labels-idx1-ubyte.gz", idx_labels({1, 26}));
  auto ds = emnist(tmp.dir.string(), "letters", false);
  CHECK(ds->classes().size() == 27);
  CHECK(ds->classes()[0] == "N/A");
  CHECK(ds->classes()[ds->get(1).label] == "z");
  CHECK(ds->height() == 4);
  CHECK(ds->get(1).image.at(0, 3, 2) == idx_pixel(1, 2, 3) / 255.0f);
  write_gz(tmp / "emnist-balanced-train-images-idx3-ubyte.gz", idx_images(1, 2, 2));
  write_gz(tmp / "emnist-balanced-train-labels-idx1-ubyte.gz", idx_labels({46}));
  auto balanced = emnist(tmp.dir.string(), "balanced");
  REQUIRE(balanced->classes().size() == 47);
  CHECK(balanced->classes()[36] == "a");
  CHECK(balanced->classes()[46] == "t");
  CHECK_ERROR_CONTAINS(emnist(tmp.dir.string(), "bogus"), "unknown split 'bogus'");
}

// ---- CIFAR ----------------------------------------------------------------------------------

TEST_CASE("cifar: CIFAR-10 batches: sizes, labels, pixels and classes") {
  vt_test::TempDir tmp;
  const std::string dir = tmp / "cifar-10-batches-bin";
  int record = 0;
  std::vector<int64_t> expected;
  for (int b = 1; b <= 5; ++b) {
    std::vector<std::vector<uint8_t>> labels = {{static_cast<uint8_t>(b)},
                                                {static_cast<uint8_t>((b * 3) % 10)}};
    write_bytes(dir + "/data_batch_" + std::to_string(b) + ".bin", cifar_records(labels, record));
    for (auto& l : labels) expected.push_back(l[0]);
    record += 2;
  }
  write_bytes(dir + "/test_batch.bin", cifar_records({{3}, {9}, {0}}, 100));

  for (const std::string& where : {dir, tmp.dir.string()}) {  // the folder or its parent
    auto train = cifar10(where, true);
    REQUIRE(train->size() == 10);
    CHECK(train->labels() == expected);
    CHECK(train->source() == dir);
    CHECK(train->classes().size() == 10);
    CHECK(train->classes()[0] == "airplane");
    CHECK(train->classes()[9] == "truck");
  }
  auto train = cifar10(dir, true);
  for (int r : {0, 3, 9}) {
    Example ex = train->get(r);
    CHECK(ex.label == expected[static_cast<size_t>(r)]);
    REQUIRE(ex.image.channels == 3);
    REQUIRE(ex.image.height == 32);
    REQUIRE(ex.image.width == 32);
    int bad = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          if (ex.image.at(c, y, x) != cifar_pixel(r, c, y, x) / 255.0f) ++bad;
    CHECK(bad == 0);
  }
  auto test = cifar10(dir, false);
  CHECK(test->size() == 3);
  CHECK(test->labels() == std::vector<int64_t>{3, 9, 0});
  CHECK(test->get(1).image.at(2, 31, 31) == cifar_pixel(101, 2, 31, 31) / 255.0f);
  CHECK_ERROR_CONTAINS(test->get(3), "index 3 is out of range (size 3)");

  write_text(dir + "/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\r\n\n\n");
  auto named = cifar10(dir, false);
  CHECK(named->classes() ==
        std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
  write_text(dir + "/batches.meta.txt", "a\nb\nc\nd\n");
  CHECK_ERROR_CONTAINS(cifar10(dir, false), "test_batch.bin", "record 1 has label 9",
                       "expected 0 to 3 (4 classes, names from", "batches.meta.txt");
}

TEST_CASE("cifar: CIFAR-100 fine and coarse labels") {
  vt_test::TempDir tmp;
  write_bytes(tmp / "train.bin", cifar_records({{4, 30}, {19, 99}, {0, 0}}, 0));
  auto fine = cifar100(tmp.dir.string(), true);
  REQUIRE(fine->size() == 3);
  CHECK(fine->labels() == std::vector<int64_t>{30, 99, 0});
  CHECK(fine->classes().size() == 100);
  CHECK(fine->classes()[0] == "apple");
  CHECK(fine->classes()[30] == "dolphin");
  CHECK(fine->classes()[99] == "worm");
  CHECK(fine->get(2).image.at(1, 5, 7) == cifar_pixel(2, 1, 5, 7) / 255.0f);
  auto coarse = cifar100(tmp.dir.string(), true, /*coarse=*/true);
  CHECK(coarse->labels() == std::vector<int64_t>{4, 19, 0});
  CHECK(coarse->classes().size() == 20);
  CHECK(coarse->classes()[19] == "vehicles_2");
  CHECK(coarse->get(1).image.pixels == fine->get(1).image.pixels);

  std::string names;
  for (int i = 0; i < 100; ++i) names += fmt::format("n{}\n", i);
  write_text(tmp / "fine_label_names.txt", names);
  CHECK(cifar100(tmp.dir.string(), true)->classes()[99] == "n99");
  fs::create_directories(tmp / "parent/cifar-100-binary");
  fs::copy_file(tmp / "train.bin", tmp / "parent/cifar-100-binary/train.bin");
  CHECK(cifar100(tmp / "parent", true)->size() == 3);

  write_bytes(tmp / "test.bin", cifar_records({{0, 100}}, 0));
  CHECK_ERROR_CONTAINS(cifar100(tmp.dir.string(), false), "test.bin",
                       "record 0 has label 100; expected 0 to 99");
  write_bytes(tmp / "test.bin", cifar_records({{20, 1}}, 0));
  CHECK_ERROR_CONTAINS(cifar100(tmp.dir.string(), false, true),
                       "record 0 has label 20; expected 0 to 19 (20 classes, names standard)");
}

TEST_CASE("cifar: truncated, empty and missing files") {
  vt_test::TempDir tmp;
  Bytes two = cifar_records({{1}, {2}}, 0);
  write_bytes(tmp / "test_batch.bin", Bytes(two.begin(), two.end() - 100));
  CHECK_ERROR_CONTAINS(cifar10(tmp.dir.string(), false), "test_batch.bin", "is truncated",
                       "6046 bytes is not a whole number of 3073-byte records",
                       "(1 label byte + 3072 pixel bytes)", "the last record has 2973 bytes");
  // CIFAR-100 records are 3074 bytes: a CIFAR-10 file of two records is not a whole number.
  write_bytes(tmp / "test.bin", two);
  CHECK_ERROR_CONTAINS(cifar100(tmp.dir.string(), false), "test.bin",
                       "3074-byte records (2 label bytes + 3072 pixel bytes)");
  write_bytes(tmp / "test_batch.bin", {});
  CHECK_ERROR_CONTAINS(cifar10(tmp.dir.string(), false), "test_batch.bin' is empty");

  write_bytes(tmp / "data_batch_1.bin", two);
  write_bytes(tmp / "data_batch_2.bin", two);
  CHECK_ERROR_CONTAINS(cifar10(tmp.dir.string(), true), "data_batch_3.bin' is missing");
  CHECK_ERROR_CONTAINS(cifar10(tmp / "nowhere", true), "cifar10: folder", "does not exist");
  fs::create_directories(tmp / "other");
  CHECK_ERROR_CONTAINS(cifar10(tmp / "other", false), "'test_batch.bin' is missing",
                       "cifar-10-batches-bin/test_batch.bin");
  CHECK_ERROR_CONTAINS(cifar100(tmp / "other", true), "'train.bin' is missing");
}

// ---- image folders --------------------------------------------------------------------------

TEST_CASE("image_folder: classes, files, sizes and exact lossless pixels") {
  vt_test::TempDir tmp;
  const std::string root = tmp / "root";
  Bytes a = hwc_image(5, 4, 3, 1), b = hwc_image(3, 6, 3, 2), g = hwc_image(4, 4, 1, 3),
        rgba = hwc_image(2, 3, 4, 4), nested = hwc_image(2, 2, 3, 5);
  write_png(root + "/zebra/b.png", 5, 4, 3, a);
  write_bmp(root + "/zebra/a.Bmp", 3, 6, 3, b);
  write_png(root + "/ant/grey.PNG", 4, 4, 1, g);
  write_png(root + "/ant/sub/rgba.png", 2, 3, 4, rgba);
  write_png(root + "/ant/nested.png", 2, 2, 3, nested);
  write_text(root + "/ant/notes.txt", "not an image");
  write_png(root + "/ant/.hidden.png", 2, 2, 3, nested);
  write_png(root + "/.ipynb_checkpoints/x.png", 2, 2, 3, nested);
  write_text(root + "/README", "a file in root, not a class");

  ImageFolder ds(root);
  CHECK(ds.classes() == std::vector<std::string>{"ant", "zebra"});
  CHECK(ds.source() == root);
  REQUIRE(ds.size() == 5);
  CHECK(ds.files() == std::vector<std::string>{root + "/ant/grey.PNG", root + "/ant/nested.png",
                                               root + "/ant/sub/rgba.png", root + "/zebra/a.Bmp",
                                               root + "/zebra/b.png"});
  CHECK(ds.labels() == std::vector<int64_t>{0, 0, 0, 1, 1});
  Example e0 = ds.get(0);
  CHECK(e0.label == 0);
  check_rgb(e0.image, 4, 4, g, 1);  // grey replicated into R, G, B
  check_rgb(ds.get(1).image, 2, 2, nested, 3);
  check_rgb(ds.get(2).image, 2, 3, rgba, 4);  // alpha dropped
  Example e3 = ds.get(3);
  CHECK(e3.label == 1);
  check_rgb(e3.image, 3, 6, b, 3);
  check_rgb(ds.get(4).image, 5, 4, a, 3);
  CHECK_ERROR_CONTAINS(ds.get(5), "index 5 is out of range (size 5)");
}

TEST_CASE("image_folder: channels 1 gives ITU-R 601 luma, grey stays exact") {
  vt_test::TempDir tmp;
  const std::string root = tmp / "root";
  Bytes rgb = hwc_image(3, 2, 3, 7), g = hwc_image(2, 2, 1, 8);
  write_png(root + "/c/a.png", 3, 2, 3, rgb);
  write_png(root + "/c/b.png", 2, 2, 1, g);
  ImageFolderOptions opt;
  opt.channels = 1;
  ImageFolder ds(root, opt);
  Image luma = ds.get(0).image;
  REQUIRE(luma.channels == 1);
  REQUIRE(luma.height == 2);
  REQUIRE(luma.width == 3);
  for (int i = 0; i < 6; ++i) {
    const double want =
        (0.299 * rgb[static_cast<size_t>(3 * i)] + 0.587 * rgb[static_cast<size_t>(3 * i + 1)] +
         0.114 * rgb[static_cast<size_t>(3 * i + 2)]) /
        255.0;
    CHECK(luma.pixels[static_cast<size_t>(i)] == doctest::Approx(want).epsilon(1e-6));
  }
  Image grey = ds.get(1).image;
  REQUIRE(grey.channels == 1);
  for (int i = 0; i < 4; ++i)
    CHECK(grey.pixels[static_cast<size_t>(i)] == g[static_cast<size_t>(i)] / 255.0f);
  opt.channels = 2;
  CHECK_ERROR_CONTAINS(ImageFolder(root, opt), "channels must be 1 or 3, got 2");
}

TEST_CASE("image_folder: JPEG images decode close to what was written") {
  vt_test::TempDir tmp;
  const std::string root = tmp / "root";
  Bytes flat(8 * 8 * 3);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = i % 3 == 0 ? 200 : i % 3 == 1 ? 100 : 50;
  write_jpg(root + "/c/a.jpg", 8, 8, 3, flat);
  write_jpg(root + "/c/b.JPEG", 8, 8, 3, flat);
  ImageFolder ds(root);
  REQUIRE(ds.size() == 2);
  for (int i = 0; i < 2; ++i) {
    Image im = ds.get(i).image;
    REQUIRE(im.channels == 3);
    REQUIRE(im.height == 8);
    REQUIRE(im.width == 8);
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        CHECK(std::abs(im.at(0, y, x) - 200 / 255.0) < 4 / 255.0);
        CHECK(std::abs(im.at(1, y, x) - 100 / 255.0) < 4 / 255.0);
        CHECK(std::abs(im.at(2, y, x) - 50 / 255.0) < 4 / 255.0);
      }
  }
}

TEST_CASE("image_folder: get is safe from several threads") {
  vt_test::TempDir tmp;
  const std::string root = tmp / "root";
  for (int i = 0; i < 8; ++i) {
    write_png(root + "/p/" + std::to_string(i) + ".png", 6 + i, 5, 3, hwc_image(6 + i, 5, 3, i));
    write_jpg(root + "/j/" + std::to_string(i) + ".jpg", 16, 8 + i, 3, hwc_image(16, 8 + i, 3, i));
  }
  write_text(root + "/p/broken.png", "not a png");
  ImageFolder ds(root);
  REQUIRE(ds.size() == 17);
  std::vector<std::vector<float>> serial;
  for (int i = 0; i < 16; ++i) serial.push_back(ds.get(i).image.pixels);
  std::vector<int> mismatches(4, 0), errors(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (int i = 0; i < 17; ++i) {
          const int k = (i + t * 5) % 17;
          if (k < 16) {
            if (ds.get(k).image.pixels != serial[static_cast<size_t>(k)]) ++mismatches[t];
            continue;
          }
          try {
            (void)ds.get(k);  // p/broken.png, sorted last; its message must name it
          } catch (const vitrine::Error& e) {
            if (std::string(e.what()).find("broken.png: not a PNG, JPEG or BMP") !=
                std::string::npos)
              ++errors[t];
          }
        }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    CHECK(mismatches[t] == 0);
    CHECK(errors[t] == 5);
  }
}

TEST_CASE("image_folder: bad folders and undecodable images") {
  vt_test::TempDir tmp;
  CHECK_ERROR_CONTAINS(ImageFolder(tmp / "missing"), "root folder", std::string(tmp / "missing"),
                       "does not exist");
  write_text(tmp / "file", "x");
  CHECK_ERROR_CONTAINS(ImageFolder(tmp / "file"), "is not a folder");
  fs::create_directories(tmp / "noclasses");
  write_text(tmp / "noclasses/a.png", "x");
  CHECK_ERROR_CONTAINS(ImageFolder(tmp / "noclasses"), "has no class sub-folders",
                       "expected root/<class>/<image>");

  const std::string root = tmp / "root";
  write_png(root + "/cat/a.png", 2, 2, 3, hwc_image(2, 2, 3, 0));
  fs::create_directories(root + "/dog");
  write_text(root + "/dog/readme.txt", "no images here");
  CHECK_ERROR_CONTAINS(ImageFolder(root), "class folder", std::string(root + "/dog' is empty"),
                       ".png, .jpg, .jpeg, .bmp");

  fs::remove_all(root + "/dog");
  write_text(root + "/cat/bad.png", "this is not a png");
  write_bytes(root + "/cat/empty.jpg", {});
  Bytes png = read_bytes(root + "/cat/a.png");
  write_bytes(root + "/cat/cut.png", Bytes(png.begin(), png.begin() + 40));
  ImageFolder ds(root);
  REQUIRE(ds.size() == 4);  // a.png, bad.png, cut.png, empty.jpg
  CHECK(ds.get(0).image.width == 2);
  CHECK_ERROR_CONTAINS(ds.get(1), "image_folder", std::string(root + "/cat/bad.png"),
                       "not a PNG, JPEG or BMP file (it starts with \"this is \")");
  CHECK_ERROR_CONTAINS(ds.get(2), std::string(root + "/cat/cut.png"), "cannot decode the PNG file");
  CHECK_ERROR_CONTAINS(ds.get(3), std::string(root + "/cat/empty.jpg"), "the image file is empty");
  fs::remove(root + "/cat/a.png");
  CHECK_ERROR_CONTAINS(ds.get(0), "cannot read the image", std::string(root + "/cat/a.png"));
}

// ---- tiny-imagenet --------------------------------------------------------------------------

namespace {

/// A tiny-imagenet-200-shaped folder: 3 classes (listed unsorted), 2 training images each,
/// 4 validation images.
std::string make_tiny_imagenet(const vt_test::TempDir& tmp) {
  const std::string root = tmp / "tiny-imagenet-200";
  write_text(root + "/wnids.txt", "n03\nn01\nn02\n");
  write_text(root + "/words.txt",
             "n00\tentity\nn01\tgoldfish, Carassius auratus\nn02\tcrane\nn03\tcrane, derrick\n");
  for (const char* w : {"n01", "n02", "n03"}) {
    const std::string dir = root + "/train/" + w;
    for (int i = 0; i < 2; ++i)
      write_jpg(dir + "/images/" + w + "_" + std::to_string(i) + ".JPEG", 4, 4, 3,
                hwc_image(4, 4, 3, i));
    write_text(dir + "/" + w + "_boxes.txt", std::string(w) + "_0.JPEG\t0\t0\t3\t3\n");
  }
  const char* val[][2] = {
      {"val_0.JPEG", "n02"}, {"val_1.JPEG", "n01"}, {"val_10.JPEG", "n03"}, {"val_2.JPEG", "n02"}};
  std::string ann;
  for (auto& v : val) {
    write_jpg(root + "/val/images/" + v[0], 4, 4, 3, hwc_image(4, 4, 3, 9));
    ann += std::string(v[0]) + "\t" + v[1] + "\t0\t0\t3\t3\n";
  }
  write_text(root + "/val/val_annotations.txt", ann);
  return root;
}

}  // namespace

TEST_CASE("tiny_imagenet: train and val layouts, classes from wnids.txt and words.txt") {
  vt_test::TempDir tmp;
  const std::string root = make_tiny_imagenet(tmp);
  auto train = tiny_imagenet(root, true);
  // Sorted WordNet ids; first synonyms; "crane" is shared, so both get their id.
  CHECK(train->classes() == std::vector<std::string>{"goldfish", "crane (n02)", "crane (n03)"});
  CHECK(train->source() == root + "/train");
  REQUIRE(train->size() == 6);
  CHECK(train->labels() == std::vector<int64_t>{0, 0, 1, 1, 2, 2});
  CHECK(train->files()[2] == root + "/train/n02/images/n02_0.JPEG");
  Example ex = train->get(5);
  CHECK(ex.label == 2);
  CHECK(ex.image.channels == 3);
  CHECK(ex.image.height == 4);

  auto val = tiny_imagenet(root, false);
  CHECK(val->classes() == train->classes());
  REQUIRE(val->size() == 4);
  CHECK(val->files() == std::vector<std::string>{
                            root + "/val/images/val_0.JPEG", root + "/val/images/val_1.JPEG",
                            root + "/val/images/val_10.JPEG", root + "/val/images/val_2.JPEG"});
  CHECK(val->labels() == std::vector<int64_t>{1, 0, 2, 1});
  ImageFolderOptions grey;
  grey.channels = 1;
  CHECK(tiny_imagenet(root, false, grey)->get(0).image.channels == 1);

  fs::remove(root + "/words.txt");
  CHECK(tiny_imagenet(root, true)->classes() == std::vector<std::string>{"n01", "n02", "n03"});
}

TEST_CASE("tiny_imagenet: missing files, empty folders and bad annotations") {
  vt_test::TempDir tmp;
  CHECK_ERROR_CONTAINS(tiny_imagenet(tmp / "nowhere", true), "root folder", "does not exist");
  const std::string root = make_tiny_imagenet(tmp);
  const std::string ann = root + "/val/val_annotations.txt";

  write_text(ann, "val_0.JPEG\tn02\t0\t0\t3\t3\nval_1.JPEG\tn09\t0\t0\t3\t3\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), std::string(ann), "line 2",
                       "image 'val_1.JPEG' has unknown class 'n09'", "wnids.txt");
  write_text(ann, "val_0.JPEG\tn02\t0\t0\t3\t3\n\nval_7.JPEG\tn01\t0\t0\t3\t3\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), std::string(ann), "line 3",
                       "val/images/val_7.JPEG", "does not exist");
  write_text(ann, "val_0.JPEG n02 0 0 3 3\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), std::string(ann), "line 1",
                       "expected 'file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1'",
                       "got 'val_0.JPEG n02 0 0 3 3'");
  write_text(ann, "val_0.JPEG\tn02\nval_0.JPEG\tn02\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), "line 2", "'val_0.JPEG' is listed twice");
  write_text(ann, "\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), std::string(ann), "holds no annotations");
  fs::remove(ann);
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, false), std::string(ann), "is missing");

  for (const auto& e : fs::directory_iterator(root + "/train/n02/images")) fs::remove(e.path());
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, true), "class folder",
                       std::string(root + "/train/n02/images' is empty"));
  fs::remove_all(root + "/train/n02");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, true), "class folder",
                       std::string(root + "/train/n02/images' is missing"), "'n02' is in");
  write_text(root + "/wnids.txt", "n01\nn01\n");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, true), "wnids.txt' lists 'n01' twice");
  fs::remove(root + "/wnids.txt");
  CHECK_ERROR_CONTAINS(tiny_imagenet(root, true), std::string(root + "/wnids.txt' is missing"));
}

// ---- the real Fashion-MNIST -----------------------------------------------------------------

TEST_CASE("fashion-mnist: the installed files, when present") {
  const std::string dir = fashion_mnist_dir();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    if (!fs::exists(fs::path(dir) / f)) {
      vt_test::skip(
          "Fashion-MNIST is not installed in " + dir + " (" + std::string(f) +
          " is missing; install Debian's dataset-fashion-mnist or set VITRINE_FASHION_MNIST)");
      return;
    }
  auto train = fashion_mnist(dir, true);
  auto test = fashion_mnist(dir, false);
  CHECK(train->size() == 60000);
  CHECK(test->size() == 10000);
  CHECK(train->height() == 28);
  CHECK(train->width() == 28);
  std::vector<int> histogram(10, 0);
  for (int64_t l : train->labels()) ++histogram[static_cast<size_t>(l)];
  for (int c = 0; c < 10; ++c) CHECK(histogram[static_cast<size_t>(c)] == 6000);
  Example first = train->get(0);
  CHECK(first.label == 9);
  CHECK(train->classes()[static_cast<size_t>(first.label)] == "Ankle boot");
  REQUIRE(first.image.pixels.size() == 784);
  float lo = 1, hi = 0;
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{59999}})
    for (float v : train->get(i).image.pixels) lo = std::min(lo, v), hi = std::max(hi, v);
  for (float v : test->get(9999).image.pixels) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo == 0.0f);
  CHECK(hi <= 1.0f);
  CHECK(hi > 0.5f);
}

// ---- data sets by name (open.h) ---------------------------------------------------------------

namespace {

/// A Fashion-MNIST-named folder of 28x28 IDX files: n_train and n_test images.
void write_fmnist_folder(const std::string& dir, int n_train, int n_test) {
  std::vector<uint8_t> train_labels, test_labels;
  for (int i = 0; i < n_train; ++i) train_labels.push_back(static_cast<uint8_t>(i % 10));
  for (int i = 0; i < n_test; ++i) test_labels.push_back(static_cast<uint8_t>((i + 3) % 10));
  write_bytes(dir + "/train-images-idx3-ubyte", idx_images(n_train, 28, 28));
  write_bytes(dir + "/train-labels-idx1-ubyte", idx_labels(train_labels));
  write_gz(dir + "/t10k-images-idx3-ubyte.gz", idx_images(n_test, 28, 28));
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", idx_labels(test_labels));
}

}  // namespace

TEST_CASE("open_dataset: IDX data sets by name, their sizes and the pasted canvases") {
  vt_test::TempDir tmp;
  write_fmnist_folder(tmp / "fm", 12, 5);
  DatasetOptions o;
  o.path = tmp / "fm";
  DatasetFiles f = open_dataset(o);
  CHECK(f.path == tmp / "fm");
  REQUIRE(f.train);
  CHECK(f.train->size() == 12);
  CHECK(f.test->size() == 5);
  CHECK(f.test->classes().front() == "T-shirt/top");
  CHECK(f.test->get(0).label == 3);
  CHECK(image_size(o) == std::pair<int64_t, int64_t>{28, 28});
  CHECK(open_dataset(o, false).train == nullptr);  // the test file alone

  o.name = "mnist";
  CHECK(open_dataset(o).test->classes().front() == "0");

  o.name = "fashion-mnist-pasted";
  o.pasted.canvas = 44;
  o.pasted.seed = 7;
  f = open_dataset(o);
  CHECK(image_size(o) == std::pair<int64_t, int64_t>{44, 44});
  const Example e = f.test->get(0);
  CHECK(e.image.height == 44);
  CHECK(e.image.width == 44);
  // the test canvases are drawn with seed + 1: the same item pasted elsewhere than by seed 7
  PastedOptions same = o.pasted;
  same.seed = 8;
  PastedObjects by_hand(fashion_mnist(tmp / "fm", false), same);
  CHECK(by_hand.get(0).image.pixels == e.image.pixels);
}

TEST_CASE("open_dataset: an image folder, split 10% for its test set by a seed") {
  vt_test::TempDir tmp;
  const std::string root = tmp / "photos";
  for (int i = 0; i < 10; ++i) {
    write_png(root + "/cat/" + std::to_string(i) + ".png", 3, 2, 3, hwc_image(3, 2, 3, i));
    write_png(root + "/dog/" + std::to_string(i) + ".png", 3, 2, 3, hwc_image(3, 2, 3, 50 + i));
  }
  DatasetOptions o;
  o.name = "imagefolder";
  o.path = root;
  o.split_seed = 4;
  const DatasetFiles f = open_dataset(o);
  CHECK(f.train->size() == 18);
  CHECK(f.test->size() == 2);
  CHECK(f.test->classes() == std::vector<std::string>{"cat", "dog"});
  CHECK(f.test->get(0).image.channels == 3);
  CHECK(image_size(o) == std::pair<int64_t, int64_t>{0, 0});  // any size
  // the same seed, the same split; grey when asked
  o.channels = 1;
  const DatasetFiles g = open_dataset(o);
  CHECK(g.test->get(0).image.channels == 1);
  CHECK(g.test->get(1).label == f.test->get(1).label);
  // train/ and test/ folders are used as they are
  write_png(tmp / "split/train/a/x.png", 2, 2, 3, hwc_image(2, 2, 3, 1));
  write_png(tmp / "split/test/a/y.png", 2, 2, 3, hwc_image(2, 2, 3, 2));
  o.path = tmp / "split";
  CHECK(open_dataset(o).test->size() == 1);
  // The same class folders opened as a data set of files (vitrine-train's default, Fashion-MNIST):
  // the reader's error, then how to read them as an image folder.
  o.name = "fashion-mnist";
  o.path = root;
  CHECK_ERROR_CONTAINS(open_dataset(o), "fashion-mnist: neither", "holds folders",
                       "--set data.dataset=imagefolder", "configs/imagefolder.json");
  o.name = "cifar10";
  CHECK_ERROR_CONTAINS(open_dataset(o), "data.dataset=imagefolder");
  // A folder without sub-folders keeps the reader's error alone.
  o.name = "fashion-mnist";
  o.path = root + "/cat";
  try {
    open_dataset(o);
    FAIL("open_dataset took a folder of PNGs as Fashion-MNIST");
  } catch (const vitrine::Error& e) {
    CHECK(std::string(e.what()).find("fashion-mnist: neither") != std::string::npos);
    CHECK(std::string(e.what()).find("imagefolder") == std::string::npos);
  }
}

TEST_CASE("open_dataset: bad names, folders and options say what was expected") {
  vt_test::TempDir tmp;
  DatasetOptions o;
  o.name = "imagenet";
  CHECK_ERROR_CONTAINS(open_dataset(o), "unknown data set \"imagenet\"",
                       "fashion-mnist, mnist, cifar10, cifar100, imagefolder");
  o.name = "cifar10";
  CHECK_ERROR_CONTAINS(open_dataset(o), "cifar10 has no default folder",
                       "data_batch_1.bin ... test_batch.bin");
  o.path = tmp / "nowhere";
  CHECK_ERROR_CONTAINS(open_dataset(o), "cifar10 folder", "does not exist");
  o.name = "imagefolder";
  o.path = tmp.dir.string();
  o.channels = 4;
  CHECK_ERROR_CONTAINS(open_dataset(o), "1 (grey) or 3 (RGB) channels, not 4");

  CHECK_ERROR_CONTAINS(pasted_options_from_json({{"canvs", 64}}),
                       "unknown key \"data.pasted.canvs\"", "canvas, min_scale");
  CHECK_ERROR_CONTAINS(pasted_options_from_json({{"count", "many"}}), "data.pasted.count",
                       "\"many\"");
  CHECK_ERROR_CONTAINS(pasted_options_from_json(3), "data.pasted must be an object");
  const PastedOptions p = pasted_options_from_json({{"canvas", 80}, {"_note", "x"}});
  CHECK(p.canvas == 80);
  CHECK(p.distractors == "fragments");  // defaults kept

  // a data section as vitrine-train writes it
  const DatasetOptions d = dataset_options_from_json({{"dataset", "fashion-mnist-pasted"},
                                                      {"path", "/x"},
                                                      {"pasted", {{"canvas", 50}}},
                                                      {"batch_size", 64}},
                                                     1, 9);
  CHECK(d.name == "fashion-mnist-pasted");
  CHECK(d.path == "/x");
  CHECK(d.pasted.canvas == 50);
  CHECK(d.split_seed == 9);
  CHECK_ERROR_CONTAINS(dataset_options_from_json({{"path", "/x"}}, 1, 0),
                       "a data section with a \"dataset\" name");
}
