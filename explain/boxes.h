// Ground-truth object boxes for --evaluate's localisation measures (the pointing game and the
// energy in the box), read from a file, in each image's own pixel coordinates:
//   CSV   image,x0,y0,x1,y1[,label]   one box a row, several rows per image allowed; a first row
//         "image,x0,y0,x1,y1[,label]" is a header; x1, y1 the first column and row past the box
//         (as a Python slice or PIL's crop box), so the box is x0 <= x < x1, y0 <= y < y1
//   JSON  {"image.jpg": [[x0, y0, x1, y1], ...], ...}   the same coordinates
//   tiny-imagenet-200's val/val_annotations.txt: file \t wnid \t x0 \t y0 \t x1 \t y1, one box a
//         line, its corners inclusive (x0 <= x <= x1), as the data set writes them
// Fractional coordinates are rounded outwards to whole pixels. Errors name the file and the line
// (the image and box for JSON).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/data/pasted.h"

namespace vitrine::explain {

/// Boxes by image name as the file writes it.
using BoxTable = std::map<std::string, std::vector<nn::data::Box>>;

/// Reads a boxes file: JSON when it ends in .json, tiny-imagenet's layout when its name is
/// val_annotations.txt or its lines are tab-separated, else CSV.
BoxTable read_boxes(const std::string& path);

/// The boxes of an image from a table: by its path as given, else by its file name (the part
/// after the last '/'); null when the table has neither.
const std::vector<nn::data::Box>* find_boxes(const BoxTable& table, const std::string& image);

}  // namespace vitrine::explain
