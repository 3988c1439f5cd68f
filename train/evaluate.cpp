// evaluate(): a model's loss, accuracy, macro-F1 and confusion matrix on a data set, in eval
// mode, with optional flip test-time augmentation, each process its shard under mpirun. See
// trainer.h.
#include <optional>

#include "autograd/grad_mode.h"
#include "nn/data/loader.h"
#include "ops/ops.h"
#include "train/trainer.h"

namespace vitrine::train {

Evaluation evaluate(nn::Module& model, const std::shared_ptr<const nn::data::Dataset>& dataset,
                    const nn::data::Compose& transforms, int64_t batch_size, int64_t workers,
                    Device device, bool hflip_tta, dist::ProcessGroup* group) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  nn::data::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = false;
  lo.workers = workers;
  if (group && group->size() > 1) {  // each rank its part, no example twice
    lo.num_replicas = group->size();
    lo.rank = group->rank();
    lo.pad_shards = false;
  }
  nn::data::DataLoader loader(dataset, transforms, lo);
  loader.start_epoch(0);
  std::optional<Evaluator> ev;  // made at the first batch, when the logits say the classes
  Tensor reversed;              // W-1, ..., 0: index_select along the width mirrors the images
  while (auto b = loader.next()) {
    Tensor images = b->images.to(device);
    Tensor logits = model.forward(images);
    if (hflip_tta) {
      const int64_t W = images.size(3);
      if (!reversed.defined() || reversed.size(0) != W)
        reversed = ops::arange(W - 1, -1, -1, kInt64).to(device);
      Tensor mirrored = model.forward(ops::index_select(images, 3, reversed));
      logits = ops::log((ops::softmax(logits, 1) + ops::softmax(mirrored, 1)) * 0.5);
    }
    Tensor labels = b->labels.to(device);
    Tensor loss = ops::cross_entropy(logits, labels, ops::Reduction::Sum);
    if (!ev) ev.emplace(logits.size(1));
    ev->add(logits, labels, loss.item());
  }
  model.train(was_training);
  if (group && group->size() > 1) {
    if (!ev) ev.emplace();
    ev->all_reduce(*group);
  }
  if (!ev || ev->num_classes() == 0) ev.emplace(static_cast<int64_t>(dataset->classes().size()));
  return ev->result();
}

}  // namespace vitrine::train
