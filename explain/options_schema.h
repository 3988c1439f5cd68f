// One request's options, named once: what to explain (the methods, the class) and how (each
// method's settings, the input's geometry and normalisation, the drawing). vitrine-explain's flags
// (cli.cpp, through CLI11) and the server's JSON fields (serve.cpp) are both generated from the
// table below, with the same names: an entry's name is the command line's long flag without its
// `--` and the JSON key; its aliases are older JSON spellings that stay accepted (`ig_rule` for
// `ig-method`, `methods` for `method`, ...). GET /api/options reports the table (names, types,
// defaults, ranges, choices, help) and the upload page builds its controls from that report.
//
// An entry reads and writes one field of RequestValues (the request as given: choices by name);
// method_options() turns those into the methods' Options, for the command line and the server
// alike. The server checks some ranges against its model and limits (the layer against the
// model's depth, the steps against --max-steps): an entry's server_range.
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "explain/explain.h"

namespace vitrine::explain {

/// One request's options as given, the choices by name (the defaults are the command line's).
struct RequestValues {
  std::string methods = "all";       // --method: comma-separated names, or all
  std::string target = "predicted";  // --target: predicted, label, a class index or name
  Options opt;                       // the numbers of explain.h's Options
  std::string head_fusion = "mean", ig_method = "gausslegendre", baseline = "black";
  std::string colormap = "inferno";
  double alpha = 0.5;
  std::string upsample = "bilinear", style = "overlay", distance_norm = "raw";
  std::string resize = "model", crop = "center", pos_interp = "size";
  std::string normalise = "checkpoint";  // checkpoint, imagenet or none
  std::vector<float> mean, std;          // the command line's own normalisation
  std::string patch;                     // qkv's query patch ROW,COL; empty: the centre
  std::string gradcam_layer;             // a model other than a ViT: Grad-CAM's submodule
  int64_t cell = 4;                      // a model other than a ViT: the grid's cell, pixels
  bool heads = true, grids = false;      // the server's answer: every head's picture, raw grids
};

enum class OptionType {
  Integer,  // a whole number in [min, max]
  Number,   // a number in [min, max] (an end may be open)
  Choice,   // one of choices
  Text,     // a string the entry's check accepts (resize: model, stretch, none, factor:F)
  Flag,     // true or false (the server's alone)
  Numbers,  // several numbers (the command line's alone: --mean, --std)
  Methods,  // method names: "all", "a,b" or (JSON) ["a", "b"]
  Class,    // the class explained: predicted (-1 in JSON), a class index or name
  Patch,    // a patch of the grid: ROW,COL ([row, col] in JSON)
};
std::string option_type_name(OptionType t);

/// Where an option is read: the command line, the server's JSON, or both.
enum OptionScope : unsigned { kCliOption = 1, kServerOption = 2, kBothScopes = 3 };

using OptionField =
    std::variant<int64_t& (*)(RequestValues&), uint64_t& (*)(RequestValues&),
                 double& (*)(RequestValues&), std::string& (*)(RequestValues&),
                 bool& (*)(RequestValues&), std::vector<float>& (*)(RequestValues&)>;

/// What a server checks a request against: its model and its limits.
struct ServerContext {
  int64_t depth = 1, heads = 1, mlp_dim = 1, max_steps = 256;
  std::vector<std::string> classes;
  bool headless = false;
};

/// A range on the server, and what it bounds (named in the error a client gets).
struct ServerRange {
  double min, max;
  std::string what;
};

struct OptionSpec {
  std::string name;                       // the long flag without --, and the JSON key
  std::vector<std::string> aliases = {};  // older JSON spellings, still accepted
  OptionType type = OptionType::Text;
  OptionField field = {};
  std::string help = {};
  std::vector<std::string> choices = {};  // Choice
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  double min = -kInf, max = kInf;  // Integer, Number (Numbers: each value)
  bool min_open = false, max_open = false;
  /// What the number is, in an out-of-range message ("the fraction of attention kept").
  std::string what = {};
  unsigned scope = kBothScopes;
  /// The server's range, from its model and limits (null: min and max above).
  ServerRange (*server_range)(const ServerContext&) = nullptr;
  /// Text: an empty string when the value is fine, else what is wrong with it.
  std::string (*check)(const std::string&) = nullptr;
  /// The command line's name for its value in --help (empty: CLI11's, from the type).
  std::string value_name = {};
};

/// Every option of a request, in the order --help and the page show them.
const std::vector<OptionSpec>& request_options();
/// The entry of a name or an alias; null when there is none.
const OptionSpec* find_request_option(std::string_view name);
/// The names of the entries in scope (kCliOption, kServerOption), in the table's order.
std::vector<std::string> request_option_names(unsigned scope);

/// An entry's value in values, as JSON (its default when values are the defaults).
nlohmann::json option_value(const OptionSpec& spec, const RequestValues& values);

/// One JSON field of a request into values, checked against the server's model and limits. key:
/// the name the client used (named in the error, an Error whose message starts "option KEY:").
void read_json_option(const OptionSpec& spec, const std::string& key, const nlohmann::json& value,
                      const ServerContext& context, RequestValues& values);

/// The server's report of the options (GET /api/options' "options"): per entry in kServerOption,
/// its name, aliases, type, default (from defaults), min and max (the server's), choices, help.
nlohmann::json options_report(const ServerContext& context, const RequestValues& defaults);

/// The table as Markdown (docs/explain.md's; `vitrine-explain --list-options`): flag, JSON,
/// type, default, range or choices, help.
std::string options_markdown();

/// The methods' Options from values: the choices' enums, the query patch (an Error naming
/// --patch when it is not ROW,COL). Leaves black and white empty (the input's normalisation
/// gives them).
Options method_options(const RequestValues& values);

}  // namespace vitrine::explain
