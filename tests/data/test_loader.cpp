// nn/data/loader: batches of an in-memory dataset: shapes and dtypes, each example once per epoch,
// drop_last, the same batches for any number of workers, per-epoch shuffles, skip_batches for
// --resume, errors raised in workers re-thrown by next(), bounded prefetch, and destruction in
// the middle of an epoch.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include "nn/data/loader.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace data = vitrine::nn::data;

namespace {

/// n examples [c, h, w]; pixel p of example i is i + p / 1024 (exact in float), label i % 10.
/// Example `bad` throws as an undecodable image would; example `odd` is one column wider.
class TinyDataset : public data::Dataset {
 public:
  TinyDataset(int64_t n, int64_t c, int64_t h, int64_t w) : n_(n), c_(c), h_(h), w_(w) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t index) const override {
    ++gets;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (index == bad) fail("tiny.bin: example {} is undecodable (bad header)", index);
    data::Example ex;
    ex.label = index % 10;
    ex.image.channels = c_;
    ex.image.height = h_;
    ex.image.width = w_ + (index == odd ? 1 : 0);
    const int64_t count = c_ * h_ * ex.image.width;
    for (int64_t p = 0; p < count; ++p)
      ex.image.pixels.push_back(static_cast<float>(index) + static_cast<float>(p) / 1024.0f);
    return ex;
  }
  std::vector<std::string> classes() const override {
    return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  }
  std::string source() const override { return "tiny.bin"; }

  int64_t bad = -1, odd = -1;
  std::chrono::milliseconds delay{0};
  mutable std::atomic<int64_t> gets{0};

 private:
  int64_t n_, c_, h_, w_;
};

data::LoaderOptions opts(int64_t batch_size, int64_t workers, bool shuffle = true,
                         bool drop_last = false, uint64_t seed = 17) {
  data::LoaderOptions o;
  o.batch_size = batch_size;
  o.workers = workers;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}

/// A pipeline with both random transforms, so that workers must agree on their draws.
data::Compose augment() {
  data::Compose c;
  c.add(std::make_shared<data::RandomCrop>(4, 4, 1))
      .add(std::make_shared<data::RandomHorizontalFlip>(0.5));
  return c;
}

struct Flat {  // a batch as plain values, to compare batches exactly
  std::vector<float> images;
  std::vector<int64_t> labels, indices;
  Dims shape;
  bool operator==(const Flat&) const = default;
};

std::vector<Flat> epoch_batches(data::DataLoader& loader, int64_t epoch, int64_t skip = 0) {
  loader.start_epoch(epoch, skip);
  std::vector<Flat> out;
  while (auto b = loader.next())
    out.push_back({b->images.to_vector<float>(), b->labels.to_vector<int64_t>(), b->indices,
                   b->images.shape()});
  return out;
}

/// Polls until cond() holds (at most 10 s, for a loaded machine).
template <typename F>
void wait_until(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::vector<int64_t> all_indices(const std::vector<Flat>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.indices.begin(), b.indices.end());
  return out;
}

}  // namespace

TEST_CASE("loader: batch shapes, dtypes and contents") {
  auto ds = std::make_shared<TinyDataset>(10, 2, 3, 5);
  data::DataLoader loader(ds, data::Compose(), opts(4, 2, /*shuffle=*/false));
  CHECK(loader.batches_per_epoch() == 3);
  CHECK(loader.workers() == 2);
  loader.start_epoch(0);
  std::vector<int64_t> sizes;
  while (auto b = loader.next()) {
    const int64_t n = static_cast<int64_t>(b->indices.size());
    sizes.push_back(n);
    CHECK(b->images.dtype() == kFloat32);
    CHECK(b->labels.dtype() == kInt64);
    CHECK(b->images.shape() == Dims{n, 2, 3, 5});
    CHECK(b->labels.shape() == Dims{n});
    const auto px = b->images.to_vector<float>();
    const auto labels = b->labels.to_vector<int64_t>();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = b->indices[static_cast<size_t>(k)];
      CHECK(labels[static_cast<size_t>(k)] == i % 10);
      const auto expect = ds->get(i).image.pixels;
      CHECK(std::vector<float>(px.begin() + k * 30, px.begin() + (k + 1) * 30) == expect);
    }
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK_FALSE(loader.next().has_value());  // stays at the end
}

TEST_CASE("loader: every example exactly once per epoch, shuffles differ between epochs") {
  auto ds = std::make_shared<TinyDataset>(53, 1, 2, 2);
  data::DataLoader loader(ds, data::Compose(), opts(8, 2));
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    auto idx = all_indices(epoch_batches(loader, epoch));
    CHECK(idx.size() == 53);
    CHECK(std::set<int64_t>(idx.begin(), idx.end()).size() == 53);
    CHECK(*std::min_element(idx.begin(), idx.end()) == 0);
    CHECK(*std::max_element(idx.begin(), idx.end()) == 52);
    // The order is permutation(n, seed, epoch).
    CHECK(idx == data::permutation(53, 17, static_cast<uint64_t>(epoch)));
    orders.push_back(idx);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(all_indices(epoch_batches(loader, 1)) == orders[1]);  // an epoch repeats exactly

  data::DataLoader other_seed(ds, data::Compose(), opts(8, 2, true, false, 18));
  CHECK(all_indices(epoch_batches(other_seed, 0)) != orders[0]);
  data::DataLoader in_order(ds, data::Compose(), opts(8, 1, /*shuffle=*/false));
  auto idx = all_indices(epoch_batches(in_order, 4));
  for (int64_t i = 0; i < 53; ++i) CHECK(idx[static_cast<size_t>(i)] == i);
}

TEST_CASE("loader: drop_last drops the short batch") {
  auto ds = std::make_shared<TinyDataset>(10, 1, 2, 2);
  data::DataLoader loader(ds, data::Compose(), opts(4, 2, true, /*drop_last=*/true));
  CHECK(loader.batches_per_epoch() == 2);
  auto batches = epoch_batches(loader, 0);
  REQUIRE(batches.size() == 2);
  for (const auto& b : batches) CHECK(b.indices.size() == 4);
  auto idx = all_indices(batches);
  CHECK(std::set<int64_t>(idx.begin(), idx.end()).size() == 8);
  // Without drop_last the first eight are the same and two more follow.
  data::DataLoader keep(ds, data::Compose(), opts(4, 2, true, false));
  auto all = all_indices(epoch_batches(keep, 0));
  CHECK(all.size() == 10);
  CHECK(std::vector<int64_t>(all.begin(), all.begin() + 8) == idx);
  // An exact multiple loses nothing.
  data::DataLoader exact(std::make_shared<TinyDataset>(8, 1, 2, 2), data::Compose(),
                         opts(4, 1, true, true));
  CHECK(exact.batches_per_epoch() == 2);
  data::DataLoader tiny(std::make_shared<TinyDataset>(3, 1, 2, 2), data::Compose(),
                        opts(4, 1, true, true));
  CHECK(tiny.batches_per_epoch() == 0);
  tiny.start_epoch(0);
  CHECK_FALSE(tiny.next().has_value());
}

TEST_CASE("loader: the same batches for 0, 1 and 3 workers, with random transforms") {
  auto ds = std::make_shared<TinyDataset>(37, 2, 4, 4);
  data::DataLoader inline_loader(ds, augment(), opts(5, 0));
  CHECK(inline_loader.workers() == 0);
  data::DataLoader one(ds, augment(), opts(5, 1));
  data::DataLoader three(ds, augment(), opts(5, 3));
  for (int64_t epoch : {0, 1}) {
    const auto a = epoch_batches(inline_loader, epoch);
    CHECK(a.size() == 8);
    CHECK(a == epoch_batches(one, epoch));
    CHECK(a == epoch_batches(three, epoch));
    // Example i is transformed with Rng(seed, epoch, i): recompute one by hand.
    const int64_t i = a[2].indices[1];
    const data::Image expect = augment()(ds->get(i).image, 17, epoch, i);
    CHECK(std::vector<float>(a[2].images.begin() + 32, a[2].images.begin() + 64) == expect.pixels);
  }
  // The augmentation differs between epochs for the same example.
  data::DataLoader unshuffled0(ds, augment(), opts(37, 2, false));
  const auto u0 = epoch_batches(unshuffled0, 0), u1 = epoch_batches(unshuffled0, 1);
  CHECK(u0[0].indices == u1[0].indices);
  CHECK(u0[0].images != u1[0].images);
}

TEST_CASE("loader: skip_batches continues an epoch exactly") {
  auto ds = std::make_shared<TinyDataset>(23, 1, 4, 4);
  data::DataLoader loader(ds, augment(), opts(4, 2));
  const auto full = epoch_batches(loader, 3);
  REQUIRE(full.size() == 6);
  for (int64_t skip : {1, 4, 5}) {
    INFO("skip " << skip);
    // A fresh loader, as after --resume.
    data::DataLoader resumed(ds, augment(), opts(4, 3));
    const auto rest = epoch_batches(resumed, 3, skip);
    CHECK(rest == std::vector<Flat>(full.begin() + skip, full.end()));
  }
  loader.start_epoch(3, 6);
  CHECK_FALSE(loader.next().has_value());
  CHECK_ERROR_CONTAINS(loader.start_epoch(3, 7), "cannot skip 7 batches of an epoch of 6");
  CHECK_ERROR_CONTAINS(loader.start_epoch(-1), "epoch must be in [0, 2^24), got -1");
}

TEST_CASE("loader: start_epoch in the middle of an epoch starts the new one cleanly") {
  auto ds = std::make_shared<TinyDataset>(40, 1, 4, 4);
  data::DataLoader loader(ds, augment(), opts(4, 3));
  data::DataLoader reference(ds, augment(), opts(4, 0));
  loader.start_epoch(0);
  REQUIRE(loader.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the workers prefetch
  CHECK(epoch_batches(loader, 1) == epoch_batches(reference, 1));
}

TEST_CASE("loader: an exception in a worker is re-thrown by next() with its message") {
  auto ds = std::make_shared<TinyDataset>(12, 1, 2, 2);
  ds->bad = 5;
  for (int64_t workers : {0, 1, 3}) {
    INFO("workers " << workers);
    data::DataLoader loader(ds, data::Compose(), opts(4, workers, /*shuffle=*/false));
    loader.start_epoch(0);
    auto first = loader.next();
    REQUIRE(first.has_value());
    CHECK(first->indices == std::vector<int64_t>{0, 1, 2, 3});
    CHECK_ERROR_CONTAINS(loader.next(), "tiny.bin: example 5 is undecodable (bad header)",
                         "data loader: example 5 of tiny.bin, epoch 0");
    // The failed batch is skipped; the epoch goes on.
    auto third = loader.next();
    REQUIRE(third.has_value());
    CHECK(third->indices == std::vector<int64_t>{8, 9, 10, 11});
    CHECK_FALSE(loader.next().has_value());
  }
  // A transform's error too (an image too small for the crop).
  data::Compose big({std::make_shared<data::RandomCrop>(9, 9)});
  data::DataLoader loader(ds, big, opts(4, 2, false));
  loader.start_epoch(0);
  CHECK_ERROR_CONTAINS(loader.next(), "random_crop", "larger than the image (2, 2)",
                       "data loader: example 0 of tiny.bin");
}

TEST_CASE("loader: images of different shapes in a batch are an error naming both") {
  auto ds = std::make_shared<TinyDataset>(8, 3, 2, 2);
  ds->odd = 6;
  data::DataLoader loader(ds, data::Compose(), opts(4, 2, /*shuffle=*/false));
  loader.start_epoch(0);
  CHECK(loader.next().has_value());
  CHECK_ERROR_CONTAINS(loader.next(), "images of a batch must have one shape",
                       "example 4 is [3, 2, 2] and example 6 is [3, 2, 3]", "tiny.bin");
  // A resize in the pipeline makes them agree.
  data::DataLoader resized(ds, data::Compose({std::make_shared<data::Resize>(2, 2)}),
                           opts(4, 2, false));
  CHECK(epoch_batches(resized, 0).size() == 2);
}

TEST_CASE("loader: prefetch is bounded") {
  auto ds = std::make_shared<TinyDataset>(400, 1, 2, 2);
  auto o = opts(4, 3);
  o.prefetch = 2;
  data::DataLoader loader(ds, data::Compose(), o);
  loader.start_epoch(0);
  wait_until([&] { return ds->gets.load() >= 8; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(ds->gets.load() == 8);  // two batches ahead, then the workers wait
  REQUIRE(loader.next().has_value());
  wait_until([&] { return ds->gets.load() >= 12; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(ds->gets.load() == 12);
}

TEST_CASE("loader: destruction in the middle of an epoch stops the workers promptly") {
  auto ds = std::make_shared<TinyDataset>(200, 1, 2, 2);
  ds->delay = std::chrono::milliseconds(100);
  auto loader = std::make_unique<data::DataLoader>(ds, data::Compose(), opts(10, 3));
  loader->start_epoch(0);
  REQUIRE(loader->next().has_value());  // ~1 s: each worker loads a batch of 10
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  loader.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Each worker finishes only the example it is on (<= 100 ms), not its batch (~900 ms more).
  CHECK(seconds < 0.5);
  const int64_t gets = ds->gets.load();
  CHECK(gets < 3 * 10 + 3 * 3);  // three batches, and a few examples of the next ones
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  CHECK(ds->gets.load() == gets);  // nothing runs after the destructor

  // Destroyed before any epoch, and right after start_epoch.
  { data::DataLoader idle(ds, data::Compose(), opts(8, 2)); }
  {
    data::DataLoader started(ds, data::Compose(), opts(8, 2));
    started.start_epoch(0);
  }
}

TEST_CASE("loader: option and usage errors") {
  auto ds = std::make_shared<TinyDataset>(4, 1, 2, 2);
  CHECK_ERROR_CONTAINS(data::DataLoader(nullptr, data::Compose()), "dataset is null");
  CHECK_ERROR_CONTAINS(data::DataLoader(ds, data::Compose(), opts(0, 1)),
                       "batch_size must be positive, got 0");
  CHECK_ERROR_CONTAINS(data::DataLoader(ds, data::Compose(), opts(2, -3)), "workers must be >= 0",
                       "got -3");
  data::DataLoader loader(ds, data::Compose(), opts(2, 1));
  CHECK_ERROR_CONTAINS(loader.next(), "call start_epoch(epoch) before next()");
  const int64_t w = data::DataLoader::default_workers();
  CHECK(w >= 1);
  CHECK(w <= 8);
  CHECK(w <= std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()) - 1));
}

TEST_CASE("loader: distributed shards are disjoint, equal, cover the data and change per epoch") {
  // 10 examples on 3 ranks: the order padded to 12 by repeating its first 2, rank r at r, r+3, ...
  for (uint64_t epoch : {0u, 1u}) {
    const std::vector<int64_t> order = data::permutation(10, 9, epoch);
    std::vector<int64_t> all;
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int64_t> s = data::distributed_shard(order, 3, r);
      CHECK(s.size() == 4);
      for (size_t k = 0; k < s.size(); ++k)
        CHECK(s[k] == order[(static_cast<size_t>(r) + 3 * k) % 10]);
      all.insert(all.end(), s.begin(), s.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> distinct = all;
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    CHECK(distinct.size() == 10);  // covers; 2 repeats (the padding)
    CHECK(all.size() == 12);
    // Without padding: a partition, the counts differing by at most one.
    size_t total = 0;
    for (int64_t r = 0; r < 3; ++r) total += data::distributed_shard(order, 3, r, false).size();
    CHECK(total == 10);
  }
  CHECK(data::distributed_shard(data::permutation(10, 9, 0), 3, 0) !=
        data::distributed_shard(data::permutation(10, 9, 1), 3, 0));
  CHECK_ERROR_CONTAINS(data::distributed_shard({1, 2}, 2, 2), "rank 2 of 2 replicas");
}
