// The HTML report of a run folder (see trainer.h for its files): one self-contained page, inline
// CSS and SVG, no script and nothing fetched from the network, so it opens offline and can be
// mailed as it is. Every string read from the run's files is HTML-escaped.
//
// Charts (tools::line_chart_svg in common/html.h, which states the rule of the axes): a tick
// at every multiple of a step of 1, 2 or 5 x 10^k (4 to 7 ticks), from the one at or below the
// data's minimum to the one at or above its maximum, labelled with the step's decimals. Non-finite
// points (a diverged loss is written as null in metrics.jsonl and never reaches a chart) are
// skipped.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vitrine::train {

/// Writes run_dir/report.html: a self-contained page (inline CSS and SVG, no script, no network)
/// with the run's summary (model config, data set, optimizer, epochs from config.json; final test
/// accuracy and macro F1), the training loss and accuracy curves (train lines from metrics.jsonl
/// against global_step, and the validation points "eval" lines, drawn on the same axes), the
/// learning-rate curve, the per-class precision/recall/F1 table and the confusion matrix as a
/// coloured SVG grid with counts and class names (from confusion_matrix.json). Missing
/// confusion_matrix.json (a stopped run) => the page says the test set was not evaluated yet.
/// Written atomically (a temp file renamed). Returns the path written. Errors (VT_CHECK /
/// vitrine::Error) name the file: metrics.jsonl missing or with a line that is not JSON (give the
/// line number).
///
/// The page holds exactly four SVGs when the test set was evaluated (loss, accuracy, learning
/// rate, confusion matrix) and three otherwise; a chart without data is an SVG saying "no data".
/// The accuracy chart also has the "test" lines' points, the summary the best validation
/// accuracy, the last global_step and the last "train_seconds" (as h:mm:ss) when lines have it.
/// A missing config.json leaves the summary without the config rows; a config.json or
/// confusion_matrix.json that is not valid JSON, or not of the expected shape, is an Error naming
/// it. Test accuracy is printed as a percentage with two decimals ("93.33%"), F1, precision and
/// recall with four ("0.9310").
std::string write_report(const std::string& run_dir);

/// The SVG of a confusion matrix [true][pred] with class names; cells shaded by the row-normalised
/// value (white to blue), counts written in each cell (text white on dark cells) when there are at
/// most 20 classes.
///
/// classes: one name per class, or empty for the class indices (an Error otherwise, as for a
/// matrix that is not square). A cell is dark when its share of the row is above 0.5; each cell
/// also has a <title> tooltip "true A, predicted B: n (p% of A)". Counts are <text class="count">,
/// row by row.
std::string confusion_svg(const std::vector<std::vector<int64_t>>& confusion,
                          const std::vector<std::string>& classes);

}  // namespace vitrine::train
