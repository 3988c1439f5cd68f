// Image folders (see image_folder.h). The constructor only lists files; get() reads one file and
// decodes it (read_image, image_decode.h), which is safe from several threads.
#include "nn/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "nn/data/image_decode.h"

namespace vitrine::nn::data {

namespace fs = std::filesystem;

namespace {

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

/// The image files below dir at any depth (hidden files and folders skipped), sorted by path.
std::vector<std::string> list_images(const fs::path& dir, const char* who) {
  std::vector<std::string> files;
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(dir, ec);
  VT_CHECK(!ec, "{}: cannot list folder '{}' ({})", who, dir.string(), ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    VT_CHECK(!ec, "{}: cannot list folder '{}' ({})", who, dir.string(), ec.message());
    if (is_hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec) && is_image_file(it->path())) files.push_back(it->path().string());
  }
  VT_CHECK(!ec, "{}: cannot list folder '{}' ({})", who, dir.string(), ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

std::string trim(std::string s) {
  const char* space = " \t\r\n";
  s.erase(0, std::min(s.size(), s.find_first_not_of(space)));
  s.erase(s.find_last_not_of(space) + 1);
  return s;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    fields.push_back(trim(line.substr(start, tab - start)));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

const char* kImageExtensions = "(.png, .jpg, .jpeg, .bmp, any case)";

}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options)
    : source_(root), channels_(options.channels), limits_(options.limits) {
  VT_CHECK(channels_ == 1 || channels_ == 3, "image_folder '{}': channels must be 1 or 3, got {}",
           root, channels_);
  std::error_code ec;
  VT_CHECK(fs::exists(root, ec), "image_folder: root folder '{}' does not exist", root);
  VT_CHECK(fs::is_directory(root, ec), "image_folder: root '{}' is not a folder", root);
  std::vector<std::string> names;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (!is_hidden(it->path()) && it->is_directory(ec))
      names.push_back(it->path().filename().string());
  VT_CHECK(!ec, "image_folder: cannot list root folder '{}' ({})", root, ec.message());
  VT_CHECK(!names.empty(),
           "image_folder: root folder '{}' has no class sub-folders; expected root/<class>/<image>",
           root);
  std::sort(names.begin(), names.end());
  for (size_t c = 0; c < names.size(); ++c) {
    const fs::path dir = fs::path(root) / names[c];
    std::vector<std::string> files = list_images(dir, "image_folder");
    VT_CHECK(!files.empty(), "image_folder: class folder '{}' is empty: it holds no images {}",
             dir.string(), kImageExtensions);
    files_.insert(files_.end(), files.begin(), files.end());
    labels_.insert(labels_.end(), files.size(), static_cast<int64_t>(c));
  }
  classes_ = std::move(names);
}

ImageFolder::ImageFolder(std::string source, std::vector<std::string> files,
                         std::vector<int64_t> labels, std::vector<std::string> classes,
                         ImageFolderOptions options)
    : source_(std::move(source)),
      files_(std::move(files)),
      labels_(std::move(labels)),
      classes_(std::move(classes)),
      channels_(options.channels),
      limits_(options.limits) {
  VT_CHECK(channels_ == 1 || channels_ == 3, "image_folder '{}': channels must be 1 or 3, got {}",
           source_, channels_);
  VT_CHECK(files_.size() == labels_.size(), "image_folder '{}': {} files but {} labels", source_,
           files_.size(), labels_.size());
  VT_CHECK(!files_.empty(), "image_folder '{}': no images", source_);
  const int64_t n = static_cast<int64_t>(classes_.size());
  for (size_t i = 0; i < labels_.size(); ++i)
    VT_CHECK(labels_[i] >= 0 && labels_[i] < n,
             "image_folder '{}': image '{}' has label {}; expected 0 to {} ({} classes)", source_,
             files_[i], labels_[i], n - 1, n);
}

Example ImageFolder::get(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "image_folder '{}': index {} is out of range (size {})",
           source_, index, size());
  Example ex;
  ex.label = labels_[static_cast<size_t>(index)];
  try {
    ex.image = read_image(files_[static_cast<size_t>(index)], channels_, limits_);
  } catch (const Error& e) {
    fail("image_folder: {}", e.what());
  }
  return ex;
}

std::shared_ptr<ImageFolder> tiny_imagenet(const std::string& root, bool train,
                                           ImageFolderOptions options) {
  std::error_code ec;
  VT_CHECK(fs::is_directory(root, ec), "tiny_imagenet: root folder '{}' does not exist", root);
  const fs::path wnids_path = fs::path(root) / "wnids.txt";
  std::ifstream wnids_in(wnids_path);
  VT_CHECK(wnids_in.good(), "tiny_imagenet: '{}' is missing; expected one WordNet id a line",
           wnids_path.string());
  std::vector<std::string> wnids;
  for (std::string line; std::getline(wnids_in, line);)
    if (!trim(line).empty()) wnids.push_back(trim(line));
  VT_CHECK(!wnids.empty(), "tiny_imagenet: '{}' holds no WordNet ids", wnids_path.string());
  std::sort(wnids.begin(), wnids.end());
  for (size_t i = 1; i < wnids.size(); ++i)
    VT_CHECK(wnids[i] != wnids[i - 1], "tiny_imagenet: '{}' lists '{}' twice", wnids_path.string(),
             wnids[i]);
  std::map<std::string, int64_t> label_of;
  for (size_t i = 0; i < wnids.size(); ++i) label_of[wnids[i]] = static_cast<int64_t>(i);

  // Readable names: the first synonym of words.txt ("n01443537\tgoldfish, Carassius auratus").
  std::vector<std::string> classes = wnids;
  std::ifstream words_in(fs::path(root) / "words.txt");
  for (std::string line; words_in && std::getline(words_in, line);) {
    std::vector<std::string> fields = split_tabs(line);
    auto it = label_of.find(fields[0]);
    if (fields.size() < 2 || it == label_of.end()) continue;
    std::string name = trim(fields[1].substr(0, fields[1].find(',')));
    if (!name.empty()) classes[static_cast<size_t>(it->second)] = name;
  }
  std::map<std::string, int> uses;
  for (const std::string& c : classes) ++uses[c];
  for (size_t i = 0; i < classes.size(); ++i)
    if (uses[classes[i]] > 1) classes[i] += " (" + wnids[i] + ")";

  std::vector<std::string> files;
  std::vector<int64_t> labels;
  if (train) {
    const fs::path train_dir = fs::path(root) / "train";
    for (size_t c = 0; c < wnids.size(); ++c) {
      const fs::path dir = train_dir / wnids[c] / "images";
      VT_CHECK(fs::is_directory(dir, ec),
               "tiny_imagenet: class folder '{}' is missing ('{}' is in {})", dir.string(),
               wnids[c], wnids_path.string());
      std::vector<std::string> found = list_images(dir, "tiny_imagenet");
      VT_CHECK(!found.empty(), "tiny_imagenet: class folder '{}' is empty: it holds no images {}",
               dir.string(), kImageExtensions);
      files.insert(files.end(), found.begin(), found.end());
      labels.insert(labels.end(), found.size(), static_cast<int64_t>(c));
    }
    return std::make_shared<ImageFolder>(train_dir.string(), std::move(files), std::move(labels),
                                         std::move(classes), options);
  }

  const fs::path val_dir = fs::path(root) / "val";
  const fs::path ann_path = val_dir / "val_annotations.txt";
  std::ifstream ann_in(ann_path);
  VT_CHECK(ann_in.good(), "tiny_imagenet: '{}' is missing", ann_path.string());
  std::vector<std::pair<std::string, int64_t>> entries;
  std::set<std::string> seen;
  int line_no = 0;
  for (std::string line; std::getline(ann_in, line);) {
    ++line_no;
    if (trim(line).empty()) continue;
    std::vector<std::string> fields = split_tabs(line);
    VT_CHECK(fields.size() >= 2 && !fields[0].empty() && !fields[1].empty(),
             "tiny_imagenet: '{}' line {}: expected 'file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1', "
             "got '{}'",
             ann_path.string(), line_no, trim(line));
    auto it = label_of.find(fields[1]);
    VT_CHECK(it != label_of.end(),
             "tiny_imagenet: '{}' line {}: image '{}' has unknown class '{}' (not in '{}')",
             ann_path.string(), line_no, fields[0], fields[1], wnids_path.string());
    const fs::path image = val_dir / "images" / fields[0];
    VT_CHECK(fs::is_regular_file(image, ec),
             "tiny_imagenet: '{}' line {}: image file '{}' does not exist", ann_path.string(),
             line_no, image.string());
    VT_CHECK(seen.insert(fields[0]).second,
             "tiny_imagenet: '{}' line {}: image '{}' is listed twice", ann_path.string(), line_no,
             fields[0]);
    entries.emplace_back(image.string(), it->second);
  }
  VT_CHECK(!entries.empty(), "tiny_imagenet: '{}' holds no annotations", ann_path.string());
  std::sort(entries.begin(), entries.end());
  for (auto& [file, label] : entries) {
    files.push_back(file);
    labels.push_back(label);
  }
  return std::make_shared<ImageFolder>(val_dir.string(), std::move(files), std::move(labels),
                                       std::move(classes), options);
}

}  // namespace vitrine::nn::data
