// explain/npy: .npy files byte for byte as numpy 1.24's np.save writes them (the header
// bytes of a known shape, recorded from numpy), round trips, every dtype the reader takes in
// files laid out as numpy lays them out, and each bad input with its message.
#include <cstring>
#include <fstream>

#include "explain/npy.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using explain::read_npy;
using explain::write_npy;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  REQUIRE(f);
  f << bytes;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

/// A .npy file as numpy lays it out: magic, version major.0, the header's length (2 bytes in
/// 1.0, 4 in 2.0), the dict padded with spaces and '\n' to a multiple of 64 bytes, the data.
std::string npy(const std::string& dict, const std::string& data, int major = 1) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  header.append(64 - (8 + length_bytes + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < length_bytes; ++i) out += static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("npy: the header of a [2, 3] array is numpy's, byte for byte") {
  TempDir dir;
  const std::string path = dir / "a.npy";
  write_npy(path, ops::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
  // np.save(f, np.arange(1, 7, dtype=np.float32).reshape(2, 3)) in numpy 1.24: a 118-byte
  // header (the dict, 58 spaces, '\n') after the 10-byte prefix, so the data starts at 128.
  const std::string header = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                             std::string(58, ' ') + "\n";
  REQUIRE(header.size() == 128);
  const std::string bytes = read_bytes(path);
  CHECK(bytes == header + raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  CHECK(dir.files() == std::vector<std::string>{"a.npy"});  // no temp file left behind
}

TEST_CASE("npy: shapes are written as Python tuples, data from the first of 64-byte blocks") {
  TempDir dir;
  struct Case {
    Dims shape;
    std::string tuple;
  };
  for (const Case& c : {Case{{5}, "(5,)"}, Case{{}, "()"},
                        Case{{1, 2, 3, 4, 5, 6, 7, 8}, "(1, 2, 3, 4, 5, 6, 7, 8)"}}) {
    INFO(c.tuple);
    write_npy(dir / "a.npy", ops::zeros(c.shape));
    const std::string bytes = read_bytes(dir / "a.npy");
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + c.tuple + ", }";
    CHECK(bytes.compare(10, dict.size(), dict) == 0);
    CHECK(bytes.size() == 128 + 4 * static_cast<size_t>(c.shape.numel()));
    CHECK(bytes[127] == '\n');
  }
  // A zero-size shape whose other dims overflow 64 bits is refused, as numpy refuses it ("array
  // is too big"): its strides would overflow.
  CHECK_ERROR_CONTAINS(
      ops::zeros({0, 1000000000, 1000000000, 1000000000, 1000000000, 1000000000, 1000000000, 100}),
      "too large");
}

TEST_CASE("npy: round trips keep float32 bits, other float dtypes and layouts are converted") {
  TempDir dir;
  Generator g(7);
  const Tensor x = ops::randn({3, 4, 5}, g, kFloat32);
  write_npy(dir / "x.npy", x);
  const Tensor back = read_npy(dir / "x.npy");
  CHECK(back.dtype() == kFloat32);
  CHECK(back.shape() == x.shape());
  CHECK(bits(back) == bits(x));

  const Tensor d = ops::randn({4, 3}, g, kFloat64);  // float64 -> float32, transposed -> C order
  write_npy(dir / "d.npy", d.permute({1, 0}));
  const Tensor e = read_npy(dir / "d.npy");
  CHECK(e.shape() == Dims{3, 4});
  CHECK(bits(e) == bits(d.permute({1, 0}).contiguous().to(kFloat32)));

  write_npy(dir / "s.npy", ops::from_vector(std::vector<float>{2.5f}));  // 0-d: shape ()
  CHECK(read_npy(dir / "s.npy").shape() == Dims{});
  CHECK(read_npy(dir / "s.npy").item() == 2.5);
}

TEST_CASE("npy: reads '<f8', '|u1', '<i8', '<i4' and version 2.0 into float32") {
  TempDir dir;
  const std::string path = dir / "a.npy";
  const std::string shape = "'fortran_order': False, 'shape': (2, 2), }";
  write_bytes(path, npy("{'descr': '<f8', " + shape, raw(std::vector<double>{0.5, -1, 1e300, 3})));
  check_close(read_npy(path), {0.5, -1, INFINITY, 3}, 0, 0);  // float32 overflows to inf
  write_bytes(path, npy("{'descr': '|u1', " + shape, raw(std::vector<uint8_t>{0, 1, 128, 255})));
  check_close(read_npy(path), {0, 1, 128, 255}, 0, 0);
  write_bytes(path, npy("{'descr': '<i8', " + shape, raw(std::vector<int64_t>{-3, 0, 7, 1 << 20})));
  check_close(read_npy(path), {-3, 0, 7, 1 << 20}, 0, 0);
  write_bytes(path, npy("{'descr': '<i4', " + shape, raw(std::vector<int32_t>{-3, 0, 7, 9})));
  check_close(read_npy(path), {-3, 0, 7, 9}, 0, 0);
  // Version 2.0 (a 4-byte header length); keys in another order, double quotes, Python 2's 3L.
  write_bytes(path, npy("{\"shape\": (3L,), 'fortran_order': False, 'descr': '<f4'}",
                        raw(std::vector<float>{1, 2, 3}), 2));
  const Tensor t = read_npy(path);
  CHECK(t.shape() == Dims{3});
  check_close(t, {1, 2, 3}, 0, 0);
}

TEST_CASE("npy: bad files are Errors naming the file and what was found") {
  TempDir dir;
  const std::string path = dir / "bad.npy";
  const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data = raw(std::vector<float>{1, 2});

  CHECK_ERROR_CONTAINS(read_npy(dir / "missing.npy"), dir / "missing.npy", "cannot open");
  write_bytes(path, "PK\x03\x04 a zip file, not an array");
  CHECK_ERROR_CONTAINS(read_npy(path), path, "not a .npy file", "\\x93NUMPY", "\"PK\\x03\\x04 a\"");
  std::string version3 = npy(f4, data);
  version3[6] = '\x03';
  write_bytes(path, version3);
  CHECK_ERROR_CONTAINS(read_npy(path), path, "version 3.0 is not supported");
  write_bytes(path, npy(f4, data).substr(0, 40));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "truncated", "header is 118 bytes long");
  write_bytes(path, npy(f4, data.substr(0, 6)));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "truncated", "shape [2] of '<f4' needs 8 data bytes",
                       "found 6");
  write_bytes(path, npy(f4, data + "xy"));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "2 bytes follow the data");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "Fortran order", "expected C order");
  for (const char* descr : {">f4", "|b1", "<f2", "<c8"}) {
    write_bytes(
        path, npy(fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': (2,), }}", descr),
                  data));
    CHECK_ERROR_CONTAINS(read_npy(path), path, fmt::format("dtype '{}' is not supported", descr),
                         "'<f4', '<f8', '|u1', '<i8' or '<i4'");
  }
  write_bytes(path, npy("{'descr': '<f4', 'shape': (2,), }", data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "lacks one of");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "expected '('");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "unexpected key 'x'");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, "
                        "1, 1, 2), }",
                        data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "9 dims; at most 8");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                        "4294967296, 4294967296), }",
                        data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "shape", "too large");  // overflows 64 bits
  // Fuzzing found these: the product overflows a signed 64-bit count, and a zero dim hides huge
  // ones (the element count is 0, their strides overflow).
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (12646558490498040, "
                        "400559), }",
                        data));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "[12646558490498040, 400559] is too large");
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, "
                        "4294967296, 4294967296), }",
                        ""));
  CHECK_ERROR_CONTAINS(read_npy(path), path, "too large");
}

TEST_CASE("npy: write errors name the file, and a failed write leaves nothing behind") {
  TempDir dir;
  CHECK_ERROR_CONTAINS(write_npy(dir / "i.npy", ops::from_vector(std::vector<int64_t>{1, 2})),
                       dir / "i.npy", "float tensors", "int64");
  const std::string nowhere = dir / "no/such/folder/a.npy";
  CHECK_ERROR_CONTAINS(write_npy(nowhere, ops::zeros({2})), nowhere, "cannot write");
  CHECK(dir.files().empty());
}
