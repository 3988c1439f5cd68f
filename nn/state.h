// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//   [8 bytes: header length N, little-endian u64] [N bytes: JSON header] [raw little-endian data]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data section) and may hold "__metadata__", an object whose values are strings.
//
// Vitrine writes F32, F64, I64, BOOL, BF16 and F16, names in sorted order, the header padded with
// spaces to a multiple of 8 bytes, atomically (temp file, fsync, rename). It reads those dtypes and
// also I8, I16, I32, U8, U16, U32 (widened to int64). Every header value is checked against the
// file's real size before anything is allocated from it.
//
// Checkpoints (save_checkpoint) keep the model's state_dict under its own names, the optimizer's
// tensors under "optimizer." + name, and JSON strings in the metadata:
//   vitrine.config     the model config, so a checkpoint alone rebuilds its model
//   vitrine.mean       input normalisation, e.g. "[0.4914, 0.4822, 0.4465]"
//   vitrine.std        e.g. "[0.247, 0.243, 0.261]"
//   vitrine.classes    class names, e.g. "[\"cat\", \"dog\"]"
//   vitrine.optimizer  {"type": optimizer type_name, "state": its state_json()}
//   vitrine.state      what else the training loop needs to resume (schedule, epoch, ...)
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/module.h"

namespace vitrine::nn {

namespace optim {
class Optimizer;
}

using Metadata = std::map<std::string, std::string>;

inline constexpr const char* kConfigKey = "vitrine.config";
inline constexpr const char* kMeanKey = "vitrine.mean";
inline constexpr const char* kStdKey = "vitrine.std";
inline constexpr const char* kClassesKey = "vitrine.classes";
inline constexpr const char* kOptimizerKey = "vitrine.optimizer";
inline constexpr const char* kStateKey = "vitrine.state";
/// The data section a model was trained with (vitrine-train's, nn::data::dataset_options_from_json
/// reads it back): what evaluating or explaining the checkpoint later opens as its test set.
inline constexpr const char* kDataKey = "vitrine.data";

struct SafetensorsFile {
  NamedTensors tensors;  // sorted by name; CPU, contiguous
  Metadata metadata;
};

/// Reads a whole file; throws Error naming the file and the problem for any malformed content.
SafetensorsFile read_safetensors(const std::string& path);
/// Reads only the metadata of a file (its header): cheap for a large checkpoint. Errors as
/// read_safetensors' for the header.
Metadata read_safetensors_metadata(const std::string& path);
/// The tensor names of a file, sorted, read from its header only.
std::vector<std::string> read_safetensors_names(const std::string& path);
/// Writes tensors (any device or layout; names unique) atomically: a failed write leaves the file
/// at path as it was.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const Metadata& metadata = {});

/// metadata[key] = value.dump()
void set_metadata_json(Metadata& metadata, const std::string& key, const nlohmann::json& value);
/// The JSON value stored as a string under key; null when absent; Error when it is not JSON.
nlohmann::json metadata_json(const Metadata& metadata, const std::string& key);

struct LoadResult {
  std::vector<std::string> missing;     // in the module, not in the state
  std::vector<std::string> unexpected;  // in the state, not in the module
  std::vector<std::string> mismatched;  // "name: checkpoint [3, 2] float32, model [2, 3] float32"
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

/// Copies each tensor of state into the module's parameter or buffer of the same name, in place
/// (handles stay valid). Floating dtypes convert to the module's (a float16 checkpoint loads into
/// a float32 model); other dtypes must match exactly. strict: any missing, unexpected or
/// mismatched key throws one Error listing them all, before anything is copied; otherwise the
/// matching tensors are copied and the lists returned.
LoadResult load_state_dict(Module& m, const NamedTensors& state, bool strict = true);

/// Saves the module's state_dict, optionally the optimizer's state and extra_state (a JSON value
/// stored under vitrine.state), with metadata (see the keys above).
void save_checkpoint(const std::string& path, const Module& m, const Metadata& metadata = {},
                     const optim::Optimizer* opt = nullptr,
                     const nlohmann::json& extra_state = nullptr);
/// Loads a checkpoint into the module (as load_state_dict) and, when opt is given, the optimizer's
/// state (an error when the checkpoint has none or of another optimizer type). metadata_out
/// Refuses, before a model is built, a checkpoint too small to hold the weights its config asks
/// for: a model of at least `weights` weights (`what`, as "ViT dim 2048, depth 24") needs at least
/// that many bytes. A tiny file cannot make the loader allocate and initialise a huge model.
void check_checkpoint_holds(const std::string& path, int64_t weights, const std::string& what);

/// receives the file's metadata (parse vitrine.state etc. with metadata_json).
LoadResult load_checkpoint(const std::string& path, Module& m, optim::Optimizer* opt = nullptr,
                           bool strict = true, Metadata* metadata_out = nullptr);

}  // namespace vitrine::nn
