// DataLoader: batches of a Dataset, decoded and transformed on background threads.
//
// An epoch is a list of batches: the examples in order (shuffle: permutation(n, seed, epoch),
// else 0..n-1) cut into runs of batch_size (the last one shorter unless drop_last). Worker
// threads take whole batches in order, at most `prefetch` batches ahead of the one next()
// returns, and next() hands them out in order. Example i's transforms draw from
// Rng(seed, epoch, i) (i: its index in this dataset), so the batches, their contents and their
// order depend only on (dataset, transforms, options, epoch), never on the number of workers.
//
// With num_replicas > 1 the loader is one rank's part of a data-parallel job (PyTorch's
// DistributedSampler): the epoch's order (the same on every rank: same seed, same epoch) is
// padded by repeating its first examples up to a multiple of num_replicas, and rank r takes
// positions r, r + R, r + 2R, ...: the shards are disjoint (but for the padding), cover the data,
// have equal counts, and change with the epoch. Batch b of every rank together holds the
// examples of batch b of one process whose batch is R times larger. With pad_shards false (for
// evaluation) nothing is repeated and the shards' counts differ by at most one.
//
// The loader is driven from one thread: start_epoch, then next() until it returns nullopt.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "autograd/tensor.h"
#include "nn/data/dataset.h"
#include "nn/data/transforms.h"

namespace vitrine::nn::data {

struct Batch {
  Tensor images;                 // [B, C, H, W] float32
  Tensor labels;                 // [B] int64
  std::vector<int64_t> indices;  // [B] the examples' indices in the dataset
};

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  /// Seeds the shuffle and the random transforms.
  uint64_t seed = 0;
  /// Background threads; -1: default_workers(); 0: no thread, next() loads the batch itself.
  int64_t workers = -1;
  /// Batches loaded ahead of the training loop (queued or being loaded); 0: 2 * workers.
  int64_t prefetch = 0;
  /// Data-parallel sharding: this loader reads the shard of rank `rank` of num_replicas.
  int64_t num_replicas = 1;
  int64_t rank = 0;
  /// Pad the order to a multiple of num_replicas (equal shards), as DistributedSampler does.
  bool pad_shards = true;
  /// Shard in blocks of this many entries: rank r reads blocks r, r + R, ... (1: entries r,
  /// r + R, ..., DistributedSampler's order). Set to batch_size, each step's whole batch is the
  /// ranks' batches side by side in rank order: one process with R times the batch reads the same
  /// images in the same places (batch-invariant training, docs/distributed.md).
  int64_t shard_block = 1;
};

/// Rank `rank`'s shard of an epoch's order (see above): order[rank], order[rank + R], ... of the
/// order padded (pad) by repeating its start to a multiple of R = num_replicas; with block > 1,
/// blocks of that many entries instead (the padding then to a multiple of R blocks).
std::vector<int64_t> distributed_shard(std::vector<int64_t> order, int64_t num_replicas,
                                       int64_t rank, bool pad = true, int64_t block = 1);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, Compose transforms,
             LoaderOptions options = {});
  /// Stops the workers (each finishes at most the example it is on) and joins them.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Starts epoch `epoch` (>= 0), dropping whatever was loaded for another epoch. The first
  /// skip_batches batches are not loaded: next() continues as a run that has already taken them
  /// (for --resume in the middle of an epoch).
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  /// The next batch of the epoch, or nullopt at its end. An exception thrown while loading the
  /// batch (an undecodable image, a transform error, images of different shapes) is re-thrown
  /// here, and that batch is then skipped.
  std::optional<Batch> next();
  /// ceil(examples / batch_size), or floor with drop_last (examples: shard_size()).
  int64_t batches_per_epoch() const;
  /// The examples of an epoch of this rank: the dataset's size, or its shard's.
  int64_t shard_size() const;

  int64_t size() const { return dataset_->size(); }
  int64_t workers() const { return static_cast<int64_t>(threads_.size()); }
  const LoaderOptions& options() const { return options_; }
  const Compose& transforms() const { return transforms_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

  /// min(8, max(1, hardware_concurrency - 1)): leaves a core to the training loop.
  static int64_t default_workers();

 private:
  struct Plan {  // one epoch, shared with the workers that load its batches
    uint64_t generation;
    int64_t epoch;
    std::vector<int64_t> order;
  };
  struct Slot {  // a loaded batch, or why it could not be loaded
    Batch batch;
    std::exception_ptr error;
  };

  /// Loads batch b of plan; throws Cancelled (loader.cpp) when stopped or the epoch changed.
  Slot load(const Plan& plan, int64_t b);
  void work();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  Compose transforms_;
  LoaderOptions options_;
  int64_t prefetch_ = 0;

  std::mutex mutex_;
  std::condition_variable work_cv_;   // workers wait for a batch to load, or stop
  std::condition_variable ready_cv_;  // next() waits for its batch
  bool stop_ = false;
  uint64_t generation_ = 0;           // start_epoch increments it; stale loads are dropped
  std::shared_ptr<const Plan> plan_;  // null before the first start_epoch
  int64_t next_out_ = 0;              // the batch next() returns next
  int64_t next_load_ = 0;             // the batch the next free worker loads
  int64_t end_ = 0;                   // batches in the epoch
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> threads_;
};

}  // namespace vitrine::nn::data
