// .npy writing and reading (see npy.h for the format). Both sides assume a little-endian host,
// as the '<' in the dtypes says the file is.
#include "explain/npy.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "backends/checked.h"
#include "backends/error.h"
#include "common/files.h"

namespace vitrine::explain {

static_assert(std::endian::native == std::endian::little, "npy: a little-endian host is assumed");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;  // numpy's ARRAY_ALIGN: the data starts at a multiple of it
/// numpy >= 1.23 pads the header so that the first dimension can grow to this many digits in
/// place (GROWTH_AXIS_MAX_DIGITS in numpy/lib/format.py).
constexpr size_t kGrowthDigits = 21;

/// Python's repr of a shape tuple: "()", "(5,)", "(2, 3)".
std::string shape_repr(const Dims& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

// ---- reading the header: a Python dict literal -------------------------------------------------

/// The header's values, as far as this reader understands them.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

/// A cursor over the header text that parses the few Python literals numpy writes in it:
/// strings, True/False, and tuples of integers (with Python 2's "3L" accepted).
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  Header parse() {
    Header h;
    bool descr = false, order = false, shape = false;
    expect('{');
    while (!accept('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr") {
        h.descr = string();
        descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        shape = true;
      } else {
        fail(
            "{}: the .npy header has an unexpected key '{}' (expected 'descr', "
            "'fortran_order' and 'shape'): {}",
            path_, key, text_);
      }
      if (!accept(',')) {
        expect('}');
        break;
      }
    }
    VT_CHECK(descr && order && shape,
             "{}: the .npy header lacks one of 'descr', 'fortran_order', 'shape': {}", path_,
             text_);
    return h;
  }

 private:
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n')) ++at_;
  }
  bool accept(char c) {
    skip_space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  [[noreturn]] void bad(const char* expected) {
    fail("{}: the .npy header is not a dict literal numpy writes: expected {} at offset {} of: {}",
         path_, expected, at_, text_);
  }
  void expect(char c) {
    if (!accept(c)) bad(fmt::format("'{}'", c).c_str());
  }
  std::string string() {
    skip_space();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) bad("a quoted string");
    const char quote = text_[at_++];
    const size_t end = text_.find(quote, at_);
    if (end == std::string::npos) bad("a closing quote");
    std::string s = text_.substr(at_, end - at_);
    at_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (text_.compare(at_, std::strlen(word), word) == 0) {
        at_ += std::strlen(word);
        return value;
      }
    bad("True or False");
  }
  std::optional<int64_t> integer() {
    skip_space();
    const size_t start = at_;
    int64_t v = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      if (v > (INT64_MAX - 9) / 10) bad("a dimension that fits in 64 bits");
      v = v * 10 + (text_[at_++] - '0');
    }
    if (at_ == start) return std::nullopt;
    if (at_ < text_.size() && text_[at_] == 'L') ++at_;
    return v;
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!accept(')')) {
      const std::optional<int64_t> d = integer();
      if (!d) bad("a non-negative integer");
      dims.push_back(*d);
      if (!accept(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }

  const std::string& path_;
  const std::string& text_;
  size_t at_ = 0;
};

/// An element type of a .npy file that read_npy converts to float32.
struct NpyType {
  const char* descr;
  size_t size;
  float (*to_float)(const char* p);
};

template <typename T>
float load_as_float(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return static_cast<float>(v);
}

constexpr NpyType kTypes[] = {
    {"<f4", 4, load_as_float<float>},   {"<f8", 8, load_as_float<double>},
    {"|u1", 1, load_as_float<uint8_t>}, {"<i8", 8, load_as_float<int64_t>},
    {"<i4", 4, load_as_float<int32_t>},
};

}  // namespace

void write_npy(const std::string& path, const Tensor& t) {
  VT_CHECK(t.defined(), "{}: write_npy was given an undefined tensor", path);
  VT_CHECK(is_floating_point(t.dtype()),
           "{}: write_npy writes float tensors as '<f4', got a {} tensor", path,
           dtype_name(t.dtype()));
  const Tensor c = t.detach().to(kCPU).to(kFloat32).contiguous();

  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}",
                                   shape_repr(c.shape()));
  if (c.shape().size() > 0) {
    const size_t digits = std::to_string(c.shape()[0]).size();
    header.append(digits < kGrowthDigits ? kGrowthDigits - digits : 0, ' ');
  }
  // The prefix (magic, 2 version bytes, 2 length bytes) + header + '\n' fills whole 64-byte
  // blocks. numpy always pads, with a whole block of spaces when the header fits exactly.
  const size_t prefix = kMagicLen + 4;
  header.append(kAlign - (prefix + header.size() + 1) % kAlign, ' ');
  header += '\n';
  VT_ASSERT(header.size() <= UINT16_MAX);  // at most 8 dims: a few hundred bytes

  std::string bytes(kMagic, kMagicLen);
  bytes += '\x01';  // version 1.0
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);  // uint16, little-endian
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char*>(c.data_ptr()),
               static_cast<size_t>(c.numel()) * sizeof(float));
  tools::write_file_atomically(path, bytes);
}

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  VT_CHECK(f, "{}: cannot open it: {}", path, std::strerror(errno));
  const std::string bytes(std::istreambuf_iterator<char>(f), {});
  VT_CHECK(!f.bad(), "{}: cannot read it: {}", path, std::strerror(errno));

  VT_CHECK(bytes.size() >= kMagicLen + 4 && bytes.compare(0, kMagicLen, kMagic) == 0,
           "{}: not a .npy file: expected the magic \"\\x93NUMPY\" at its start, found {:?} "
           "(the file has {} bytes)",
           path, bytes.substr(0, kMagicLen), bytes.size());
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(bytes[i])); };
  const size_t major = byte(6), minor = byte(7);
  VT_CHECK((major == 1 || major == 2) && minor == 0,
           "{}: .npy format version {}.{} is not supported (expected 1.0 or 2.0)", path, major,
           minor);
  // Version 1.0 has a uint16 header length, 2.0 a uint32 (both little-endian).
  const size_t length_bytes = major == 1 ? 2 : 4;
  VT_CHECK(bytes.size() >= 8 + length_bytes, "{}: truncated in the .npy header length", path);
  size_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= byte(8 + i) << (8 * i);
  const size_t data_start = 8 + length_bytes + header_len;
  VT_CHECK(bytes.size() >= data_start,
           "{}: truncated: the .npy header is {} bytes long, the file has only {} after its "
           "prefix",
           path, header_len, bytes.size() - 8 - length_bytes);
  const std::string text = bytes.substr(8 + length_bytes, header_len);
  const Header h = HeaderParser(path, text).parse();

  const NpyType* type = nullptr;
  for (const NpyType& k : kTypes)
    if (h.descr == k.descr) type = &k;
  VT_CHECK(type,
           "{}: .npy dtype '{}' is not supported (expected '<f4', '<f8', '|u1', '<i8' or "
           "'<i4')",
           path, h.descr);
  VT_CHECK(!h.fortran_order,
           "{}: the .npy array is in Fortran order; expected C order (save "
           "np.ascontiguousarray(a))",
           path);
  const std::string what = path + ": the .npy shape";
  const int64_t need = checked_bytes(h.shape, static_cast<int64_t>(type->size), what);
  const Dims shape(h.shape);
  const size_t have = bytes.size() - data_start;
  VT_CHECK(static_cast<uint64_t>(need) <= have,
           "{}: truncated: shape {} of '{}' needs {} data bytes, found {}", path, shape, h.descr,
           need, have);
  VT_CHECK(static_cast<uint64_t>(need) == have,
           "{}: {} bytes follow the data of shape {} of '{}' ({} bytes)", path,
           have - static_cast<size_t>(need), shape, h.descr, need);

  Tensor out = Tensor::empty(shape, kFloat32);
  float* dst = out.data<float>();
  const char* src = bytes.data() + data_start;
  for (size_t i = 0; i < static_cast<size_t>(out.numel()); ++i)
    dst[i] = type->to_float(src + i * type->size);
  return out;
}

}  // namespace vitrine::explain
