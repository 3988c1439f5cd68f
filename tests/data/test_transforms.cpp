// nn/data/transforms: values against PyTorch / torchvision (numbers hard-coded below with the
// Python line that produced them, run with Debian's python3-torch 1.13 / torchvision 0.14), the
// per-example Rng's determinism, the random transforms' ranges, and from_config.
#include <set>

#include "nn/data/transforms.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace data = vitrine::nn::data;
using nlohmann::json;

namespace {

data::Image make_image(int64_t c, int64_t h, int64_t w, const std::vector<float>& pixels) {
  data::Image im;
  im.channels = c;
  im.height = h;
  im.width = w;
  im.pixels = pixels;
  REQUIRE(static_cast<int64_t>(pixels.size()) == c * h * w);
  return im;
}

/// [c, h, w] with pixel p = c * h * w index: 0, 1, 2, ...
data::Image iota_image(int64_t c, int64_t h, int64_t w) {
  std::vector<float> p(static_cast<size_t>(c * h * w));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i);
  return make_image(c, h, w, p);
}

/// The 3x4 test image x[y][x] = ((4y + x) * 7 % 11) / 10 of the Python lines below, and a second
/// channel 1 - 2x.
data::Image torch_image(int64_t channels) {
  std::vector<float> p;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 4; ++x) {
        const float v = static_cast<float>((y * 4 + x) * 7 % 11) / 10.0f;
        p.push_back(c == 0 ? v : 1 - 2 * v);
      }
  return make_image(channels, 3, 4, p);
}

void check_pixels(const data::Image& im, const std::vector<float>& expected, double tol = 1e-6) {
  REQUIRE(im.pixels.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("pixel " << i);
    CHECK(std::abs(im.pixels[i] - expected[i]) <= tol);
  }
}

data::Image random_image(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  return make_image(c, h, w, ops::rand({c, h, w}, g).to_vector<float>());
}

}  // namespace

TEST_CASE("transforms: Rng is a pure function of (seed, epoch, index)") {
  data::Rng a(7, 3, 11), b(7, 3, 11), other_seed(8, 3, 11), other_epoch(7, 4, 11),
      other_index(7, 3, 12);
  std::vector<uint32_t> wa, wb;
  for (int i = 0; i < 10; ++i) {
    wa.push_back(a.next_u32());
    wb.push_back(b.next_u32());
  }
  CHECK(wa == wb);
  // The first word is Philox at counter (epoch << 40 | index << 8 | 0) under key seed.
  CHECK(wa[0] == philox4x32(uint64_t{3} << 40 | uint64_t{11} << 8, 7)[0]);
  CHECK(wa[4] == philox4x32((uint64_t{3} << 40 | uint64_t{11} << 8) + 1, 7)[0]);
  CHECK(other_seed.next_u32() != wa[0]);
  CHECK(other_epoch.next_u32() != wa[0]);
  CHECK(other_index.next_u32() != wa[0]);

  data::Rng r(1, 0, 0);
  for (int i = 0; i < 100; ++i) {
    const double u = r.uniform();
    CHECK((u >= 0 && u < 1));
    const int64_t k = r.below(5);
    CHECK((k >= 0 && k < 5));
  }
  CHECK_ERROR_CONTAINS(data::Rng(0, 0, int64_t{1} << 32), "example index 4294967296");
  CHECK_ERROR_CONTAINS(data::Rng(0, -1, 0), "epoch -1");
}

TEST_CASE("transforms: resize without antialias matches F.interpolate bilinear") {
  const auto resize = [](const data::Image& im, int64_t h, int64_t w) {
    return data::resize(im, h, w, data::Interpolation::Bilinear, false);
  };
  // F.interpolate(img[None], size=(5, 3), mode="bilinear", align_corners=False)[0].flatten()
  // with x = torch.tensor([[((y*4+xx)*7 % 11)/10 for xx in range(4)] for y in range(3)]),
  // img = torch.stack([x, 1 - 2*x])  (rows upsampled, columns downsampled)
  check_pixels(
      resize(torch_image(2), 5, 3),
      {0.11666668206453323,   0.4999999701976776,   0.8833333849906921,   0.28333336114883423,
       0.5199999809265137,    0.7566666603088379,   0.5333333611488342,   0.550000011920929,
       0.5666666030883789,    0.34333333373069763,  0.5799999833106995,   0.26666656136512756,
       0.21666668355464935,   0.5999999642372131,   0.0666666254401207,   0.7666666507720947,
       5.364417887676609e-08, -0.766666829586029,   0.43333327770233154,  -0.03999999538064003,
       -0.5133333802223206,   -0.06666664779186249, -0.10000006854534149, -0.13333319127559662,
       0.3133333623409271,    -0.1600000113248825,  0.4666668176651001,   0.5666666626930237,
       -0.19999997317790985,  0.8666667342185974});
  // F.interpolate(x[None, None], size=(2, 7), mode="bilinear", align_corners=False).flatten()
  // (rows downsampled, columns upsampled)
  check_pixels(resize(torch_image(1), 2, 7),
               {0.15000000596046448, 0.3017857074737549, 0.5446428656578064, 0.512499988079071,
                0.48035722970962524, 0.7232143878936768, 0.8750000596046448, 0.22500000894069672,
                0.3767857253551483, 0.6196428537368774, 0.5874999761581421, 0.49642854928970337,
                0.26785707473754883, 0.125});
  // Same size: the image itself.
  const data::Image im = random_image(3, 5, 6, 1);
  CHECK(resize(im, 5, 6).pixels == im.pixels);
  CHECK(data::resize(im, 5, 6).pixels == im.pixels);  // antialiased too
}

TEST_CASE("transforms: resize agrees with ops::interpolate bilinear on random images") {
  const data::Image im = random_image(3, 7, 9, 2);
  for (auto item : {std::pair<int64_t, int64_t>{5, 4}, {11, 13}, {1, 1}, {28, 32}}) {
    const auto h = item.first;
    const auto w = item.second;
    INFO("size " << h << "x" << w);
    ops::InterpolateOptions o;
    o.size = {h, w};
    o.mode = "bilinear";
    Tensor ref = ops::interpolate(ops::from_vector(im.pixels, {1, 3, 7, 9}), o);
    const data::Image out = data::resize(im, h, w, data::Interpolation::Bilinear, false);
    CHECK(out.channels == 3);
    CHECK(out.height == h);
    CHECK(out.width == w);
    check_pixels(out, ref.to_vector<float>(), 1e-6);
  }
  CHECK_ERROR_CONTAINS(data::resize(im, 0, 3), "resize", "(0, 3)");
  CHECK_ERROR_CONTAINS(data::Resize(3, -1), "Resize", "(3, -1)");
}

TEST_CASE("transforms: center_crop rounds like torchvision and pads a larger crop") {
  const data::Image im = iota_image(1, 5, 6);  // values 0..29, row y holds 6y .. 6y + 5
  // TF.center_crop(torch.arange(30.).reshape(1, 5, 6), [2, 3]) -> top = round(1.5) = 2,
  // left = round(1.5) = 2 (Python rounds half to even)
  check_pixels(data::center_crop(im, 2, 3), {14, 15, 16, 20, 21, 22});
  // TF.center_crop(..., [4, 5]) -> top = round(0.5) = 0, left = round(0.5) = 0
  check_pixels(data::center_crop(im, 4, 5),
               {0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 18, 19, 20, 21, 22});
  // TF.center_crop(..., [3, 9]) -> columns padded 1 left, 2 right; top = round(1) = 1
  check_pixels(data::center_crop(im, 3, 9), {0,  6,  7, 8, 9, 10, 11, 0,  0,  0,  12, 13, 14, 15,
                                             16, 17, 0, 0, 0, 18, 19, 20, 21, 22, 23, 0,  0});
  // TF.center_crop(..., [8, 3]) -> rows padded 1 above, 2 below; left = round(1.5) = 2
  check_pixels(data::center_crop(im, 8, 3),
               {0, 0, 0, 2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22, 26, 27, 28, 0, 0, 0, 0, 0, 0});
  data::CenterCrop t(2, 2);
  CHECK((t.output_shape({3, 9, 9}) == data::ImageShape{3, 2, 2}));
  CHECK(t.describe() == "center_crop(2, 2)");
}

TEST_CASE("transforms: crop fills outside the image and keeps channels apart") {
  const data::Image im = iota_image(2, 2, 3);  // channel 0: 0..5, channel 1: 6..11
  data::Image out = data::crop(im, -1, 1, 3, 3, -1.0f);
  CHECK(out.channels == 2);
  check_pixels(out, {-1, -1, -1, 1, 2, -1, 4, 5, -1, -1, -1, -1, 7, 8, -1, 10, 11, -1});
  // Entirely outside: all fill.
  check_pixels(data::crop(im, 5, 5, 1, 2), {0, 0, 0, 0});
}

TEST_CASE("transforms: hflip and RandomHorizontalFlip") {
  const data::Image im = iota_image(2, 2, 3);
  check_pixels(data::hflip(im), {2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9});
  data::RandomHorizontalFlip never(0.0), always(1.0), half(0.5);
  int flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    data::Rng r0(5, 0, i), r1(5, 0, i), r2(5, 0, i);
    CHECK(never.apply(im, r0).pixels == im.pixels);
    CHECK(always.apply(im, r1).pixels == data::hflip(im).pixels);
    flipped += half.apply(im, r2).pixels != im.pixels;
  }
  CHECK(flipped > 430);
  CHECK(flipped < 570);
  // The flip decision is the Rng's first uniform() < p.
  for (int64_t i = 0; i < 20; ++i) {
    data::Rng r(5, 0, i), probe(5, 0, i);
    CHECK((half.apply(im, r).pixels != im.pixels) == (probe.uniform() < 0.5));
  }
  CHECK_ERROR_CONTAINS(data::RandomHorizontalFlip(1.5), "p must be in [0, 1]", "1.5");
}

TEST_CASE("transforms: normalize per channel, and a clear error on a channel mismatch") {
  const data::Image im = make_image(2, 1, 2, {0.5f, 1.0f, 0.0f, 0.25f});
  check_pixels(data::normalize(im, {0.5f, 0.25f}, {0.5f, 0.25f}), {0, 1, -1, 0});
  data::Normalize grey({0.2860f}, {0.3530f});
  data::Rng r(0, 0, 0);
  CHECK_ERROR_CONTAINS(grey.apply(im, r), "normalize", "1 values", "the image has 2 channels");
  CHECK_ERROR_CONTAINS(grey.output_shape({3, 4, 4}), "the image has 3 channels");
  CHECK_ERROR_CONTAINS(data::Normalize({0.5f, 0.5f}, {0.5f}), "Normalize", "got 2 and 1");
  CHECK_ERROR_CONTAINS(data::Normalize({0.5f}, {0.0f}), "Normalize", "non-zero");
  CHECK(grey.describe() == "normalize(mean [0.286], std [0.353])");
}

TEST_CASE("transforms: RandomCrop pads with zeros and takes every offset, deterministically") {
  const data::Image im = random_image(1, 6, 6, 3);
  data::RandomCrop t(6, 6, 2);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < 400; ++i) {
    data::Rng rng(9, 0, i), again(9, 0, i), probe(9, 0, i);
    const data::Image out = t.apply(im, rng);
    CHECK(out.pixels == t.apply(im, again).pixels);  // same (seed, epoch, index), same crop
    // The window is at (below(6 + 4 - 6 + 1), below(...)) in the padded image.
    const int64_t top = probe.below(5), left = probe.below(5);
    CHECK(out.pixels == data::crop(im, top - 2, left - 2, 6, 6, 0).pixels);
    offsets.insert({top, left});
  }
  CHECK(offsets.size() == 25);  // all 5 x 5 positions occur

  // No padding, same size: the image itself.
  data::Rng r(0, 0, 0);
  CHECK(data::RandomCrop(6, 6).apply(im, r).pixels == im.pixels);
  // A smaller window lies inside the image.
  const data::Image small = data::RandomCrop(3, 4).apply(im, r);
  CHECK(small.height == 3);
  CHECK(small.width == 4);
  CHECK_ERROR_CONTAINS(data::RandomCrop(11, 6, 2).apply(im, r), "random_crop",
                       "crop size (11, 6) is larger than the image (6, 6) with padding 2");
}

TEST_CASE("transforms: Compose is deterministic per (seed, epoch, index), epochs differ") {
  data::Compose c;
  c.add(std::make_shared<data::Resize>(8, 8))
      .add(std::make_shared<data::RandomCrop>(8, 8, 2))
      .add(std::make_shared<data::RandomHorizontalFlip>(0.5))
      .add(std::make_shared<data::Normalize>(std::vector<float>{0.5f, 0.5f},
                                             std::vector<float>{0.25f, 0.25f}));
  CHECK(c.random());
  CHECK(c.describe() ==
        "resize(8, 8) -> random_crop(8, 8, padding 2) -> hflip(p 0.5) -> "
        "normalize(mean [0.5, 0.5], std [0.25, 0.25])");
  CHECK((c.output_shape({2, 5, 7}) == data::ImageShape{2, 8, 8}));
  const data::Image im = random_image(2, 5, 7, 4);
  int differ_by_epoch = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const data::Image a = c(im, 42, 0, i), b = c(im, 42, 0, i), e1 = c(im, 42, 1, i);
    CHECK(a.pixels == b.pixels);
    CHECK(a.height == 8);
    differ_by_epoch += a.pixels != e1.pixels;
  }
  // 25 crops x 2 flips: an epoch repeats an example's augmentation with probability 1/50.
  CHECK(differ_by_epoch >= 17);
  // The pipeline by hand gives the same values.
  data::Rng rng(42, 0, 3);
  data::Image by_hand = data::resize(im, 8, 8);
  by_hand = data::RandomCrop(8, 8, 2).apply(by_hand, rng);
  by_hand = data::RandomHorizontalFlip(0.5).apply(by_hand, rng);
  by_hand = data::normalize(by_hand, {0.5f, 0.5f}, {0.25f, 0.25f});
  CHECK(c(im, 42, 0, 3).pixels == by_hand.pixels);

  CHECK_ERROR_CONTAINS(c(im), "random_crop(8, 8, padding 2) is random");
  data::Compose fixed({std::make_shared<data::CenterCrop>(3, 3)});
  CHECK_FALSE(fixed.random());
  CHECK(fixed(im).pixels == data::center_crop(im, 3, 3).pixels);
  CHECK(data::Compose().describe() == "identity");
  CHECK(data::Compose()(im).pixels == im.pixels);
}

TEST_CASE("transforms: from_config builds the train and eval pipelines") {
  const json j = json::parse(
      R"({"hflip": 0.5, "mean": [0.2860], "std": [0.3530], "resize": [32, 32],
          "random_crop": {"size": 28, "padding": 2}})");
  const data::Compose train = data::from_config(j, 1, true);
  const data::Compose eval = data::from_config(j, 1, false);
  CHECK(train.describe() ==
        "resize(32, 32) -> random_crop(28, 28, padding 2) -> hflip(p 0.5) -> "
        "normalize(mean [0.286], std [0.353])");
  CHECK(eval.describe() ==
        "resize(32, 32) -> center_crop(28, 28) -> normalize(mean [0.286], "
        "std [0.353])");
  CHECK_FALSE(eval.random());
  CHECK((train.output_shape({1, 28, 28}) == eval.output_shape({1, 28, 28})));

  // The eval pipeline's values: resize, centre crop, normalise.
  const data::Image im = random_image(1, 28, 28, 5);
  data::Image expect = data::center_crop(data::resize(im, 32, 32), 28, 28);
  expect = data::normalize(expect, {0.2860f}, {0.3530f});
  CHECK(eval(im).pixels == expect.pixels);

  CHECK(data::from_config(json::parse(R"({"center_crop": [4, 6], "random_crop": 3})"), 3, true)
            .describe() == "center_crop(4, 6) -> random_crop(3, 3, padding 0)");
  CHECK(data::from_config(json(nullptr), 3, true).describe() == "identity");
  CHECK(data::from_config(json::object(), 3, false).describe() == "identity");
}

TEST_CASE("transforms: from_config rejects bad keys and values with their names") {
  auto build = [](const char* text, int64_t channels = 1) {
    return data::from_config(json::parse(text), channels, true);
  };
  CHECK_ERROR_CONTAINS(build(R"({"resize": [32, 32], "rotate": 10})"), "unknown key \"rotate\"",
                       "known: resize, center_crop, random_crop, hflip, mean, std");
  CHECK_ERROR_CONTAINS(build(R"({"random_crop": {"size": 28, "pad": 2}})"),
                       "unknown key \"random_crop.pad\"");
  CHECK_ERROR_CONTAINS(build(R"({"random_crop": {"padding": 2}})"), "needs a \"size\"");
  CHECK_ERROR_CONTAINS(build(R"({"random_crop": {"size": 28, "padding": -1}})"),
                       "\"random_crop.padding\" must be an integer >= 0");
  CHECK_ERROR_CONTAINS(build(R"({"resize": [32]})"), "\"resize\" must be [height, width]", "[32]");
  CHECK_ERROR_CONTAINS(build(R"({"resize": "big"})"), "\"resize\"", "\"big\"");
  CHECK_ERROR_CONTAINS(build(R"({"center_crop": [0, 3]})"), "\"center_crop\"", "positive");
  CHECK_ERROR_CONTAINS(build(R"({"hflip": 2})"), "\"hflip\" must be a probability");
  CHECK_ERROR_CONTAINS(build(R"({"mean": [0.5]})"), "\"mean\" and \"std\" go together",
                       "only \"mean\"");
  CHECK_ERROR_CONTAINS(build(R"({"mean": [0.5], "std": [0.2]})", 3), "\"mean\" has 1 values",
                       "3 channels");
  CHECK_ERROR_CONTAINS(build(R"({"mean": [0.5], "std": ["x"]})"), "\"std\" must be a list");
  CHECK_ERROR_CONTAINS(build(R"([1, 2])"), "expected an object");
}
