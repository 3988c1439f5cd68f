// Fitting a config to what it meets: the model of a checkpoint (fine-tuning, evaluating and
// explaining it later), the class folders of an image folder, and the length of the run. Each
// function changes the config the way a user would have to by hand, and says what it changed in
// the strings it returns (the tools print them as "note: ..." lines before the first step), so a
// config written for one case keeps working in the next without a surprise.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/vit.h"
#include "nn/state.h"

namespace vitrine::train {

/// The image-size transforms of data.transforms brought to the model's model.image_size [H, W]
/// (keys resize, center_crop, random_crop; mean, std and hflip untouched):
///   a crop of size S (centre or random) with a resize R before it:  R -> round(R * H / S_h),
///                                                                   S -> [H, W] (padding kept);
///   a crop without a resize:   S -> [H, W], and a resize added before it when the data set's
///                              images are not [H, W] already ([H, W], or for images of any size
///                              the shorter side max(H, W));
///   a resize alone, or neither (when needed): for images of any size, unless the resize is an
///                              exact [h, w], resize max(H, W) and center_crop [H, W]
///                              (torchvision's evaluation: the aspect kept); else R -> [H, W].
/// (timm's evaluation resizes to size / 0.875 and centre-crops; a config with resize 72 and crop
/// 64 keeps that ratio at 224: resize 252, crop 224.) Nothing changes when the pipeline already
/// yields [H, W]. Returns what changed ("data.transforms.resize [72, 72] -> [252, 252]"), empty
/// when nothing did.
std::vector<std::string> fit_transforms_to_model(nlohmann::json& config);

/// The classes of an image folder decide model.num_classes: data.dataset "imagefolder" only
/// (the other data sets have a fixed number, which validate_config checks). num_classes_given:
/// whether the user's config or --set named model.num_classes; when it did and differs from the
/// folders' count, an Error names both, and the folder, before any training. Returns the note
/// printed when the count was taken from the folders (empty when nothing changed).
std::vector<std::string> fit_classes_to_data(nlohmann::json& config, bool num_classes_given);

/// A warm-up as long as the run or longer: schedule.warmup_epochs >= train.epochs (a config for
/// 30 epochs run with --epochs 1, or one whose warm-up fills it) is shortened to the same
/// fraction of the run as in the config file (file_epochs: train.epochs before the command line
/// changed it), at most half the run. (A warm-up longer than train.max_steps is make_schedule's
/// to shorten: only the Trainer knows the steps per epoch.) Returns the note, empty when nothing
/// changed.
std::vector<std::string> fit_schedule_to_run(nlohmann::json& config, int64_t file_epochs);

/// The config a saved checkpoint was trained with, for evaluating or explaining it later:
///   1. the run folder's config.json beside the checkpoint, when there is one;
///   2. else default_config() with the data section stored in the checkpoint ("vitrine.data",
///      written by the Trainer), when there is one;
///   3. else default_config().
/// Then the model section is the checkpoint's model (`model`), the normalisation (mean, std)
/// the checkpoint's metadata when it has one, and the transforms are fitted to the model's size
/// (fit_transforms_to_model). `source` receives where the data section came from (for messages).
nlohmann::json config_for_checkpoint(const std::string& checkpoint, const nlohmann::json& model,
                                     const nn::Metadata& meta, std::string* source = nullptr);

/// The metadata key of the data section a Trainer stores in its checkpoints.
using nn::kDataKey;

}  // namespace vitrine::train
