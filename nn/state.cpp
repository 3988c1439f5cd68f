// safetensors reading and writing, load_state_dict and checkpoints (see state.h for the format).
// Reading trusts nothing in the file: the header length is checked against the file's size before
// the header is read, every tensor's offsets against the data section before its tensor is
// allocated, and tensors may not overlap.
#include "nn/state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "autograd/grad_mode.h"
#include "backends/checked.h"
#include "nn/json.h"
#include "nn/optim/optimizer.h"

namespace vitrine::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as is");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
const std::string kOptimizerPrefix = "optimizer.";

/// A dtype as the file names it. widen: an integer type read into int64.
struct Format {
  std::string_view name;
  DType dtype;
  uint64_t size;
  bool widen = false;
  bool is_signed = true;
};

constexpr Format kFormats[] = {
    {"F32", kFloat32, 4},
    {"F64", kFloat64, 8},
    {"I64", kInt64, 8},
    {"BOOL", kBool, 1},
    {"BF16", kBFloat16, 2},
    {"F16", kFloat16, 2},
    {"I8", kInt64, 1, true},
    {"I16", kInt64, 2, true},
    {"I32", kInt64, 4, true},
    {"U8", kInt64, 1, true, false},
    {"U16", kInt64, 2, true, false},
    {"U32", kInt64, 4, true, false},
};

const Format* find_format(std::string_view name) {
  for (const Format& f : kFormats)
    if (f.name == name) return &f;
  return nullptr;
}

std::string_view format_name(DType t) {
  for (const Format& f : kFormats)
    if (f.dtype == t && !f.widen) return f.name;
  VT_ASSERT(false);
  return "";
}

/// Closes a file descriptor on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exact(int fd, void* buf, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    VT_CHECK(got >= 0, "{}: read failed: {}", path, std::strerror(errno));
    VT_CHECK(got > 0, "{}: the file ended early (was it changed while reading?)", path);
    p += got;
    n -= got;
    offset += got;
  }
}

/// A tensor's header entry, checked against the data section's size.
struct Entry {
  std::string name;
  const Format* format;
  Dims shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const json& v,
                  uint64_t data_size) {
  VT_CHECK(v.is_object(),
           "{}: tensor '{}': expected an object with dtype, shape and data_offsets, "
           "got {}",
           path, name, v.type_name());
  VT_CHECK(v.contains("dtype") && v.at("dtype").is_string(),
           "{}: tensor '{}' has no string \"dtype\"", path, name);
  std::string dtype = v.at("dtype").get<std::string>();
  Entry e{name, find_format(dtype), {}, 0, 0};
  if (!e.format) {
    std::string known;
    for (const Format& f : kFormats) known += (known.empty() ? "" : ", ") + std::string(f.name);
    fail("{}: tensor '{}' has unknown dtype '{}' (supported: {})", path, name, dtype, known);
  }

  VT_CHECK(v.contains("shape") && v.at("shape").is_array(),
           "{}: tensor '{}' has no \"shape\" array", path, name);
  const json& shape = v.at("shape");
  VT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims),
           "{}: tensor '{}' has {} dims; at most {} are supported", path, name, shape.size(),
           kMaxDims);
  for (const json& d : shape) {
    // nlohmann parses non-negative integers as unsigned, negative ones as signed.
    VT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
             "{}: tensor '{}' has shape {}: entries must be non-negative integers", path, name,
             json_brief(shape));
    e.shape.push_back(d.get<int64_t>());
  }
  // Bytes the shape needs, checked (a zero dim must not hide huge ones that overflow the strides).
  const int64_t need = checked_bytes(std::span<const int64_t>(e.shape.begin(), e.shape.end()),
                                     static_cast<int64_t>(e.format->size),
                                     fmt::format("{}: tensor '{}'", path, name));

  static const json kNone;
  const json& off = v.contains("data_offsets") ? v.at("data_offsets") : kNone;
  VT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
               off[1].is_number_unsigned(),
           "{}: tensor '{}': \"data_offsets\" must be two non-negative integers, got {}", path,
           name, json_brief(off));
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  VT_CHECK(e.begin <= e.end && e.end <= data_size,
           "{}: tensor '{}': data_offsets [{}, {}] are outside the data section ({} bytes; is the "
           "file truncated?)",
           path, name, e.begin, e.end, data_size);

  VT_CHECK(e.end - e.begin == static_cast<uint64_t>(need),
           "{}: tensor '{}' has {} bytes of data, but dtype {} and shape {} need {} bytes", path,
           name, e.end - e.begin, dtype, e.shape, need);
  return e;
}

Metadata parse_metadata(const std::string& path, const json& v) {
  VT_CHECK(v.is_object(), "{}: __metadata__ must be an object of strings, got {}", path,
           v.type_name());
  Metadata md;
  for (const auto& [key, value] : v.items()) {
    VT_CHECK(value.is_string(), "{}: __metadata__ value of '{}' is not a string (got {} {})", path,
             key, value.type_name(), json_brief(value));
    md[key] = value.get<std::string>();
  }
  return md;
}

template <typename S>
void widen_to_int64(const uint8_t* src, int64_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    S v;
    std::memcpy(&v, src + i * sizeof(S), sizeof(S));
    dst[i] = static_cast<int64_t>(v);
  }
}

Tensor read_tensor(int fd, const std::string& path, const Entry& e, uint64_t data_start) {
  Tensor t = Tensor::empty(e.shape, e.format->dtype);
  uint64_t bytes = e.end - e.begin;
  if (bytes == 0) return t;
  if (!e.format->widen) {
    read_exact(fd, t.data_ptr(), bytes, data_start + e.begin, path);
    if (e.format->dtype == kBool) {
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      for (uint64_t i = 0; i < bytes; ++i)
        VT_CHECK(b[i] <= 1, "{}: tensor '{}' (BOOL) holds byte {} at element {} (expected 0 or 1)",
                 path, e.name, static_cast<int>(b[i]), i);
    }
    return t;
  }
  std::vector<uint8_t> raw(bytes);
  read_exact(fd, raw.data(), bytes, data_start + e.begin, path);
  auto* dst = t.data<int64_t>();
  int64_t n = t.numel();
  bool s = e.format->is_signed;
  if (e.format->size == 1)
    s ? widen_to_int64<int8_t>(raw.data(), dst, n) : widen_to_int64<uint8_t>(raw.data(), dst, n);
  else if (e.format->size == 2)
    s ? widen_to_int64<int16_t>(raw.data(), dst, n) : widen_to_int64<uint16_t>(raw.data(), dst, n);
  else
    s ? widen_to_int64<int32_t>(raw.data(), dst, n) : widen_to_int64<uint32_t>(raw.data(), dst, n);
  return t;
}

/// Up to `limit` items joined with ", ", then "... (N more)".
std::string join(const std::vector<std::string>& items, const char* sep = ", ", size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? sep : "") + items[i];
  if (items.size() > limit) s += fmt::format("{}... ({} more)", sep, items.size() - limit);
  return s;
}

/// What loading a state into a module will do: checked in full (strict: throws on any problem)
/// before anything is copied, so that a caller can check other things before applying it.
struct LoadPlan {
  LoadResult result;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (module tensor, source)
  void apply() const {
    NoGradGuard no_grad;
    for (const auto& [dst, src] : copies)  // converting on the host: backends copy equal dtypes
      Tensor(dst).copy_(src.dtype() == dst.dtype() ? src : src.to(dst.dtype()));
  }
};

LoadPlan plan_load(Module& m, const NamedTensors& state, bool strict, const std::string& where) {
  NamedTensors targets = m.state_dict();
  std::map<std::string, Tensor> by_name(targets.begin(), targets.end());
  std::set<std::string> seen;
  LoadPlan plan;
  LoadResult& r = plan.result;
  auto& copies = plan.copies;
  for (const auto& [name, src] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      r.unexpected.push_back(name);
      continue;
    }
    seen.insert(name);
    const Tensor& dst = it->second;
    if (!src.defined()) {
      r.mismatched.push_back(fmt::format("{}: undefined in the state", name));
      continue;
    }
    bool dtype_ok = src.dtype() == dst.dtype() ||
                    (is_floating_point(src.dtype()) && is_floating_point(dst.dtype()));
    if (src.shape() != dst.shape() || !dtype_ok)
      r.mismatched.push_back(fmt::format("{}: checkpoint {} {}, model {} {}", name, src.shape(),
                                         dtype_name(src.dtype()), dst.shape(),
                                         dtype_name(dst.dtype())));
    else
      copies.emplace_back(dst, src);
  }
  for (const auto& [name, t] : targets)
    if (!seen.count(name)) r.missing.push_back(name);

  if (strict && !r.ok()) {
    std::string msg = fmt::format(
        "{}: the state does not match the model ({} missing, {} "
        "unexpected, {} mismatched)",
        where, r.missing.size(), r.unexpected.size(), r.mismatched.size());
    if (!r.missing.empty()) msg += "\n  missing: " + join(r.missing);
    if (!r.unexpected.empty()) msg += "\n  unexpected: " + join(r.unexpected);
    if (!r.mismatched.empty()) msg += "\n  mismatched: " + join(r.mismatched, "; ");
    throw Error(msg);
  }
  return plan;
}

LoadResult load_into(Module& m, const NamedTensors& state, bool strict, const std::string& where) {
  LoadPlan plan = plan_load(m, state, strict, where);
  plan.apply();
  return plan.result;
}

/// The file's JSON header (the 8-byte length, then the JSON object), checked; `size` receives the
/// file's size and `header_bytes` the header's length.
json read_header(const Fd& f, const std::string& path, uint64_t& size, uint64_t& header_bytes) {
  struct stat st;
  VT_CHECK(::fstat(f.fd, &st) == 0, "{}: cannot stat: {}", path, std::strerror(errno));
  VT_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path);
  size = st.st_size;
  VT_CHECK(size >= 8, "{}: the file is truncated: {} bytes, too short for the 8-byte header length",
           path, size);
  uint64_t n = 0;
  read_exact(f.fd, &n, 8, 0, path);
  // What torch.save writes: a zip archive (PyTorch >= 1.6) or a pickle (protocol 2 to 5).
  unsigned char magic[8];
  std::memcpy(magic, &n, 8);
  const bool zip = magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
  const bool pickle = magic[0] == 0x80 && magic[1] >= 2 && magic[1] <= 5;
  VT_CHECK(!zip && !pickle,
           "{}: this is a PyTorch checkpoint ({}), not a safetensors file: convert it with "
           "/usr/bin/python3 tools/convert/convert.py {} {}.safetensors (docs/vit.md, "
           "\"Bringing weights\")",
           path, zip ? "torch.save's zip archive" : "a Python pickle", path,
           std::filesystem::path(path).stem().string());
  VT_CHECK(n <= size - 8, "{}: header length {} is larger than the file ({} bytes)", path, n, size);
  VT_CHECK(n <= kMaxHeaderBytes, "{}: header length {} is over the limit of {} bytes", path, n,
           kMaxHeaderBytes);
  header_bytes = n;
  std::string text(n, ' ');
  read_exact(f.fd, text.data(), n, 8, path);
  const json header =
      parse_json(text, fmt::format("{}: the header", path), {.max_bytes = kMaxHeaderBytes});
  VT_CHECK(header.is_object(), "{}: the header is not a JSON object (got {})", path,
           header.type_name());
  return header;
}

}  // namespace

Metadata read_safetensors_metadata(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  VT_CHECK(f.fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  uint64_t size = 0, n = 0;
  const json header = read_header(f, path, size, n);
  return header.contains("__metadata__") ? parse_metadata(path, header.at("__metadata__"))
                                         : Metadata{};
}

std::vector<std::string> read_safetensors_names(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  VT_CHECK(f.fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  uint64_t size = 0, n = 0;
  const json header = read_header(f, path, size, n);
  std::vector<std::string> names;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

SafetensorsFile read_safetensors(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  VT_CHECK(f.fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  uint64_t size = 0, n = 0;
  const json header = read_header(f, path, size, n);
  uint64_t data_start = 8 + n, data_size = size - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__")
      out.metadata = parse_metadata(path, v);
    else
      entries.push_back(parse_entry(path, name, v, data_size));
  }

  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& a = *by_offset[i - 1];
    const Entry& b = *by_offset[i];
    VT_CHECK(b.begin >= a.end, "{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", path, a.name,
             a.begin, a.end, b.name, b.begin, b.end);
  }

  for (const Entry& e : entries)
    out.tensors.emplace_back(e.name, read_tensor(f.fd, path, e, data_start));
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const Metadata& metadata) {
  // Check everything and build the header before touching the file system.
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& nt : tensors) {
    VT_CHECK(!nt.first.empty() && nt.first != "__metadata__", "{}: invalid tensor name '{}'", path,
             nt.first);
    VT_CHECK(nt.second.defined(), "{}: tensor '{}' is undefined", path, nt.first);
    sorted.push_back(&nt);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  for (size_t i = 1; i < sorted.size(); ++i)
    VT_CHECK(sorted[i - 1]->first != sorted[i]->first, "{}: tensor name '{}' appears twice", path,
             sorted[i]->first);

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* nt : sorted) {
    const Tensor& t = nt->second;
    uint64_t bytes = t.numel() * dtype_size(t.dtype());
    header[nt->first] = {{"dtype", std::string(format_name(t.dtype()))},
                         {"shape", t.shape().vec()},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::type_error& e) {
    fail("{}: cannot write the header (names and metadata must be UTF-8): {}", path, e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');

  std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  VT_CHECK(f, "{}: cannot create {}: {}", path, tmp, std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    VT_CHECK(std::fwrite(p, 1, n, f) == n, "{}: write failed: {}", path, std::strerror(errno));
  };
  try {
    uint64_t n = text.size();
    put(&n, 8);
    put(text.data(), text.size());
    NoGradGuard no_grad;
    for (const auto* nt : sorted) {
      Tensor c = nt->second.to(kCPU).contiguous();
      put(c.data_ptr(), c.numel() * dtype_size(c.dtype()));
    }
    VT_CHECK(std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0, "{}: write failed: {}", path,
             std::strerror(errno));
    std::FILE* done = f;
    f = nullptr;
    VT_CHECK(std::fclose(done) == 0, "{}: write failed: {}", path, std::strerror(errno));
    VT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot replace it with {}: {}", path,
             tmp, std::strerror(errno));
  } catch (...) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  // Make the rename itself durable. The new file is complete either way, so a directory that
  // cannot be synced (some file systems refuse) does not fail the save.
  std::string dir = std::filesystem::path(path).parent_path().string();
  Fd d{::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) (void)::fsync(d.fd);
}

void set_metadata_json(Metadata& metadata, const std::string& key, const nlohmann::json& value) {
  metadata[key] = value.dump();
}

nlohmann::json metadata_json(const Metadata& metadata, const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  return parse_json(it->second, fmt::format("metadata '{}'", key));
}

void check_checkpoint_holds(const std::string& path, int64_t weights, const std::string& what) {
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(path, ec);
  VT_CHECK(ec || bytes >= static_cast<uint64_t>(weights),
           "{}: its config describes {} with at least {} weights, but the file has only {} bytes: "
           "refused before building the model (the config does not match the file)",
           path, what, weights, bytes);
}

LoadResult load_state_dict(Module& m, const NamedTensors& state, bool strict) {
  return load_into(m, state, strict, "load_state_dict");
}

void save_checkpoint(const std::string& path, const Module& m, const Metadata& metadata,
                     const optim::Optimizer* opt, const nlohmann::json& extra_state) {
  NamedTensors tensors = m.state_dict();
  Metadata md = metadata;
  if (opt) {
    for (const auto& [name, t] : tensors)
      VT_CHECK(!name.starts_with(kOptimizerPrefix),
               "{}: the model's tensor '{}' would clash with the optimizer's prefix '{}'", path,
               name, kOptimizerPrefix);
    VT_CHECK(!md.count(kOptimizerKey), "{}: metadata key '{}' is reserved for the optimizer", path,
             kOptimizerKey);
    for (const auto& [name, t] : opt->state_tensors())
      tensors.emplace_back(kOptimizerPrefix + name, t);
    set_metadata_json(md, kOptimizerKey,
                      {{"type", opt->type_name()}, {"state", opt->state_json()}});
  }
  if (!extra_state.is_null()) {
    VT_CHECK(!md.count(kStateKey),
             "{}: metadata key '{}' is given twice (in metadata and as "
             "extra_state)",
             path, kStateKey);
    set_metadata_json(md, kStateKey, extra_state);
  }
  write_safetensors(path, tensors, md);
}

LoadResult load_checkpoint(const std::string& path, Module& m, optim::Optimizer* opt, bool strict,
                           Metadata* metadata_out) {
  SafetensorsFile f = read_safetensors(path);
  bool has_opt = f.metadata.count(kOptimizerKey) > 0;
  NamedTensors model_state, opt_state;
  for (auto& [name, t] : f.tensors) {
    if (has_opt && name.starts_with(kOptimizerPrefix))
      opt_state.emplace_back(name.substr(kOptimizerPrefix.size()), t);
    else
      model_state.emplace_back(name, t);
  }

  // Check the optimizer's entry before changing the model.
  json opt_json;
  if (opt) {
    VT_CHECK(has_opt, "{}: the checkpoint holds no optimizer state (no '{}' in its metadata)", path,
             kOptimizerKey);
    json j;
    try {
      j = metadata_json(f.metadata, kOptimizerKey);
    } catch (const Error& e) {
      fail("{}: {}", path, e.what());
    }
    VT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string() && j.contains("state"),
             "{}: metadata '{}' should be {{\"type\": ..., \"state\": ...}}", path, kOptimizerKey);
    VT_CHECK(j["type"] == opt->type_name(),
             "{}: the checkpoint's optimizer state is for {}, not {}", path,
             j["type"].get<std::string>(), opt->type_name());
    opt_json = j["state"];
  }

  // Everything is checked before anything changes: the model's plan first, then the optimizer
  // (whose load_state checks before it changes itself), then the model's copies.
  LoadPlan plan = plan_load(m, model_state, strict, path);
  if (opt) {
    try {
      opt->load_state(opt_state, opt_json);
    } catch (const Error& e) {
      fail("{}: {}", path, e.what());
    }
  }
  plan.apply();
  LoadResult r = plan.result;
  if (metadata_out) *metadata_out = std::move(f.metadata);
  return r;
}

}  // namespace vitrine::nn
