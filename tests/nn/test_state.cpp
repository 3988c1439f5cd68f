// nn/state: safetensors round trips (bit-exact), a file from another writer
// (tests/fixtures/foreign.safetensors, made by make_safetensors_fixtures.py with PyTorch's 16-bit
// conversions), every malformed-file error, atomic writes, load_state_dict and checkpoints.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/optim/adam.h"
#include "nn/optim/schedule.h"
#include "nn/state.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A safetensors file: the 8-byte length (the header's, unless given), the header, the data.
std::string st_bytes(const std::string& header, const std::string& data,
                     uint64_t length = UINT64_MAX) {
  uint64_t n = length == UINT64_MAX ? header.size() : length;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// The raw bytes of a contiguous CPU tensor.
std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * dtype_size(c.dtype()));
}

/// Each element's bits as an unsigned integer (values for int64 and bool).
std::vector<uint64_t> bits_of(const Tensor& t) {
  std::string b = bytes_of(t);
  size_t size = dtype_size(t.dtype());
  std::vector<uint64_t> out(t.numel());
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], b.data() + i * size, size);
  return out;
}

const Tensor& find(const nn::NamedTensors& ts, const std::string& name) {
  for (const auto& [n, t] : ts)
    if (n == name) return t;
  FAIL("no tensor " << name);
  static Tensor none;
  return none;
}

const json& expected() { return fixture_json("foreign_expected.json"); }

std::vector<uint64_t> expected_bits(const std::string& name, const char* key = "bits") {
  std::vector<uint64_t> out;
  for (const json& v : expected()["tensors"][name][key])
    out.push_back(v.is_number_unsigned() ? v.get<uint64_t>()
                                         : static_cast<uint64_t>(v.get<int64_t>()));
  return out;
}

struct Fc : nn::Module {
  Tensor weight, bias, scale, steps;
  Fc() {
    weight = register_parameter("weight", ops::zeros({3, 2}));
    bias = register_parameter("bias", ops::zeros({3}));
    scale = register_parameter("scale", ops::zeros({2}));
    steps = register_buffer("steps", ops::zeros({}, kInt64));
  }
  std::string type_name() const override { return "Fc"; }
};

struct Net : nn::Module {
  std::shared_ptr<Fc> fc;
  Tensor gain;
  Net() {
    fc = register_module("fc", std::make_shared<Fc>());
    gain = register_parameter("gain", ops::ones({2}));
  }
  std::string type_name() const override { return "Net"; }
};

/// The fixture's fc.* tensors, named as Net's.
nn::NamedTensors foreign_fc() {
  nn::NamedTensors out;
  for (auto& [n, t] : nn::read_safetensors(fixture("foreign.safetensors")).tensors)
    if (n.starts_with("fc.")) out.emplace_back(n, t);
  return out;
}

}  // namespace

TEST_CASE("safetensors: round trip is bit-exact") {
  TempDir tmp;
  Generator g(7);
  Tensor f32 = ops::randn({3, 4}, g);
  f32.data<float>()[0] = -0.0f;
  f32.data<float>()[1] = std::numeric_limits<float>::infinity();
  f32.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  f32.data<float>()[3] = 1e-40f;  // subnormal
  Tensor f64 = ops::randn({2, 3}, g, kFloat64);
  Tensor i64 = ops::from_vector(std::vector<int64_t>{0, -1, INT64_MAX, INT64_MIN}, {2, 2});
  Tensor mask = ops::gt(ops::randn({5}, g), ops::zeros({5}));
  Tensor bf16 = ops::randn({4}, g).to(kBFloat16);
  Tensor f16 = ops::randn({2, 2}, g).to(kFloat16);
  Tensor scalar = ops::scalar(3.5);
  Tensor empty = ops::zeros({0, 3});
  Tensor transposed = ops::randn({3, 2}, g).transpose(0, 1);  // not contiguous
  nn::NamedTensors ts = {{"z.f32", f32},     {"a.f64", f64},   {"i64", i64},
                         {"mask", mask},     {"bf16", bf16},   {"f16", f16},
                         {"scalar", scalar}, {"empty", empty}, {"transposed", transposed}};
  nn::Metadata md = {{"vitrine.config", R"({"dim": 8})"}, {"note", "ünïcode ✓"}};
  std::string path = tmp / "model.safetensors";
  nn::write_safetensors(path, ts, md);

  nn::SafetensorsFile f = nn::read_safetensors(path);
  CHECK(f.metadata == md);
  REQUIRE(f.tensors.size() == ts.size());
  for (const auto& item : ts) {
    const auto& name = item.first;
    const auto& t = item.second;
    INFO("tensor " << name);
    const Tensor& r = find(f.tensors, name);
    CHECK(r.shape() == t.shape());
    CHECK(r.dtype() == t.dtype());
    CHECK(r.is_contiguous());
    CHECK(bytes_of(r) == bytes_of(t));
  }

  // The layout other readers expect: header padded with spaces to a multiple of 8, names sorted,
  // data packed in that order.
  std::string file = read_file(path);
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  CHECK(n % 8 == 0);
  std::string header = file.substr(8, n);
  CHECK(header.find_last_not_of(' ') < header.size());
  json j = json::parse(header);
  CHECK(j["a.f64"]["dtype"] == "F64");
  CHECK(j["a.f64"]["data_offsets"] == json::array({0, 48}));
  CHECK(j["bf16"]["dtype"] == "BF16");
  CHECK(j["bf16"]["data_offsets"] == json::array({48, 56}));
  CHECK(j["mask"]["dtype"] == "BOOL");
  CHECK(j["scalar"]["shape"] == json::array());
  CHECK(j["empty"]["data_offsets"][0] == j["empty"]["data_offsets"][1]);
  CHECK(file.size() == 8 + n + j["z.f32"]["data_offsets"][1].get<uint64_t>());
  CHECK(header.find("\"a.f64\"") < header.find("\"bf16\""));
  CHECK(header.find("\"transposed\"") < header.find("\"z.f32\""));

  // Rewriting what was read gives the same bytes.
  std::string path2 = tmp / "again.safetensors";
  nn::write_safetensors(path2, f.tensors, f.metadata);
  CHECK(read_file(path2) == file);
}

TEST_CASE("safetensors: reads a file from another writer") {
  nn::SafetensorsFile f = nn::read_safetensors(fixture("foreign.safetensors"));
  const json& e = expected();
  CHECK(f.metadata == e["metadata"].get<nn::Metadata>());
  REQUIRE(f.tensors.size() == e["tensors"].size());
  std::map<std::string, DType> dtypes = {{"F32", kFloat32},   {"F64", kFloat64}, {"F16", kFloat16},
                                         {"BF16", kBFloat16}, {"I64", kInt64},   {"BOOL", kBool},
                                         {"I32", kInt64},     {"U8", kInt64}};
  for (const auto& item : f.tensors) {
    const auto& name = item.first;
    const auto& t = item.second;
    INFO("tensor " << name);
    const json& x = e["tensors"][name];
    CHECK(t.shape() == Dims(x["shape"].get<std::vector<int64_t>>()));
    CHECK(t.dtype() == dtypes.at(x["dtype"].get<std::string>()));
    CHECK(bits_of(t) == expected_bits(name));
  }
  // Widened integers keep their values.
  CHECK(find(f.tensors, "counts_i32").to_vector<int64_t>() ==
        std::vector<int64_t>{-5, 7, 2147483647, -2147483648LL});
  CHECK(find(f.tensors, "bytes_u8").to_vector<int64_t>() == std::vector<int64_t>{0, 200, 255});
}

TEST_CASE("safetensors: 16-bit conversions match PyTorch's") {
  nn::SafetensorsFile f = nn::read_safetensors(fixture("foreign.safetensors"));
  const Tensor& src = find(f.tensors, "src_f32");
  for (const char* name : {"src_as_f16", "src_as_bf16"}) {
    INFO(std::string(name));
    const Tensor& h = find(f.tensors, name);
    // float32 -> 16 bits (round to nearest even, overflow to inf, subnormals) as torch .to().
    // NaN payloads differ between torch's own paths (its vectorised bfloat16 conversion gives
    // 0xffff, the scalar one 0x7fc0), so a NaN only has to stay a NaN.
    std::vector<uint64_t> ours = bits_of(src.to(h.dtype())), torch = expected_bits(name);
    REQUIRE(ours.size() == torch.size());
    uint64_t exp_mask = h.dtype() == kFloat16 ? 0x7c00 : 0x7f80;
    uint64_t man_mask = h.dtype() == kFloat16 ? 0x03ff : 0x007f;
    auto is_nan = [&](uint64_t b) { return (b & exp_mask) == exp_mask && (b & man_mask) != 0; };
    for (size_t i = 0; i < ours.size(); ++i) {
      INFO("element " << i << ": ours " << ours[i] << ", torch " << torch[i]);
      CHECK((ours[i] == torch[i] || (is_nan(ours[i]) && is_nan(torch[i]))));
    }
    // 16 bits -> float32 as torch .float().
    CHECK(bits_of(h.to(kFloat32)) == expected_bits(name, "f32_bits"));
  }
}

TEST_CASE("safetensors: malformed files give an error naming the file and the problem") {
  TempDir tmp;
  std::string path = tmp / "bad.safetensors";
  std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string data(8, '\0');
  auto read_bytes = [&](const std::string& bytes) {
    write_file(path, bytes);
    return nn::read_safetensors(path);
  };

  SUBCASE("the reference file is valid") {
    CHECK(find(read_bytes(st_bytes(good_header, data)).tensors, "w").shape() == Dims{2});
  }
  SUBCASE("shorter than the header length") {
    CHECK_ERROR_CONTAINS(read_bytes("abc"), path.c_str(), "truncated", "3 bytes");
    CHECK_ERROR_CONTAINS(read_bytes(""), path.c_str(), "truncated", "0 bytes");
  }
  SUBCASE("data shorter than the offsets") {
    std::string bytes = st_bytes(good_header, data);
    CHECK_ERROR_CONTAINS(read_bytes(bytes.substr(0, bytes.size() - 3)), path.c_str(), "'w'",
                         "data_offsets [0, 8] are outside the data section (5 bytes", "truncated");
  }
  SUBCASE("header length larger than the file") {
    std::string bytes = st_bytes(good_header, data, 9999999);
    std::string want =
        fmt::format("header length 9999999 is larger than the file ({} bytes)", bytes.size());
    CHECK_ERROR_CONTAINS(read_bytes(bytes), path.c_str(), want.c_str());
    // A claimed length near 2^64 is refused before any allocation.
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(good_header, data, UINT64_MAX - 1)), path.c_str(),
                         "is larger than the file");
  }
  SUBCASE("header length over the sanity limit") {
    // A sparse file of 200 MB whose header would be all of it.
    uint64_t n = 200ull << 20;
    write_file(path, st_bytes("", "", n));
    fs::resize_file(path, 8 + n);
    CHECK_ERROR_CONTAINS(nn::read_safetensors(path), path.c_str(),
                         "header length 209715200 is over the limit of 104857600 bytes");
  }
  SUBCASE("offsets outside the data") {
    std::string h = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "'w'", "[4, 12]",
                         "outside the data section (8 bytes");
    h = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "[8, 4]", "outside");
    h = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "'w'",
                         "\"data_offsets\" must be two non-negative integers");
    h = R"({"w":{"dtype":"F32","shape":[2]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "\"data_offsets\" must be");
  }
  SUBCASE("overlapping tensors") {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, std::string(12, '\0'))), path.c_str(),
                         "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "overlap");
  }
  SUBCASE("byte count does not match the shape") {
    std::string h = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(),
                         "tensor 'w' has 8 bytes of data, but dtype F32 and shape [3] need 12");
    h = R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "tensor 'w'",
                         "entries must be non-negative integers");
    h = R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "tensor 'w'", "too large");
    // Found by fuzzing: a zero-size tensor (0 bytes, offsets fine) whose other dims overflow.
    h = R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "tensor 'w'",
                         "[0, 4294967296, 4294967296] is too large");
    h = R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(), "9 dims");
  }
  SUBCASE("unknown dtype") {
    std::string h = R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(),
                         "tensor 'w' has unknown dtype 'F8_E4M3'", "supported: F32");
    h = R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(),
                         "tensor 'w' has no string \"dtype\"");
  }
  SUBCASE("a header or metadata nested too deep (found by fuzzing: SIGSEGV in a copy)") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(R"({"w": )" + deep + "}", data)), path.c_str(),
                         "the header", "nested deeper than 64 levels");
    std::string meta = nlohmann::json({{"__metadata__", {{"vitrine.mean", deep}}}}).dump();
    write_file(path, st_bytes(meta, ""));
    const nn::Metadata md = nn::read_safetensors_metadata(path);
    CHECK_ERROR_CONTAINS(nn::metadata_json(md, "vitrine.mean"), "metadata 'vitrine.mean'",
                         "nested deeper than 64 levels");
  }
  SUBCASE("invalid JSON") {
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(R"({"w":{"dtype":"F32",)", data)), path.c_str(),
                         "the header: invalid JSON at line 1");
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes("[1, 2]", data)), path.c_str(),
                         "the header is not a JSON object (got array)");
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(R"({"w":[1]})", data)), path.c_str(), "tensor 'w'",
                         "expected an object");
  }
  SUBCASE("metadata values must be strings") {
    std::string h = R"({"__metadata__":{"epoch":3},)"
                    R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, data)), path.c_str(),
                         "__metadata__ value of 'epoch' is not a string (got number 3)");
    h = R"({"__metadata__":["x"]})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, "")), path.c_str(),
                         "__metadata__ must be an object");
  }
  SUBCASE("bool bytes other than 0 and 1") {
    std::string h = R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
    CHECK_ERROR_CONTAINS(read_bytes(st_bytes(h, std::string("\x01\x07", 2))), path.c_str(),
                         "tensor 'm' (BOOL) holds byte 7 at element 1");
  }
  SUBCASE("not a file") {
    CHECK_ERROR_CONTAINS(nn::read_safetensors(tmp / "missing.safetensors"),
                         "missing.safetensors: cannot open");
    CHECK_ERROR_CONTAINS(nn::read_safetensors(tmp.dir.string()), "not a regular file");
  }
}

TEST_CASE("safetensors: writes are atomic") {
  TempDir tmp;
  std::string path = tmp / "model.safetensors";
  nn::NamedTensors good = {{"w", ops::tensor({1, 2, 3})}};
  nn::write_safetensors(path, good);
  std::string before = read_file(path);

  SUBCASE("an undefined tensor") {
    CHECK_ERROR_CONTAINS(nn::write_safetensors(path, {{"w", ops::ones({2})}, {"v", Tensor()}}),
                         path.c_str(), "tensor 'v' is undefined");
  }
  SUBCASE("a repeated or reserved name") {
    CHECK_ERROR_CONTAINS(
        nn::write_safetensors(path, {{"w", ops::ones({2})}, {"w", ops::ones({1})}}),
        "tensor name 'w' appears twice");
    CHECK_ERROR_CONTAINS(nn::write_safetensors(path, {{"__metadata__", ops::ones({1})}}),
                         "invalid tensor name '__metadata__'");
  }
  SUBCASE("metadata that is not UTF-8") {
    CHECK_ERROR_CONTAINS(nn::write_safetensors(path, good, {{"k", "\xff\xfe"}}), path.c_str(),
                         "UTF-8");
  }
  SUBCASE("a rename that fails after the data is written") {
    // A directory in the way of the target: the temp file is written, the rename fails.
    std::string dir = tmp / "taken";
    fs::create_directory(dir);
    CHECK_ERROR_CONTAINS(nn::write_safetensors(dir, good), dir.c_str(), "cannot replace it with");
    CHECK(fs::is_directory(dir));
    CHECK(fs::is_empty(dir));
  }
  CHECK(read_file(path) == before);
  std::vector<std::string> files = tmp.files();
  std::erase(files, "taken");
  CHECK(files == std::vector<std::string>{"model.safetensors"});

  SUBCASE("a directory that does not exist") {
    std::string missing = tmp / "no/such/dir/model.safetensors";
    CHECK_ERROR_CONTAINS(nn::write_safetensors(missing, good), missing.c_str(), "cannot create");
    CHECK_FALSE(fs::exists(tmp / "no"));
  }
  SUBCASE("a successful overwrite replaces the file whole") {
    nn::write_safetensors(path, {{"w", ops::tensor({4, 5})}});
    CHECK(find(nn::read_safetensors(path).tensors, "w").to_vector<float>() ==
          std::vector<float>{4, 5});
    CHECK(tmp.files() == std::vector<std::string>{"model.safetensors"});
  }
}

TEST_CASE("load_state_dict: copies in place, converting floating dtypes") {
  Net net;
  Tensor weight = net.fc->weight;
  uint64_t version = weight.version();
  // The fixture's fc.weight is F16, fc.bias BF16, fc.scale F64, fc.steps I64; the model float32.
  nn::NamedTensors state = foreign_fc();
  state.emplace_back("gain", ops::tensor({2, 3}, kFloat64));
  nn::LoadResult r = nn::load_state_dict(net, state);
  CHECK(r.ok());
  CHECK(net.fc->weight.same(weight));  // identity kept
  CHECK(weight.version() > version);
  CHECK(weight.dtype() == kFloat32);
  CHECK(weight.requires_grad());
  CHECK(bits_of(weight) == expected_bits("fc.weight", "f32_bits"));
  CHECK(bits_of(net.fc->bias) == expected_bits("fc.bias", "f32_bits"));
  std::vector<float> scale;
  for (uint64_t b : expected_bits("fc.scale")) {
    double d;
    std::memcpy(&d, &b, 8);
    scale.push_back(static_cast<float>(d));
  }
  CHECK(net.fc->scale.to_vector<float>() == scale);
  CHECK(net.fc->steps.item<int64_t>() == 42);
  CHECK(net.gain.to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("load_state_dict: strict mode reports every problem in one error") {
  Net net;
  nn::NamedTensors state = {
      {"fc.weight", ops::ones({2, 3})},  // shape
      {"fc.bias", ops::ones({3})},       // fine
      {"fc.steps", ops::ones({})},       // float into int64
      {"head.weight", ops::ones({1})},   // unexpected
      {"head.bias", ops::ones({1})},     // unexpected
  };
  CHECK_ERROR_CONTAINS(nn::load_state_dict(net, state), "load_state_dict",
                       "(2 missing, 2 unexpected, 2 mismatched)", "missing: gain, fc.scale",
                       "unexpected: head.weight, head.bias",
                       "fc.weight: checkpoint [2, 3] float32, model [3, 2] float32",
                       "fc.steps: checkpoint [] float32, model [] int64");
  // Nothing was copied.
  CHECK(net.fc->bias.to_vector<float>() == std::vector<float>{0, 0, 0});

  nn::LoadResult r = nn::load_state_dict(net, state, /*strict=*/false);
  CHECK(r.missing == std::vector<std::string>{"gain", "fc.scale"});
  CHECK(r.unexpected == std::vector<std::string>{"head.weight", "head.bias"});
  REQUIRE(r.mismatched.size() == 2);
  CHECK(r.mismatched[0] == "fc.weight: checkpoint [2, 3] float32, model [3, 2] float32");
  CHECK(r.mismatched[1] == "fc.steps: checkpoint [] float32, model [] int64");
  CHECK_FALSE(r.ok());
  // The matching tensor was copied; the mismatched ones were left alone.
  CHECK(net.fc->bias.to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(net.fc->weight.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(net.fc->steps.item<int64_t>() == 0);
}

TEST_CASE("checkpoint: a model round trip carries its config and extra state") {
  TempDir tmp;
  std::string path = tmp / "ckpt.safetensors";
  Net a;
  {
    NoGradGuard ng;
    Generator g(3);
    for (auto& [n, t] : a.state_dict())
      if (is_float(t.dtype())) t.copy_(ops::randn(t.shape(), g));
    a.fc->steps.fill_(17);
  }
  nn::Metadata md;
  nn::set_metadata_json(md, nn::kConfigKey, {{"dim", 2}, {"classes", 3}});
  nn::set_metadata_json(md, nn::kMeanKey, {0.5, 0.25});
  nn::set_metadata_json(md, nn::kStdKey, {0.1, 0.2});
  nn::set_metadata_json(md, nn::kClassesKey, {"cat", "dog", "bird"});
  nn::save_checkpoint(path, a, md, nullptr, {{"epoch", 4}, {"schedule_step", 120}});

  Net b;
  nn::Metadata got;
  nn::LoadResult r = nn::load_checkpoint(path, b, nullptr, true, &got);
  CHECK(r.ok());
  for (const auto& item : a.state_dict()) {
    const auto& name = item.first;
    const auto& t = item.second;
    INFO(name);
    CHECK(bytes_of(find(b.state_dict(), name)) == bytes_of(t));
  }
  CHECK(nn::metadata_json(got, nn::kConfigKey) == json{{"dim", 2}, {"classes", 3}});
  CHECK(nn::metadata_json(got, nn::kClassesKey) == json{"cat", "dog", "bird"});
  CHECK(nn::metadata_json(got, nn::kMeanKey) == json{0.5, 0.25});
  CHECK(nn::metadata_json(got, nn::kStateKey)["epoch"] == 4);
  CHECK(nn::metadata_json(got, "absent").is_null());
  CHECK_ERROR_CONTAINS(nn::metadata_json({{"k", "{oops"}}, "k"), "metadata 'k': invalid JSON");

  // No optimizer state in this checkpoint.
  CHECK_FALSE(got.count(nn::kOptimizerKey));
  // A model that does not match is reported with the file's name.
  Fc other;
  CHECK_ERROR_CONTAINS(nn::load_checkpoint(path, other), path.c_str(), "4 missing, 5 unexpected",
                       "missing: weight, bias");
  CHECK_ERROR_CONTAINS(nn::save_checkpoint(path, a, {{nn::kStateKey, "{}"}}, nullptr, {{"x", 1}}),
                       "given twice");
}

namespace {
/// One Adam step on loss = sum(p^3) over the parameters.
void adam_step(Net& net, nn::optim::Optimizer& opt) {
  opt.zero_grad();
  Tensor loss = ops::scalar(0);
  for (const Tensor& p : net.parameters()) loss = loss + ops::sum(ops::pow(p, 3.0));
  loss.backward();
  opt.step();
}
}  // namespace

TEST_CASE("checkpoint: a model with its optimizer resumes exactly") {
  TempDir tmp;
  std::string path = tmp / "ckpt.safetensors";
  Net a;
  {
    NoGradGuard ng;
    Generator g(5);
    for (const Tensor& p : a.parameters()) Tensor(p).copy_(ops::randn(p.shape(), g));
  }
  nn::optim::Adam opt_a(a.parameters(), {.lr = 0.01});
  nn::optim::WarmupCosineSchedule schedule(2, 10);
  for (int s = 0; s < 3; ++s) {
    schedule.apply(opt_a, s);
    adam_step(a, opt_a);
  }
  nn::save_checkpoint(path, a, {}, &opt_a, {{"step", 3}, {"schedule", schedule.state_json()}});
  // The optimizer's tensors sit beside the model's under "optimizer.".
  nn::SafetensorsFile f = nn::read_safetensors(path);
  CHECK(find(f.tensors, "optimizer.0.0.exp_avg").shape() == Dims{2});  // gain
  CHECK(f.tensors.size() == a.state_dict().size() + opt_a.state_tensors().size());

  Net b;
  nn::optim::Adam opt_b(b.parameters(), {.lr = 0.5});
  nn::Metadata md;
  CHECK(nn::load_checkpoint(path, b, &opt_b, true, &md).ok());
  CHECK(opt_b.state_json() == opt_a.state_json());
  nn::NamedTensors sa = opt_a.state_tensors(), sb = opt_b.state_tensors();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK(bytes_of(sa[i].second) == bytes_of(sb[i].second));
  }
  json state = nn::metadata_json(md, nn::kStateKey);
  CHECK(state["step"] == 3);
  auto schedule_b = nn::optim::schedule_from_json(state["schedule"]);

  // One more step on each gives the same parameters, bit for bit.
  schedule.apply(opt_a, 3);
  schedule_b->apply(opt_b, 3);
  adam_step(a, opt_a);
  adam_step(b, opt_b);
  for (const auto& item : a.state_dict()) {
    const auto& name = item.first;
    const auto& t = item.second;
    INFO(name);
    CHECK(bytes_of(find(b.state_dict(), name)) == bytes_of(t));
  }

  // The optimizer must be the one saved, and the checkpoint must hold one.
  Net c;
  nn::optim::AdamW adamw(c.parameters());
  CHECK_ERROR_CONTAINS(nn::load_checkpoint(path, c, &adamw), path.c_str(),
                       "the checkpoint's optimizer state is for Adam, not AdamW");
  // Loading without an optimizer ignores the optimizer's tensors.
  CHECK(nn::load_checkpoint(path, c).ok());
  std::string model_only = tmp / "model.safetensors";
  nn::save_checkpoint(model_only, a);
  CHECK_ERROR_CONTAINS(nn::load_checkpoint(model_only, c, &adamw), model_only.c_str(),
                       "holds no optimizer state");
}
