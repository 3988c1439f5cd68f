// load_datasets: see datasets.h.
#include "tools/train/datasets.h"

#include "backends/error.h"
#include "nn/data/open.h"
#include "tools/train/config.h"
#include "tools/train/options.h"

namespace vitrine::train {

using nlohmann::json;
namespace data = nn::data;

namespace {

/// The config's data set, as nn::data::open_dataset opens it: an image folder read with the
/// model's channels, its test split (when it has no test folder) seeded with train.seed + 1.
data::DatasetFiles open_parts(const json& config, bool need_train) {
  data::DatasetOptions o;
  o.name = config.at("data").at("dataset").get<std::string>();
  o.path = data_path(config);
  if (o.name == "fashion-mnist-pasted") o.pasted = pasted_options(config);
  if (o.name == "imagefolder") o.channels = model_spec(config).channels;
  o.split_seed = config.at("train").at("seed").get<uint64_t>() + 1;
  return data::open_dataset(o, need_train);
}

}  // namespace

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
  return open_parts(config, false).test;
}

}  // namespace vitrine::train
