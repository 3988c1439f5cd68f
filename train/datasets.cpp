// load_datasets: see datasets.h.
#include "train/datasets.h"

#include "backends/error.h"
#include "nn/data/open.h"
#include "train/config.h"
#include "train/options.h"

namespace vitrine::train {

using nlohmann::json;
namespace data = nn::data;

Datasets load_datasets(const DataOptions& d, uint64_t seed) {
  data::DatasetFiles p = data::open_dataset(d.dataset, true);
  Datasets s;
  s.path = p.path;
  s.test = p.test;
  if (d.validation_fraction > 0) {
    auto [train, validation] = data::split(p.train, d.validation_fraction, seed);
    s.train = train;
    s.validation = validation;
  } else {
    s.train = p.train;
  }
  if (d.subset > 0 && d.subset < s.train->size()) {  // the first N training images (a smoke run)
    std::vector<int64_t> first(static_cast<size_t>(d.subset));
    for (int64_t i = 0; i < d.subset; ++i) first[static_cast<size_t>(i)] = i;
    s.train = std::make_shared<data::Subset>(s.train, std::move(first));
  }
  return s;
}

Datasets load_datasets(const json& config) {
  const TrainConfig c = TrainConfig::from_json(config);
  return load_datasets(c.data, c.train.seed);
}

std::shared_ptr<const data::Dataset> load_test_set(const json& config) {
  return data::open_dataset(dataset_options(config), false).test;
}

}  // namespace vitrine::train
