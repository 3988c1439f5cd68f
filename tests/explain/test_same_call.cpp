// The command line and the server explain through one library call (explain.h's explain(model,
// request)): for one image file, vitrine-explain's written maps and the server's answer hold the
// same grids, attention distances and probabilities to the last bit, and the same pictures pixel
// for pixel (the server's drawn at twice the command line's enlargement).
#include <cstring>

#include "decode.h"
#include "explain/explain.h"
#include "explain/npy.h"
#include "serve_files.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace ex = vitrine::explain;

namespace {

/// A float tensor's values as doubles (float32 values are exact as doubles).
std::vector<double> doubles(const Tensor& t) {
  return t.to(kFloat64).contiguous().to_vector<double>();
}

/// The bits of each double, so that a comparison is bit for bit (0.0 and -0.0 differ).
std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(&out[i], &v[i], sizeof(double));
  return out;
}

}  // namespace

TEST_CASE("explain: the command line and the server give one image the same maps, bit for bit") {
  const std::string out = files().dir / "same_call";
  const ProcessResult cli = run_process(
      VITRINE_EXPLAIN_EXE,
      {"--checkpoint", files().checkpoint, files().images[3], "--method", "all", "--out", out},
      files().dir, "same_call");
  INFO(cli.output);
  REQUIRE(cli.code == 0);
  ex::ExplainService service = make_service(files().checkpoint);
  // The program ran on one thread (run_process): so does the server here, so that both make the
  // same computation. (On another thread count OpenBLAS may split a product differently, and
  // the last bits of a map with it.)
  const Threads one(1);
  const json r = service.explain(bytes_of(files().images[3]), R"({"grids": true})", "im3.png");
  REQUIRE(r["methods"].size() == ex::all_methods().size());
  for (const json& m : r["methods"]) {
    const std::string name = m["method"].get<std::string>();
    INFO(name);
    const std::vector<double> grid = doubles(ex::read_npy(out + "/" + name + ".grid.npy"));
    CHECK(bits(m["grid"]["values"].get<std::vector<double>>()) == bits(grid));
    // The server's picture at 224 pixels, the command line's at 112: every second pixel of the
    // server's is the command line's.
    const ex::Rgb8 small = decode_png(read_text(out + "/000/" + name + ".png"));
    const auto big = png_of(m["png"].get<std::string>());  // (checks the data-URI prefix)
    REQUIRE(big.channels == 3);
    REQUIRE(big.height == 2 * small.height);
    REQUIRE(big.width == 2 * small.width);
    std::vector<uint8_t> sampled;
    for (int64_t y = 0; y < big.height; y += 2)
      for (int64_t x = 0; x < big.width; x += 2)
        for (int64_t c = 0; c < 3; ++c) sampled.push_back(big.pixels[(y * big.width + x) * 3 + c]);
    CHECK(sampled == small.pixels);
  }
  const json pred = json::parse(read_text(out + "/predictions.json"));
  CHECK(pred[0]["target"] == r["prediction"]["target"]);
  CHECK(bits({pred[0]["probability"].get<double>()}) ==
        bits({r["prediction"]["top"][0]["probability"].get<double>()}));
  std::vector<double> distance;
  for (const json& layer : r["attention_distance"])
    for (const json& head : layer) distance.push_back(head.get<double>());
  CHECK(bits(distance) == bits(doubles(ex::read_npy(out + "/attention-distance.npy"))));
}
