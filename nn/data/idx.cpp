// IDX readers (see idx.h for the format). A file is read whole: raw files with their size from the
// file system, gzipped ones through zlib's gzread in growing chunks (their real size is only
// known once decompressed); then the header is checked against the bytes actually there.
#include "nn/data/idx.h"

#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

namespace vitrine::nn::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8 data, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8 data, 1 dimension

/// The content of an IDX file, decompressed when it is gzipped.
struct IdxFile {
  std::vector<uint8_t> bytes;
  bool gzipped = false;
};

IdxFile read_idx_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  VT_CHECK(fs::is_regular_file(path, ec), "IDX file '{}' does not exist or is not a file", path);
  const uint64_t file_size = fs::file_size(path, ec);
  VT_CHECK(!ec, "IDX file '{}': cannot read its size ({})", path, ec.message());

  IdxFile out;
  std::ifstream in(path, std::ios::binary);
  VT_CHECK(in.good(), "IDX file '{}' cannot be opened", path);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  out.gzipped = in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!out.gzipped) {
    out.bytes.resize(file_size);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(out.bytes.data()), static_cast<std::streamsize>(file_size));
    VT_CHECK(static_cast<uint64_t>(in.gcount()) == file_size, "IDX file '{}': read {} bytes of {}",
             path, in.gcount(), file_size);
    return out;
  }
  in.close();

  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzopen(path.c_str(), "rb"), gzclose);
  VT_CHECK(gz != nullptr, "IDX file '{}': zlib cannot open it", path);
  gzbuffer(gz.get(), 1u << 17);
  constexpr size_t kChunk = 1u << 20;
  // A gzip bomb (a small file that inflates without end) stops here: the largest IDX data set,
  // EMNIST byclass, inflates to 0.55 GB.
  constexpr size_t kMaxInflated = size_t{2} << 30;
  size_t used = 0;
  for (;;) {
    VT_CHECK(used < kMaxInflated,
             "IDX file '{}': its gzip data inflates to more than {} bytes, the limit for an IDX "
             "file (a damaged file or a gzip bomb?)",
             path, kMaxInflated);
    out.bytes.resize(used + kChunk);
    const int n = gzread(gz.get(), out.bytes.data() + used, static_cast<unsigned>(kChunk));
    if (n <= 0) break;
    used += static_cast<size_t>(n);
  }
  int errnum = Z_OK;
  const char* reason = gzerror(gz.get(), &errnum);
  VT_CHECK(errnum == Z_OK,
           "IDX file '{}': the gzip data is corrupt or truncated ({}) after {} decompressed bytes",
           path, reason ? reason : "", used);
  out.bytes.resize(used);
  out.bytes.shrink_to_fit();
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return static_cast<uint32_t>(b[at]) << 24 | static_cast<uint32_t>(b[at + 1]) << 16 |
         static_cast<uint32_t>(b[at + 2]) << 8 | static_cast<uint32_t>(b[at + 3]);
}

/// What a magic number means, for messages.
std::string describe_magic(uint32_t magic) {
  if (magic == kImagesMagic) return "an IDX images file";
  if (magic == kLabelsMagic) return "an IDX labels file";
  if ((magic >> 16) == 0x1f8b) return "gzip data inside gzip data";
  if ((magic >> 16) != 0) return "not an IDX file";
  return fmt::format("an IDX file of type 0x{:02x} with {} dimensions", (magic >> 8) & 0xff,
                     magic & 0xff);
}

/// Checks magic and payload size; returns the header's dimensions.
std::vector<uint64_t> parse_header(const IdxFile& f, const std::string& path, uint32_t expected,
                                   const char* kind) {
  const char* how = f.gzipped ? " (decompressed)" : "";
  VT_CHECK(f.bytes.size() >= 4, "IDX {} file '{}' is truncated: {} bytes{}, too short for a header",
           kind, path, f.bytes.size(), how);
  const uint32_t magic = be32(f.bytes, 0);
  VT_CHECK(magic == expected,
           "IDX {} file '{}' has the wrong magic number 0x{:08x} ({}); expected 0x{:08x}", kind,
           path, magic, describe_magic(magic), expected);
  const size_t ndims = expected & 0xff, header = 4 + 4 * ndims;
  VT_CHECK(f.bytes.size() >= header,
           "IDX {} file '{}' is truncated: {} bytes{}, its header needs {}", kind, path,
           f.bytes.size(), how, header);
  std::vector<uint64_t> dims(ndims);
  uint64_t item = 1;  // bytes per item (one image, one label)
  for (size_t d = 0; d < ndims; ++d) {
    dims[d] = be32(f.bytes, 4 + 4 * d);
    if (d > 0) item *= dims[d];  // < 2^64: at most two u32 factors
  }
  const uint64_t payload = f.bytes.size() - header;
  VT_CHECK(item > 0, "IDX {} file '{}' has empty items: dimensions {}", kind, path,
           fmt::join(dims, " x "));
  // count * item > payload, without overflow.
  VT_CHECK(dims[0] <= payload / item,
           "IDX {} file '{}' is truncated: its header says {} items of {} bytes but only {} "
           "bytes{} follow the {}-byte header (room for {} items)",
           kind, path, dims[0], item, payload, how, header, payload / item);
  VT_CHECK(dims[0] * item == payload,
           "IDX {} file '{}' has {} bytes{} after its {} items of {} bytes; expected exactly {} "
           "(a wrong header?)",
           kind, path, payload - dims[0] * item, how, dims[0], item, dims[0] * item);
  VT_CHECK(dims[0] > 0, "IDX {} file '{}' holds no items", kind, path);
  return dims;
}

std::vector<std::string> digit_classes() {
  std::vector<std::string> c;
  for (int i = 0; i < 10; ++i) c.push_back(std::to_string(i));
  return c;
}

/// dir/name.gz when it exists, else dir/name when it exists; an error naming both otherwise.
std::string find_file(const std::string& dir, const std::string& name, const char* dataset) {
  namespace fs = std::filesystem;
  std::error_code ec;
  VT_CHECK(fs::is_directory(dir, ec), "{}: folder '{}' does not exist", dataset, dir);
  const std::string gz = (fs::path(dir) / (name + ".gz")).string();
  const std::string raw = (fs::path(dir) / name).string();
  if (fs::exists(gz, ec)) return gz;
  if (fs::exists(raw, ec)) return raw;
  fail("{}: neither '{}' nor '{}' exists", dataset, gz, raw);
}

std::shared_ptr<IdxDataset> standard_layout(const std::string& dir, bool train,
                                            std::vector<std::string> classes, const char* dataset) {
  const std::string prefix = train ? "train" : "t10k";
  IdxOptions opt;
  opt.classes = std::move(classes);
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte", dataset);
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte", dataset);
  return std::make_shared<IdxDataset>(images, labels, std::move(opt));
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path,
                       IdxOptions options)
    : images_path_(images_path), transpose_(options.transpose) {
  uint64_t count = 0;
  {
    IdxFile f = read_idx_file(images_path);
    std::vector<uint64_t> dims = parse_header(f, images_path, kImagesMagic, "images");
    count = dims[0];
    rows_ = static_cast<int64_t>(dims[1]);
    cols_ = static_cast<int64_t>(dims[2]);
    f.bytes.erase(f.bytes.begin(), f.bytes.begin() + 16);
    pixels_ = std::move(f.bytes);
  }
  IdxFile f = read_idx_file(labels_path);
  std::vector<uint64_t> dims = parse_header(f, labels_path, kLabelsMagic, "labels");
  VT_CHECK(dims[0] == count, "IDX files '{}' and '{}' do not match: {} images but {} labels",
           images_path, labels_path, count, dims[0]);
  labels_.assign(f.bytes.begin() + 8, f.bytes.end());

  int64_t max_label = 0;
  for (int64_t l : labels_) max_label = std::max(max_label, l);
  if (options.classes.empty()) {
    for (int64_t i = 0; i <= max_label; ++i) classes_.push_back(std::to_string(i));
  } else {
    classes_ = std::move(options.classes);
    const int64_t n = static_cast<int64_t>(classes_.size());
    for (size_t i = 0; i < labels_.size(); ++i)
      VT_CHECK(labels_[i] < n,
               "IDX labels file '{}': label {} of item {} is out of range; expected 0 to {} ({} "
               "classes)",
               labels_path, labels_[i], i, n - 1, n);
  }
}

Example IdxDataset::get(int64_t index) const {
  VT_CHECK(index >= 0 && index < size(), "IDX dataset '{}': index {} is out of range (size {})",
           images_path_, index, size());
  Example ex;
  ex.label = labels_[static_cast<size_t>(index)];
  Image& im = ex.image;
  im.channels = 1;
  im.height = height();
  im.width = width();
  im.pixels.resize(static_cast<size_t>(rows_ * cols_));
  const uint8_t* src = pixels_.data() + static_cast<size_t>(index * rows_ * cols_);
  if (!transpose_) {
    for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = src[i] / 255.0f;
  } else {
    // out(y, x) = stored(x, y); out is cols_ x rows_.
    for (int64_t y = 0; y < cols_; ++y)
      for (int64_t x = 0; x < rows_; ++x)
        im.pixels[static_cast<size_t>(y * rows_ + x)] = src[x * cols_ + y] / 255.0f;
  }
  return ex;
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

std::shared_ptr<IdxDataset> fashion_mnist(const std::string& dir, bool train) {
  return standard_layout(dir, train, fashion_mnist_classes(), "fashion-mnist");
}

std::shared_ptr<IdxDataset> mnist(const std::string& dir, bool train) {
  return standard_layout(dir, train, digit_classes(), "mnist");
}

std::shared_ptr<IdxDataset> kmnist(const std::string& dir, bool train) {
  return standard_layout(dir, train, {"o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"},
                         "kmnist");
}

std::shared_ptr<IdxDataset> emnist(const std::string& dir, const std::string& split, bool train) {
  const std::string digits = "0123456789", upper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                    lower = "abcdefghijklmnopqrstuvwxyz";
  // bymerge and balanced merge the lower-case letters that look like their capitals.
  const std::string merged = "cijklmopsuvwxyz";
  auto chars = [](const std::string& s) {
    std::vector<std::string> v;
    for (char c : s) v.emplace_back(1, c);
    return v;
  };
  std::vector<std::string> classes;
  if (split == "byclass") {
    classes = chars(digits + upper + lower);
  } else if (split == "bymerge" || split == "balanced") {
    std::string kept;
    for (char c : lower)
      if (merged.find(c) == std::string::npos) kept += c;
    classes = chars(digits + upper + kept);
  } else if (split == "letters") {
    classes = chars(lower);
    classes.insert(classes.begin(), "N/A");
  } else if (split == "digits" || split == "mnist") {
    classes = chars(digits);
  } else {
    fail(
        "emnist: unknown split '{}'; expected byclass, bymerge, balanced, letters, digits or mnist",
        split);
  }
  const std::string prefix = "emnist-" + split + (train ? "-train" : "-test");
  IdxOptions opt;
  opt.classes = std::move(classes);
  opt.transpose = true;
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte", "emnist");
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte", "emnist");
  return std::make_shared<IdxDataset>(images, labels, std::move(opt));
}

}  // namespace vitrine::nn::data
