// nn/data/pasted: PastedObjects on a small in-memory set of items whose pixels are known (each
// item one constant value, so every pixel of a canvas says where it came from): the item lands
// in its box at its scale, everything outside the box is a distractor, fragments never touch the
// box and come from other items, the draw order of pasted.h, determinism per index and across
// threads, and every error; then the real Fashion-MNIST when it is installed.
#include <filesystem>
#include <set>
#include <thread>

#include "nn/data/idx.h"
#include "nn/data/pasted.h"
#include "nn/data/transforms.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace data = vitrine::nn::data;

namespace {

/// n items of size x size, label i % 3; item i is the value value(i) on a border of `border`
/// zeros (border 0: the whole item).
class Items : public data::Dataset {
 public:
  Items(int64_t n, int64_t size = 6, int64_t border = 0, int64_t channels = 1)
      : n_(n), size_(size), border_(border), channels_(channels) {}
  static float value(int64_t i) { return 0.05f + 0.01f * static_cast<float>(i); }
  int64_t size() const override { return n_; }
  data::Example get(int64_t i) const override {
    data::Example e;
    e.label = i % 3;
    e.image.channels = channels_, e.image.height = size_, e.image.width = size_;
    e.image.pixels.assign(static_cast<size_t>(channels_ * size_ * size_), 0.0f);
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t y = border_; y < size_ - border_; ++y)
        for (int64_t x = border_; x < size_ - border_; ++x) e.image.at(c, y, x) = value(i);
    if (i == odd_one_) e.image.height += 1, e.image.pixels.resize(e.image.pixels.size() + 6);
    return e;
  }
  std::vector<std::string> classes() const override { return {"a", "b", "c"}; }
  std::string source() const override { return "items"; }
  int64_t odd_one_ = -1;  // an item of another shape, for the error

 private:
  int64_t n_, size_, border_, channels_;
};

/// Equal up to the rounding of a bilinear resize (w0 v + w1 v is v give or take an ulp).
bool near(float a, float b) { return std::abs(a - b) <= 1e-5f; }

/// The item whose value v is (-1: none, a zero pixel).
int64_t which_item(float v, int64_t n) {
  if (v == 0) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (near(v, Items::value(i))) return i;
  return -2;  // no item's value: a blend or noise
}

data::PastedOptions options(const std::string& distractors, int64_t canvas = 20) {
  data::PastedOptions o;
  o.canvas = canvas;
  o.min_scale = 1.0;
  o.max_scale = 1.5;
  o.distractors = distractors;
  o.count = 3;
  o.seed = 5;
  return o;
}

}  // namespace

TEST_CASE(
    "pasted: the item fills its box at its scale, nothing else is drawn without distractors") {
  auto items = std::make_shared<Items>(40);
  data::PastedObjects ds(items, options("none"));
  CHECK(ds.size() == 40);
  CHECK(ds.classes() == std::vector<std::string>{"a", "b", "c"});
  CHECK(ds.source() == "pasted on 20x20 (no distractors) from items");
  std::set<int64_t> sides, tops;
  for (int64_t i = 0; i < ds.size(); ++i) {
    INFO("example " << i);
    const data::Example e = ds.get(i);
    const data::Box b = ds.box(i);
    CHECK(e.label == i % 3);
    CHECK(e.image.channels == 1);
    CHECK(e.image.height == 20);
    CHECK(e.image.width == 20);
    // A square item stays square, between 6 x 1.0 and 6 x 1.5 on the side, fully inside.
    CHECK(b.height == b.width);
    CHECK(b.height >= 6);
    CHECK(b.height <= 9);
    CHECK(b.top >= 0);
    CHECK(b.left >= 0);
    CHECK(b.top + b.height <= 20);
    CHECK(b.left + b.width <= 20);
    sides.insert(b.height), tops.insert(b.top);
    for (int64_t y = 0; y < 20; ++y)
      for (int64_t x = 0; x < 20; ++x)
        CHECK(near(e.image.at(0, y, x), b.contains(y, x) ? Items::value(i) : 0.0f));
    CHECK(ds.tight_box(i) == b);  // the item has no border
  }
  CHECK(sides == std::set<int64_t>{6, 7, 8, 9});
  CHECK(tops.size() > 5);
}

TEST_CASE("pasted: box and the draws follow the order documented in pasted.h") {
  auto items = std::make_shared<Items>(12);
  data::PastedOptions o = options("fragments");
  o.count = 1;
  data::PastedObjects ds(items, o);
  for (int64_t i = 0; i < ds.size(); ++i) {
    INFO("example " << i);
    data::Rng rng(o.seed, 0, i);
    const double scale = o.min_scale + (o.max_scale - o.min_scale) * rng.uniform();
    const int64_t h = data::scaled_size(6, scale);
    const int64_t top = rng.below(o.canvas - h + 1), left = rng.below(o.canvas - h + 1);
    const data::Box b{top, left, h, h};
    CHECK(ds.box(i) == b);
    // The fragment: another item (its value says which), an f x f crop anywhere in it (the
    // items are constant), and the r-th place that does not overlap the box.
    const int64_t f = std::max<int64_t>(1, std::llround(static_cast<double>(h) / 3.0));
    int64_t j = rng.below(ds.size() - 1);
    if (j >= i) ++j;
    (void)rng.below(h - f + 1), (void)rng.below(h - f + 1);
    std::vector<std::pair<int64_t, int64_t>> allowed;
    for (int64_t py = 0; py + f <= o.canvas; ++py)
      for (int64_t px = 0; px + f <= o.canvas; ++px) {
        const bool overlaps =
            py < b.top + b.height && b.top < py + f && px < b.left + b.width && b.left < px + f;
        if (!overlaps) allowed.emplace_back(py, px);
      }
    const auto [py, px] = allowed.at(static_cast<size_t>(rng.below(int64_t(allowed.size()))));
    const data::Image im = ds.get(i).image;
    for (int64_t y = 0; y < o.canvas; ++y)
      for (int64_t x = 0; x < o.canvas; ++x) {
        const bool in_piece = y >= py && y < py + f && x >= px && x < px + f;
        const float want = b.contains(y, x) ? Items::value(i) : in_piece ? Items::value(j) : 0.0f;
        if (!near(im.at(0, y, x), want))
          FAIL("pixel (" << y << ", " << x << ") is " << im.at(0, y, x) << ", expected " << want);
      }
  }
}

TEST_CASE("pasted: fragments come from other items, lie outside the box, and show content") {
  auto items = std::make_shared<Items>(30);
  data::PastedObjects ds(items, options("fragments"));
  CHECK(ds.source() == "pasted on 20x20 (3 fragments) from items");
  int64_t with_fragments = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    INFO("example " << i);
    const data::Image im = ds.get(i).image;
    const data::Box b = ds.box(i);
    const int64_t f = std::max<int64_t>(1, std::llround(static_cast<double>(b.height) / 3.0));
    int64_t outside = 0;
    for (int64_t y = 0; y < 20; ++y)
      for (int64_t x = 0; x < 20; ++x) {
        const int64_t k = which_item(im.at(0, y, x), ds.size());
        if (b.contains(y, x)) {
          CHECK(k == i);  // the item is whole: no fragment overlaps its box
        } else {
          CHECK(k != i);  // pieces of other items (max() keeps one item's value) or background
          CHECK(k != -2);
          outside += k >= 0;
        }
      }
    CHECK(outside <= 3 * f * f);
    with_fragments += outside > 0;
  }
  CHECK(with_fragments == ds.size());

  // Items with a black border: a fragment is cut from the lit part, never from the background.
  auto framed = std::make_shared<Items>(30, 12, 3);  // a lit 6x6 square inside 12x12
  data::PastedOptions o = options("fragments", 40);
  o.count = 1;
  o.min_scale = o.max_scale = 1.0;  // f = 4: the crop fits in the lit square
  data::PastedObjects one(framed, o);
  for (int64_t i = 0; i < one.size(); ++i) {
    INFO("example " << i);
    const data::Image im = one.get(i).image;
    const data::Box b = one.box(i);
    int64_t lit = 0;
    for (int64_t y = 0; y < 40; ++y)
      for (int64_t x = 0; x < 40; ++x) lit += !b.contains(y, x) && im.at(0, y, x) > 0;
    CHECK(lit == 16);
    // The tight box is the lit square, inside the box.
    CHECK(one.tight_box(i) == data::Box{b.top + 3, b.left + 3, 6, 6});
  }

  // An item that fills the canvas leaves no room: the fragments are skipped.
  data::PastedOptions full = options("fragments", 6);
  full.min_scale = full.max_scale = 1.0;
  data::PastedObjects no_room(items, full);
  for (int64_t i = 0; i < 5; ++i) CHECK(no_room.get(i).image.pixels == items->get(i).image.pixels);
}

TEST_CASE("pasted: noise covers the canvas in [0, noise], clamped to 1") {
  auto items = std::make_shared<Items>(8);
  data::PastedOptions o = options("noise", 40);
  o.noise = 0.1;
  data::PastedObjects ds(items, o);
  CHECK(ds.source() == "pasted on 40x40 (noise 0.1) from items");
  for (int64_t i = 0; i < ds.size(); ++i) {
    INFO("example " << i);
    const data::Image im = ds.get(i).image;
    const data::Box b = ds.box(i);
    double sum = 0;
    int64_t n = 0;
    for (int64_t y = 0; y < 40; ++y)
      for (int64_t x = 0; x < 40; ++x) {
        const float v = im.at(0, y, x);
        const float base = b.contains(y, x) ? Items::value(i) : 0.0f;
        CHECK(v >= base - 1e-5f);
        CHECK(v <= base + 0.1f + 1e-5f);
        if (!b.contains(y, x)) sum += v, ++n;
      }
    CHECK(sum / static_cast<double>(n) == doctest::Approx(0.05).epsilon(0.2));
  }
  // Values near 1 are clamped to 1.
  class Bright : public Items {
   public:
    Bright() : Items(2) {}
    data::Example get(int64_t i) const override {
      data::Example e = Items::get(i);
      for (float& v : e.image.pixels) v = 0.97f;
      return e;
    }
  };
  data::PastedObjects bright(std::make_shared<Bright>(), o);
  const data::Image im = bright.get(0).image;
  const data::Box b = bright.box(0);
  int64_t ones = 0;
  for (int64_t y = b.top; y < b.top + b.height; ++y)
    for (int64_t x = b.left; x < b.left + b.width; ++x) {
      CHECK(im.at(0, y, x) <= 1.0f);
      ones += im.at(0, y, x) == 1.0f;
    }
  CHECK(ones > 0);
}

TEST_CASE("pasted: an example depends on (seed, index) only: any order, any thread") {
  auto items = std::make_shared<Items>(24, 6, 0, 3);  // three channels, each pasted alike
  for (const std::string d : {"fragments", "noise"}) {
    INFO("distractors " << d);
    data::PastedObjects ds(items, options(d));
    std::vector<std::vector<float>> serial;
    for (int64_t i = 0; i < ds.size(); ++i) serial.push_back(ds.get(i).image.pixels);
    CHECK(serial[0].size() == 3 * 20 * 20);
    // Again, backwards, from a second object with the same options.
    data::PastedObjects again(items, options(d));
    for (int64_t i = ds.size() - 1; i >= 0; --i)
      CHECK(again.get(i).image.pixels == serial[static_cast<size_t>(i)]);
    // From four threads at once, each in its own order.
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int64_t k = 0; k < ds.size(); ++k) {
          const int64_t i = (k * 5 + t * 7) % ds.size();
          if (ds.get(i).image.pixels != serial[static_cast<size_t>(i)]) ++mismatches[t];
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) CHECK(mismatches[t] == 0);
    // Another seed moves the items.
    data::PastedOptions other = options(d);
    other.seed = 6;
    data::PastedObjects moved(items, other);
    int64_t same = 0;
    for (int64_t i = 0; i < ds.size(); ++i) same += moved.get(i).image.pixels == serial[size_t(i)];
    CHECK(same < 3);
  }
}

TEST_CASE("pasted: option errors name the option, the value and what is allowed") {
  auto items = std::make_shared<Items>(4);
  auto with = [&](auto change) {
    data::PastedOptions o = options("fragments");
    change(o);
    return data::PastedObjects(items, o);
  };
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.canvas = 8; }),
                       "PastedObjects: canvas 8 cannot hold the items of items (6x6) at max_scale "
                       "1.5 (9x9)");
  CHECK_NOTHROW(with([](data::PastedOptions& o) { o.canvas = 9; }));
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.min_scale = 0; }),
                       "min_scale must be > 0, got 0");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.min_scale = -1; }),
                       "min_scale must be > 0, got -1");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.min_scale = 2; }),
                       "min_scale (2) must not exceed max_scale (1.5)");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.distractors = "blur"; }),
                       "unknown distractors \"blur\"; the names are: none, noise, fragments");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.count = -1; }),
                       "count (fragments per canvas) must be in [0, 100], got -1");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.count = 101; }), "got 101");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.noise = 1.5; }),
                       "noise (the noise's amplitude) must be in [0, 1], got 1.5");
  CHECK_ERROR_CONTAINS(with([](data::PastedOptions& o) { o.canvas = 0; }),
                       "canvas must be >= 1, got 0");
  CHECK_ERROR_CONTAINS(data::PastedObjects(nullptr), "the items data set is null");
  CHECK_ERROR_CONTAINS(data::PastedObjects(std::make_shared<Items>(0)), "items holds no items");
  CHECK_ERROR_CONTAINS(data::PastedObjects(std::make_shared<Items>(1), options("fragments")),
                       "fragments come from other items, but items holds one item");
  CHECK_NOTHROW(data::PastedObjects(std::make_shared<Items>(1), options("noise")));

  data::PastedObjects ds(items, options("none"));
  CHECK_ERROR_CONTAINS(ds.get(4),
                       "pasted on 20x20 (no distractors) from items: index 4 is out "
                       "of range (size 4)");
  CHECK_ERROR_CONTAINS(ds.box(-1), "index -1 is out of range");
  auto odd = std::make_shared<Items>(4);
  odd->odd_one_ = 2;
  data::PastedObjects odd_ds(odd, options("fragments"));
  CHECK_ERROR_CONTAINS(odd_ds.get(2), "item 2 is 1x7x6, expected 1x6x6 as item 0");
}

TEST_CASE("pasted: the real Fashion-MNIST test set, when installed") {
  const std::string dir = data::fashion_mnist_dir();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "t10k-images-idx3-ubyte.gz")) {
    skip("Fashion-MNIST is not installed in " + dir);
    return;
  }
  auto test = data::fashion_mnist(dir, false);
  data::PastedObjects ds(test, {});
  CHECK(ds.size() == 10000);
  CHECK(ds.classes() == data::fashion_mnist_classes());
  CHECK(ds.source() == "pasted on 64x64 (3 fragments) from " + test->source());
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{9999}}) {
    INFO("example " << i);
    const data::Example e = ds.get(i);
    CHECK(e.label == test->labels()[static_cast<size_t>(i)]);
    CHECK(e.image.height == 64);
    const data::Box b = ds.box(i), t = ds.tight_box(i);
    CHECK(b.height >= 28);
    CHECK(b.height <= 42);
    // The tight box lies in the box; every pixel of the item is in it.
    CHECK(t.top >= b.top);
    CHECK(t.left >= b.left);
    CHECK(t.top + t.height <= b.top + b.height);
    CHECK(t.left + t.width <= b.left + b.width);
    for (int64_t y = 0; y < 64; ++y)
      for (int64_t x = 0; x < 64; ++x)
        if (b.contains(y, x) && !t.contains(y, x)) CHECK(e.image.at(0, y, x) == 0.0f);
  }
}

TEST_CASE("pasted: nonzero_box is the extent of the pixels above 0 in any channel") {
  data::Image im{2, 5, 6, std::vector<float>(60, 0.f)};
  CHECK(data::nonzero_box(im).empty());
  im.at(0, 1, 4) = 0.5f;
  CHECK(data::nonzero_box(im) == data::Box{1, 4, 1, 1});
  im.at(1, 3, 2) = 0.1f;  // the other channel counts too
  CHECK(data::nonzero_box(im) == data::Box{1, 2, 3, 3});
}
