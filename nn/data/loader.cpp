// DataLoader: per-epoch plans, batch loading on worker threads, in-order delivery (see loader.h).
// Locking: mutex_ guards the epoch state (stop_ .. ready_ in loader.h). A worker holds it to take a
// batch number, to store the loaded batch, and briefly before each example to see whether it
// should stop; never while decoding or transforming.
#include "nn/data/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/backend.h"

namespace vitrine::nn::data {

namespace {

/// Thrown inside load() when the loader stops or the epoch changes; never leaves the loader.
struct Cancelled {};

std::string shape_str(const Image& im) {
  return fmt::format("[{}, {}, {}]", im.channels, im.height, im.width);
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Compose transforms,
                       LoaderOptions options)
    : dataset_(std::move(dataset)), transforms_(std::move(transforms)), options_(options) {
  VT_CHECK(dataset_ != nullptr, "data loader: the dataset is null");
  VT_CHECK(options_.batch_size > 0, "data loader: batch_size must be positive, got {}",
           options_.batch_size);
  VT_CHECK(options_.workers >= -1,
           "data loader: workers must be >= 0 (or -1 for the default), got {}", options_.workers);
  VT_CHECK(options_.prefetch >= 0, "data loader: prefetch must be >= 0, got {}", options_.prefetch);
  VT_CHECK(
      options_.num_replicas >= 1 && options_.rank >= 0 && options_.rank < options_.num_replicas,
      "data loader: rank {} of {} replicas: expected num_replicas >= 1 and 0 <= rank < "
      "num_replicas",
      options_.rank, options_.num_replicas);
  VT_CHECK(options_.shard_block >= 1, "data loader: shard_block must be at least 1, got {}",
           options_.shard_block);
  const int64_t nworkers = options_.workers == -1 ? default_workers() : options_.workers;
  prefetch_ = options_.prefetch > 0 ? options_.prefetch : 2 * std::max<int64_t>(1, nworkers);
  threads_.reserve(static_cast<size_t>(nworkers));
  try {
    for (int64_t i = 0; i < nworkers; ++i) threads_.emplace_back([this] { work(); });
  } catch (...) {  // no destructor runs for a half-built loader: stop what did start
    stop_workers();
    throw;
  }
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

int64_t DataLoader::default_workers() {
  const int64_t hw = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::min<int64_t>(8, std::max<int64_t>(1, hw - 1));
}

std::vector<int64_t> distributed_shard(std::vector<int64_t> order, int64_t num_replicas,
                                       int64_t rank, bool pad, int64_t block) {
  VT_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
           "distributed_shard: rank {} of {} replicas", rank, num_replicas);
  VT_CHECK(block >= 1, "distributed_shard: block must be at least 1, got {}", block);
  if (num_replicas == 1) return order;
  const auto n = static_cast<int64_t>(order.size());
  const int64_t round = num_replicas * block;  // one block for each rank
  if (pad && n > 0) {
    const int64_t total = (n + round - 1) / round * round;
    for (int64_t i = n; i < total; ++i) order.push_back(order[static_cast<size_t>(i % n)]);
  }
  std::vector<int64_t> shard;
  shard.reserve(order.size() / static_cast<size_t>(num_replicas) + 1);
  const auto size = static_cast<int64_t>(order.size());
  for (int64_t start = rank * block; start < size; start += round)
    for (int64_t i = start; i < std::min(start + block, size); ++i)
      shard.push_back(order[static_cast<size_t>(i)]);
  return shard;
}

int64_t DataLoader::shard_size() const {
  const int64_t n = dataset_->size(), r = options_.num_replicas, b = options_.shard_block;
  if (r == 1) return n;
  const int64_t round = r * b;
  if (options_.pad_shards) return (n + round - 1) / round * b;
  return n / round * b + std::clamp<int64_t>(n % round - options_.rank * b, 0, b);
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = shard_size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch(int64_t epoch, int64_t skip_batches) {
  VT_CHECK(epoch >= 0 && epoch < (int64_t{1} << 24),
           "data loader: epoch must be in [0, 2^24), got {}", epoch);
  const int64_t nb = batches_per_epoch();
  VT_CHECK(skip_batches >= 0 && skip_batches <= nb,
           "data loader: cannot skip {} batches of an epoch of {} batches", skip_batches, nb);
  auto plan = std::make_shared<Plan>();
  plan->epoch = epoch;
  if (options_.shuffle) {
    plan->order = permutation(dataset_->size(), options_.seed, static_cast<uint64_t>(epoch));
  } else {
    plan->order.resize(static_cast<size_t>(dataset_->size()));
    std::iota(plan->order.begin(), plan->order.end(), int64_t{0});
  }
  plan->order = distributed_shard(std::move(plan->order), options_.num_replicas, options_.rank,
                                  options_.pad_shards, options_.shard_block);
  std::map<int64_t, Slot> stale;  // destroyed outside the lock
  {
    std::lock_guard lock(mutex_);
    plan->generation = ++generation_;
    plan_ = std::move(plan);
    stale.swap(ready_);
    next_out_ = next_load_ = skip_batches;
    end_ = nb;
  }
  work_cv_.notify_all();
}

std::optional<Batch> DataLoader::next() {
  Slot slot;
  {
    std::unique_lock lock(mutex_);
    VT_CHECK(plan_ != nullptr, "data loader: call start_epoch(epoch) before next()");
    if (next_out_ >= end_) return std::nullopt;
    if (threads_.empty()) {
      const int64_t b = next_out_++;
      auto plan = plan_;
      lock.unlock();
      slot = load(*plan, b);
    } else {
      ready_cv_.wait(lock, [&] { return ready_.count(next_out_) != 0; });
      auto node = ready_.extract(next_out_++);
      slot = std::move(node.mapped());
    }
  }
  work_cv_.notify_all();  // a prefetch place is free
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.batch);
}

void DataLoader::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] {
      return stop_ || (plan_ && next_load_ < end_ && next_load_ < next_out_ + prefetch_);
    });
    if (stop_) return;
    auto plan = plan_;
    const int64_t b = next_load_++;
    lock.unlock();
    std::optional<Slot> slot;
    try {
      slot = load(*plan, b);
    } catch (const Cancelled&) {
      // stopped, or a new epoch began: this batch is no longer wanted
    }
    lock.lock();
    if (slot && plan->generation == generation_) {
      ready_.emplace(b, std::move(*slot));
      ready_cv_.notify_all();
    }
    // A stale or cancelled batch is dropped here; its tensors are freed under the lock, which
    // is cheap next to loading them.
  }
}

DataLoader::Slot DataLoader::load(const Plan& plan, int64_t b) {
  Slot slot;
  try {
    const int64_t n = static_cast<int64_t>(plan.order.size());
    const int64_t begin = b * options_.batch_size, end = std::min(n, begin + options_.batch_size);
    Batch& batch = slot.batch;
    batch.indices.assign(plan.order.begin() + begin, plan.order.begin() + end);
    const int64_t count = end - begin;
    std::vector<int64_t> labels(static_cast<size_t>(count));
    Image first;  // the shape every image of the batch must have (pixels not kept)
    int64_t first_index = 0;
    float* out = nullptr;
    for (int64_t k = 0; k < count; ++k) {
      {
        // Cheap enough per example (one uncontended lock); lets the destructor and start_epoch
        // stop a worker within one example.
        std::lock_guard lock(mutex_);
        if (stop_ || plan.generation != generation_) throw Cancelled{};
      }
      const int64_t index = batch.indices[static_cast<size_t>(k)];
      Example ex;
      try {
        ex = dataset_->get(index);
        ex.image = transforms_(std::move(ex.image), options_.seed, plan.epoch, index);
      } catch (const std::exception& e) {
        fail("{} (data loader: example {} of {}, epoch {})", e.what(), index, dataset_->source(),
             plan.epoch);
      }
      const Image& im = ex.image;
      VT_CHECK(static_cast<int64_t>(im.pixels.size()) == im.channels * im.height * im.width,
               "data loader: example {} of {} has shape {} but {} pixel values", index,
               dataset_->source(), shape_str(im), im.pixels.size());
      if (k == 0) {
        first.channels = im.channels;
        first.height = im.height;
        first.width = im.width;
        first_index = index;
        batch.images = Tensor::empty({count, im.channels, im.height, im.width}, kFloat32);
        out = batch.images.data<float>();
      } else {
        VT_CHECK(
            im.channels == first.channels && im.height == first.height && im.width == first.width,
            "data loader: the images of a batch must have one shape after the transforms, "
            "but example {} is {} and example {} is {} (dataset {}; transforms: {})",
            first_index, shape_str(first), index, shape_str(im), dataset_->source(),
            transforms_.describe());
      }
      std::memcpy(out + k * static_cast<int64_t>(im.pixels.size()), im.pixels.data(),
                  im.pixels.size() * sizeof(float));
      labels[static_cast<size_t>(k)] = ex.label;
    }
    batch.labels = Tensor::empty({count}, kInt64);
    std::memcpy(batch.labels.data<int64_t>(), labels.data(), labels.size() * sizeof(int64_t));
  } catch (const Cancelled&) {
    throw;
  } catch (...) {
    slot.error = std::current_exception();
    slot.batch = Batch{};
  }
  return slot;
}

}  // namespace vitrine::nn::data
