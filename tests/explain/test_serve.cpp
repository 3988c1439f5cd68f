// vitrine-explain --serve: the service's answers against the library's own maps, its cache, its
// bounded queue and time limit (in process); then the real program on a loopback port: the API,
// every bad request (each followed by a good one that still succeeds), path traversal, the
// limits, 200 requests from 8 clients with the server's memory measured, the bind address and a
// clean stop on SIGINT; and the page itself driven in headless Chromium.
#include <fmt/ranges.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "browser.h"
#include "cdp.h"
#include "common/html.h"
#include "decode.h"
#include "explain/explain.h"
#include "explain/options_schema.h"
#include "explain/serve.h"
#include "nn/data/image_decode.h"
#include "nn/state.h"
#include "serve_files.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
using nlohmann::json;
namespace fs = std::filesystem;
namespace ex = vitrine::explain;

namespace {

const std::string kExe = VITRINE_EXPLAIN_EXE;

/// The default limits with one changed.
ex::ServeLimits with(int64_t ex::ServeLimits::*field, int64_t value) {
  ex::ServeLimits l;
  l.*field = value;
  return l;
}

/// The ClientError a call throws (status and message); fails when it throws none.
std::pair<int, std::string> client_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ex::ClientError& e) {
    return {e.status, e.what()};
  }
  FAIL("no ClientError");
  return {0, ""};
}

}  // namespace

TEST_CASE("serve: the answer holds the library's maps and prediction, drawn at 224 pixels") {
  ex::ExplainService s = make_service(files().checkpoint);
  const std::string image = bytes_of(files().images[3]);
  const json r = s.explain(image, R"({"grids": true, "head": 1, "threshold": 0.5})", "im3.png");
  // The library on the same input: the image prepared as the CLI does, one pass.
  const ex::LoadedModel& m = s.model();
  const ex::Sample sample =
      ex::prepare_image("im3", nn::data::read_image(files().images[3], 1), -1, {}, m);
  const Tensor batch = sample.input.unsqueeze(0);
  const ex::Pass pass = ex::run_pass(*m.vit, batch, {-1});
  ex::Options o;
  o.head = 1;
  o.threshold = 0.5;
  o.black = ex::black_pixel(m);
  const auto probs = ops::softmax(pass.logits, -1).to_vector<double>();
  const int64_t predicted = std::max_element(probs.begin(), probs.end()) - probs.begin();
  CHECK(r["prediction"]["predicted"] == predicted);
  CHECK(r["prediction"]["target"] == predicted);
  CHECK(r["prediction"]["top"].size() == 3);
  CHECK(r["prediction"]["top"][0]["probability"].get<double>() ==
        doctest::Approx(probs[predicted]).epsilon(1e-6));
  CHECK(r["prediction"]["top"][0]["name"] == m.classes[predicted]);
  // Every method of "all" (a ViT with a head has them all).
  REQUIRE(r["methods"].size() == ex::all_methods().size());
  for (const json& e : r["methods"]) {
    const ex::Method method = ex::parse_methods(e["method"].get<std::string>()).front();
    const ex::Explanation want = ex::explain_method(*m.vit, batch, pass, method, o);
    const auto got = e["grid"]["values"].get<std::vector<double>>();
    const auto expected = want.grid.to(kFloat64).to_vector<double>();
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      CHECK_MESSAGE(got[i] == doctest::Approx(expected[i]).epsilon(1e-5), e["method"]);
    const nn::data::DecodedImage png = png_of(e["png"]);
    CHECK(png.width == 224);  // 28 pixels enlarged 8 times
    CHECK(png.height == 224);
    CHECK(png.channels == 3);
  }
  CHECK(r["methods"][0].contains("mask_png"));  // attention with a threshold: its mask
  CHECK(r["heads"]["pngs"].size() == 2);
  CHECK(r["heads"]["mask_pngs"].size() == 2);
  CHECK(r["heads"]["layer"] == 1);
  // The attention distance is the library's.
  const Tensor d = ex::attention_distance(pass, 7);
  CHECK(r["attention_distance"].size() == 2);
  CHECK(r["attention_distance"][1][0].get<double>() ==
        doctest::Approx(d.to_vector<double>()[2]).epsilon(1e-6));
  CHECK(r["image"]["format"] == "PNG");
  CHECK(r["input"]["grid"] == json::array({4, 4}));
}

TEST_CASE("serve: a change of head or colormap reuses the cached pass, SmoothGrad its result") {
  ex::ExplainService s = make_service(files().checkpoint);
  const std::string image = bytes_of(files().images[0]);
  const json a = s.explain(image, R"({"methods": "attention,smoothgrad", "samples": 4})");
  CHECK(s.stats().pass_cache_hits == 0);
  CHECK(a["methods"][1]["cached"] == false);
  const json b = s.explain(
      image, R"({"methods": "attention,smoothgrad", "samples": 4, "head": 0, "colormap": "jet"})");
  CHECK(s.stats().pass_cache_hits == 1);
  CHECK(b["methods"][1]["cached"] == true);
  CHECK(b["timings"].contains("pass (cached)"));
  CHECK(a["methods"][0]["png"] != b["methods"][0]["png"]);
  // Another target is another pass; another sample count another SmoothGrad.
  const json c = s.explain(image, R"({"methods": "smoothgrad", "samples": 5, "target": "bag"})");
  CHECK(s.stats().pass_cache_hits == 1);
  CHECK(c["methods"][0]["cached"] == false);
  CHECK(c["prediction"]["target_name"] == "bag");
  CHECK(s.stats().answered == 3);
}

TEST_CASE("serve: bad options are a 400 naming the option, the value and what is allowed") {
  ex::ExplainService s = make_service(files().checkpoint, with(&ex::ServeLimits::max_steps, 64));
  const std::string image = bytes_of(files().images[0]);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"head": 99})", "option head: 99 is out of range: expected -1 to 1"},
      {R"({"layer": -3})", "option layer: -3 is out of range: expected -2 to 1"},
      {R"({"methods": "foo"})", "unknown method 'foo'"},
      {R"({"methods": []})", "option methods: expected \"all\""},
      {R"({"steps": -3})",
       "option steps: -3 is out of range: expected 1 to 64 (steps (--max-steps 64))"},
      {R"({"steps": 65})", "--max-steps 64"},
      {R"({"samples": 0})", "option samples: 0 is out of range"},
      {R"({"steps": 2.5})", "option steps: expected a whole number"},
      {R"({"threshold": 2})", "option threshold: 2 is out of range: expected the fraction"},
      {R"({"alpha": "x"})", "option alpha: expected a number"},
      {R"({"discard_ratio": 1})", "option discard_ratio: 1 is out of range"},
      {R"({"colormap": "rainbow"})", "option colormap: expected one of inferno, jet, viridis"},
      {R"({"target": "cat"})",
       "option target: \"cat\" is not a class of the model (shirt, bag, boot)"},
      {R"({"target": 3})", "option target: 3 is out of range: expected -1 to 2"},
      {R"({"resize": "factor:99"})",
       "option resize: --resize factor:99: expected model, stretch, none or factor:F with F"},
      {R"({"heads": 1})", "option heads: expected true or false"},
      {R"({"normalise": "mnist"})",
       "option normalise: expected one of checkpoint, imagenet, none, got \"mnist\""},
      {R"({"normalise": "imagenet"})",
       "option normalise: imagenet's mean and std are for 3 channels; this model takes 1"},
      {R"({"bogus": 1})", "unknown option \"bogus\""},
      {R"({"head": )", "the options: invalid JSON"},
      {R"([1, 2])", "the options: expected a JSON object"},
      {std::string(70000, ' '), "the options"},
  };
  for (const auto& c : cases) {
    const std::string& options = c.first;
    const std::string& message = c.second;
    const std::pair<int, std::string> e = client_error([&] { s.explain(image, options); });
    const int status = e.first;
    const std::string& what = e.second;
    CHECK_MESSAGE(status == 400, options.substr(0, 40));
    CHECK_MESSAGE(what.find(message) != std::string::npos, what, " should hold ", message);
  }
  CHECK(s.stats().client_errors == static_cast<int64_t>(cases.size()));
  CHECK(s.explain(image, R"({"methods": "attention"})")["methods"].size() == 1);
}

TEST_CASE("serve: bad images are a 4xx naming the problem, a bomb refused from its header") {
  ex::ExplainService s =
      make_service(files().checkpoint, with(&ex::ServeLimits::max_image_side, 512));
  const std::string good = bytes_of(files().images[1]);
  std::string corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x55;  // the image data's CRC no longer matches
  const std::string big = [&] {
    TempDir d;
    write_png(d / "big.png", 600, 20, 1, std::vector<uint8_t>(600 * 20, 9));
    return bytes_of(d / "big.png");
  }();
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"", 400, "no image"},
      {"hello, I am text\n", 415, "not a PNG, JPEG or BMP file"},
      {good.substr(0, good.size() / 2), 400, "cannot decode the PNG file"},
      {corrupt, 400, "cannot decode the PNG file"},
      {big, 413,
       "the PNG image is 600x20 pixels, over the limit of 512 a side (--max-image-side "
       "512); nothing was decoded"},
  };
  for (const auto& c : cases) {
    const std::string& bytes = std::get<0>(c);
    const int status = std::get<1>(c);
    const std::string& message = std::get<2>(c);
    const std::pair<int, std::string> e = client_error([&] { s.explain(bytes, "", "x.png"); });
    const int got = e.first;
    const std::string& what = e.second;
    CHECK_MESSAGE(got == status, message);
    CHECK_MESSAGE(what.find(message) != std::string::npos, what, " should hold ", message);
    CHECK(s.explain(good, R"({"methods": "rollout"})")["methods"].size() == 1);
  }
  // A tiny image (smaller than a patch) at its own size.
  TempDir d;
  write_png(d / "tiny.png", 5, 5, 1, std::vector<uint8_t>(25, 100));
  const auto [status, what] = client_error(
      [&] { s.explain(bytes_of(d / "tiny.png"), R"({"resize": "none"})", "tiny.png"); });
  CHECK(status == 400);
  CHECK(what.find("tiny.png: the image is 5x5, smaller than one 7x7 patch") != std::string::npos);
}

TEST_CASE("serve: one request runs, --queue more wait, the next is a 503 with Retry-After") {
  ex::ExplainService s = make_service(files().checkpoint, with(&ex::ServeLimits::queue, 0));
  const std::string image = bytes_of(files().images[2]);
  std::atomic<bool> done{false};
  std::thread slow([&] {
    s.explain(image,
              R"({"methods": "smoothgrad,integrated-gradients", "samples": 256, "steps": 256})");
    done = true;
  });
  while (!s.stats().running && !done) std::this_thread::yield();
  if (!done) {  // it is running: no room to wait
    try {
      s.explain(image, R"({"methods": "attention"})");
      CHECK_MESSAGE(done.load(), "a second request was admitted with --queue 0");
    } catch (const ex::ClientError& e) {
      CHECK(e.status == 503);
      CHECK(e.retry_after >= 1);
      CHECK(std::string(e.what()).find("busy: one request is running and 0 are waiting (--queue "
                                       "0)") != std::string::npos);
    }
  }
  slow.join();
  CHECK(s.explain(image, R"({"methods": "attention"})")["methods"].size() == 1);
  CHECK(s.stats().answered == 2);
}

TEST_CASE("serve: a request past --request-timeout stops between methods with a 503") {
  ex::ServeLimits limits;
  limits.request_timeout_s = 0.001;
  ex::ExplainService s = make_service(files().checkpoint, limits);
  const auto [status, what] = client_error([&] {
    s.explain(bytes_of(files().images[4]),
              R"({"methods": "smoothgrad,integrated-gradients", "samples": 256})");
  });
  CHECK(status == 503);
  CHECK(what.find("longer than --request-timeout 0.001 s") != std::string::npos);
}

TEST_CASE("serve: a backbone without a head gets the attention methods and no prediction") {
  ex::ExplainService s = make_service(files().backbone);
  const json info = s.model_info();
  CHECK(info["headless"] == true);
  CHECK(info["methods"] == json::array({"attention", "rollout"}));
  const std::string image = bytes_of(files().images[5]);
  const json r = s.explain(image, "");
  CHECK(!r.contains("prediction"));
  CHECK(r["methods"].size() == 2);
  CHECK(r["heads"]["pngs"].size() == 2);
  const auto [status, what] = client_error([&] { s.explain(image, R"({"methods": "chefer"})"); });
  CHECK(status == 400);
  CHECK(what.find("no classification head") != std::string::npos);
  CHECK(client_error([&] { s.explain(image, R"({"target": 1})"); }).first == 400);
}

// ---- the program on a loopback port ------------------------------------------------------------

namespace {

/// vitrine-explain --serve on a free loopback port, stopped with SIGINT at scope exit (unless
/// stop() was called): its port and its log.
struct Server {
  TempDir dir;
  Process process;
  int port = 0;
  bool stopped = false;
  explicit Server(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--checkpoint", files().checkpoint, "--serve", "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    process = spawn_process(kExe, args, dir / "server.log", dir.dir.string());
    const std::regex listening(R"(at http://[^:]+:(\d+)/)");
    for (int i = 0; i < 600 && port == 0; ++i) {
      std::smatch m;
      const std::string log = read_text(dir / "server.log");
      if (std::regex_search(log, m, listening))
        port = std::stoi(m[1]);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE_MESSAGE(port > 0, "the server did not start: " << read_text(dir / "server.log"));
  }
  std::string log() const { return read_text(dir / "server.log"); }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/", port); }
  /// Sends a signal and returns the exit status.
  int stop(int sig = SIGINT) {
    kill(process.pid, sig);
    stopped = true;
    return wait_process(process);
  }
  ~Server() {
    if (!stopped) stop();
  }
  /// The server's resident memory, kB (VmRSS).
  int64_t rss_kb() const {
    std::ifstream f(fmt::format("/proc/{}/status", process.pid));
    for (std::string line; std::getline(f, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
  }
};

httplib::Client client(const Server& s) {
  httplib::Client c("127.0.0.1", s.port);
  c.set_read_timeout(60, 0);
  c.set_url_encode(false);  // paths go out as written (the traversal cases)
  return c;
}

httplib::Result post_image(httplib::Client& c, const std::string& bytes,
                           const std::string& options = "", const std::string& name = "a.png") {
  httplib::MultipartFormDataItems items = {{"image", bytes, name, "image/png"}};
  if (!options.empty()) items.push_back({"options", options, "", ""});
  return c.Post("/api/explain", items);
}

/// The JSON error of an answer: its status, and the message.
void check_error(const httplib::Result& r, int status, const std::string& message,
                 const std::string& what) {
  REQUIRE_MESSAGE(r, what << ": no answer (" << httplib::to_string(r.error()) << ")");
  CHECK_MESSAGE(r->status == status, what << ": " << r->body.substr(0, 300));
  CHECK_MESSAGE(r->get_header_value("Content-Type") == "application/json", what);
  const json body = json::parse(r->body, nullptr, false);
  REQUIRE_MESSAGE(body.is_object(), what << ": not a JSON error: " << r->body.substr(0, 200));
  CHECK(body["status"] == status);
  const std::string error = body.value("error", "");
  CHECK_MESSAGE(error.find(message) != std::string::npos, what << ": " << error);
}

}  // namespace

TEST_CASE("vitrine-explain --serve: every bad request gets a JSON 4xx, and the next one succeeds") {
  Server server({"--max-body-mb", "1", "--max-image-side", "1024"});
  httplib::Client c = client(server);
  const std::string good = bytes_of(files().images[0]);
  const auto good_request = [&](const std::string& after) {
    const auto r = post_image(c, good, R"({"methods": "attention,rollout"})");
    REQUIRE_MESSAGE(r, "no answer after " << after);
    CHECK_MESSAGE(r->status == 200, "after " << after << ": " << r->body.substr(0, 200));
  };
  {
    const auto r = c.Get("/");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "text/html; charset=utf-8");
    CHECK(r->get_header_value("Content-Security-Policy").find("default-src 'none'") == 0);
    CHECK(r->body.find("<title>vitrine-explain</title>") != std::string::npos);
    CHECK(r->body.find("/api/explain") != std::string::npos);
    const auto m = c.Get("/api/model");
    REQUIRE(m);
    const json info = json::parse(m->body);
    CHECK(info["classes"] == json::array({"shirt", "bag", "boot"}));
    CHECK(info["layers"] == 2);
    CHECK(info["limits"]["max_body_bytes"] == 1 << 20);
  }
  good_request("the start");
  // Images: truncated, corrupt, text, empty, a bomb, too big a body, no image part, not a form.
  std::string corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x55;
  const std::string bomb = [] {  // a valid header claiming 20000 x 20000 pixels, 60 bytes in all
    TempDir d;
    write_png(d / "b.png", 8, 8, 1, std::vector<uint8_t>(64, 0));
    std::string png = read_text(d / "b.png");
    for (int at : {16, 20}) {  // IHDR's width and height, then its CRC recomputed
      png[at] = 0;
      png[at + 1] = 0;
      png[at + 2] = static_cast<char>(20000 >> 8);
      png[at + 3] = static_cast<char>(20000 & 0xff);
    }
    uint32_t crc = 0xffffffffu;  // CRC-32 of "IHDR" + its 13 data bytes
    for (int i = 12; i < 29; ++i) {
      crc ^= static_cast<uint8_t>(png[i]);
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    }
    crc ^= 0xffffffffu;
    for (int k = 0; k < 4; ++k) png[29 + k] = static_cast<char>(crc >> (24 - 8 * k));
    return png;
  }();
  const std::vector<std::tuple<std::string, std::string, int, std::string>> images = {
      {"truncated", good.substr(0, good.size() - 30), 400, "cannot decode the PNG file"},
      {"corrupt", corrupt, 400, "cannot decode the PNG file"},
      {"a text file named .png", "just text\n", 415, "a.png: not a PNG, JPEG or BMP file"},
      {"an empty image", "", 400, "no image"},
      {"a decompression bomb", bomb, 413,
       "is 20000x20000 pixels, over the limit of 1024 a side (--max-image-side 1024)"},
      {"a body over --max-body-mb", std::string(1 << 20, 'x'), 413,
       "over the limit of 1048576 bytes (--max-body-mb)"},
  };
  for (const auto& [what, bytes, status, message] : images) {
    check_error(post_image(c, bytes), status, message, what);
    good_request(what);
  }
  // Options.
  const std::vector<std::tuple<std::string, int, std::string>> options = {
      {R"({"head": 99})", 400, "option head: 99 is out of range"},
      {R"({"methods": "foo"})", 400, "unknown method 'foo'"},
      {R"({"steps": -3})", 400, "option steps: -3 is out of range"},
      {R"({"samples": -1})", 400, "option samples: -1 is out of range"},
      {R"({"head": )", 400, "invalid JSON"},
  };
  for (const auto& [o, status, message] : options) {
    check_error(post_image(c, good, o), status, message, o);
    good_request(o);
  }
  // Requests of the wrong shape, unknown paths and traversal attempts.
  check_error(c.Post("/api/explain", "", "application/json"), 415, "expected multipart/form-data",
              "an empty body");
  good_request("an empty body");
  check_error(c.Post("/api/explain", httplib::MultipartFormDataItems{{"file", good, "a.png", ""}}),
              400, "no \"image\" part", "no image part");
  check_error(c.Post("/api/explain", "{\"image\": 1}", "application/json"), 415,
              "got Content-Type \"application/json\"", "JSON instead of a form");
  for (const std::string path :
       {"/nope", "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2f..%2fetc%2fpasswd",
        "/api/../../../etc/passwd", "/api/model/../../../etc/passwd", "/index.html", "//etc/passwd",
        "/serve_page.html"}) {
    const auto r = c.Get(path);
    check_error(r, 404, "no such page", path);
    CHECK_MESSAGE(r->body.find("root:") == std::string::npos, path);
    good_request(path);
  }
  check_error(c.Get("/api/explain"), 404, "POST /api/explain", "GET /api/explain");
  check_error(c.Delete("/api/model"), 404, "no such page", "DELETE");
  good_request("the end");
  // The log names every request, but never more than 60 characters of a path, nor any body.
  const std::string log = server.log();
  CHECK(log.find("POST /api/explain 413") != std::string::npos);
  CHECK(log.find("just text") == std::string::npos);
  CHECK(server.stop() == 0);
  CHECK(server.log().find("stopped on SIGINT") != std::string::npos);
}

TEST_CASE("vitrine-explain --serve: 200 requests from 8 clients all answered, memory flat") {
  Server server({"--queue", "3"});
  std::vector<std::string> images;
  for (const std::string& p : files().images) images.push_back(bytes_of(p));
  // One round: 8 clients, 25 requests each, over 12 images (more than the 8 cached).
  const auto round = [&](std::vector<double>& latencies) {
    std::atomic<int64_t> ok{0}, busy{0}, other{0};
    std::mutex m;
    std::vector<std::thread> clients;
    for (int t = 0; t < 8; ++t)
      clients.emplace_back([&, t] {
        httplib::Client c = client(server);
        for (int i = 0; i < 25; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          const auto r = post_image(c, images[(t * 25 + i) % images.size()],
                                    R"({"methods": "all", "samples": 4, "steps": 8})");
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (r && r->status == 200)
            ++ok;
          else if (r && r->status == 503 && !r->get_header_value("Retry-After").empty())
            ++busy;
          else
            ++other;
          std::lock_guard lock(m);
          latencies.push_back(s);
        }
      });
    for (auto& c : clients) c.join();
    CHECK(ok + busy == 200);
    CHECK(other == 0);
    CHECK(ok > 0);
    return std::pair<int64_t, int64_t>{ok, busy};
  };
  std::vector<double> warm, measured;
  round(warm);  // fills the cache and the allocators' pools
  const int64_t before = server.rss_kb();
  const auto [ok, busy] = round(measured);
  const int64_t after = server.rss_kb();
  std::sort(measured.begin(), measured.end());
  MESSAGE(fmt::format(
      "200 requests, 8 clients: {} answered, {} busy (503); latency p50 {:.1f} "
      "ms, p99 {:.1f} ms; server memory {} -> {} MB",
      ok, busy, 1000 * measured[99], 1000 * measured[197], before / 1024, after / 1024));
  CHECK(before > 0);
  CHECK(after - before < 16 * 1024);  // flat: within 16 MB after 200 more requests
  httplib::Client c = client(server);
  const auto r = c.Get("/api/model");
  REQUIRE(r);
  const json stats = json::parse(r->body)["stats"];
  CHECK(stats["requests"] == 400);
  CHECK(stats["answered"].get<int64_t>() + stats["refused_busy"].get<int64_t>() == 400);
  CHECK(server.stop() == 0);
}

TEST_CASE("vitrine-explain --serve: the loopback interface unless asked, and SIGTERM stops it") {
  {
    Server local({});
    CHECK(local.log().find("at http://127.0.0.1:") != std::string::npos);
    CHECK(local.log().find("warning") == std::string::npos);
  }
  Server open({"--host", "0.0.0.0"});
  CHECK(open.log().find("warning: listening on 0.0.0.0, not only this machine's loopback "
                        "interface") != std::string::npos);
  CHECK(open.stop(SIGTERM) == 0);
  CHECK(open.log().find("stopped on SIGTERM") != std::string::npos);
  // Images with --serve are a command-line error.
  TempDir dir;
  const ProcessResult r = run_process(
      kExe, {"--checkpoint", files().checkpoint, "--serve", files().images[0]}, dir, "both");
  CHECK(r.code == 2);
  CHECK(r.output.find("--serve takes its images from the page") != std::string::npos);
}

TEST_CASE("vitrine-explain --serve: the page in Chromium: upload, overlays, head, method, class") {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    skip("chromium is not on PATH (scripts/install-deps.sh installs it): the page is not tested");
    return;
  }
  Server server({});
  TempDir browser_dir;
  Devtools page(chromium, browser_dir.dir.string());
  page.navigate(server.url());
  REQUIRE(page.wait_for("document.body.dataset.state === 'idle'"));
  CHECK(page.eval("document.getElementById('model').textContent")
            .get<std::string>()
            .find("ViT 1x28x28") == 0);
  // Choose an image as a user does: the file input.
  page.set_files("#file", {files().images[6]});
  REQUIRE_MESSAGE(page.wait_for("document.body.dataset.explained === '1'"),
                  page.eval("document.getElementById('error').textContent"));
  const auto count = [&](const std::string& selector) {
    return page.eval(fmt::format("document.querySelectorAll('{}').length", selector)).get<int>();
  };
  const auto decoded = [&](const std::string& selector) {
    return page
        .eval(fmt::format("Array.from(document.querySelectorAll('{}')).filter((i) => i.complete "
                          "&& i.naturalWidth === 224).length",
                          selector))
        .get<int>();
  };
  // Every method the server reports, activation-max and qkv too.
  const int shown = static_cast<int>(ex::method_names(true).size());
  CHECK(count("#gallery figure") == shown);
  CHECK(decoded("#gallery img") == shown);
  CHECK(decoded("#heads-grid img") == 2);
  CHECK(count("#top li") == 3);
  CHECK(decoded("#overlay") == 1);
  // What the page drew is what the API gives for the same options.
  httplib::Client c = client(server);
  const auto api = [&](const std::string& extra) {
    const auto r = post_image(
        c, bytes_of(files().images[6]),
        R"({"methods": "attention", "heads": false, "layer": -1, "threshold": 0, "alpha": 0.5)" +
            extra + "}");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return json::parse(r->body)["methods"][0]["png"].get<std::string>();
  };
  const std::string overlay0 = page.eval("document.getElementById('overlay').src");
  CHECK(overlay0 == api(R"(, "head": -1)"));
  // Another head: the server redraws from its cached pass.
  page.eval(
      "(() => { const h = document.getElementById('head'); h.value = '1'; "
      "h.dispatchEvent(new Event('change')); })()");
  REQUIRE(page.wait_for("document.body.dataset.explained === '2'"));
  const std::string overlay1 = page.eval("document.getElementById('overlay').src");
  CHECK(overlay1 != overlay0);
  CHECK(overlay1 == api(R"(, "head": 1)"));
  // Another method: drawn from the answer at hand, no request.
  page.eval(
      "(() => { const m = document.getElementById('method'); m.value = 'chefer'; "
      "m.dispatchEvent(new Event('change')); })()");
  CHECK(page.eval("document.getElementById('overlay').src ===  document.querySelector('#gallery "
                  "figure[data-method=chefer] img').src") == json(true));
  CHECK(page.eval("document.querySelector('#gallery figure.selected').dataset.method") == "chefer");
  // Another class: click it in the top list.
  const std::string other =
      page.eval("document.querySelectorAll('#top li')[1].dataset.class").get<std::string>();
  page.eval("document.querySelectorAll('#top li')[1].click()");
  REQUIRE(page.wait_for("document.body.dataset.explained === '3'"));
  CHECK(page.eval("document.querySelector('#top li.target').dataset.class") == other);
  CHECK(page.eval("document.getElementById('error').textContent") == "");
  page.screenshot(browser_dir / "serve.png");
  CHECK(fs::file_size(browser_dir / "serve.png") > 10000);
  // A quiet console, and nothing fetched but this server.
  CHECK_MESSAGE(page.console.empty(), fmt::format("{}", fmt::join(page.console, "\n")));
  CHECK(!page.requested.empty());
  for (const std::string& url : page.requested)
    CHECK_MESSAGE((url.rfind(server.url(), 0) == 0 || url.rfind("data:", 0) == 0), url);
}

TEST_CASE(
    "vitrine-explain --serve: the page keeps a wide photo's shape, with its resize controls") {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    skip("chromium is not on PATH (scripts/install-deps.sh installs it): the page is not tested");
    return;
  }
  // A 60 x 38 photo (wider than high) for a 28 x 28 model with 7-pixel patches.
  TempDir dir;
  const std::string photo = dir / "wide.png";
  std::vector<uint8_t> px(60 * 38);
  for (int y = 0; y < 38; ++y)
    for (int x = 0; x < 60; ++x) px[y * 60 + x] = static_cast<uint8_t>((3 * x + 5 * y) % 256);
  write_png(photo, 60, 38, 1, px);
  Server server({});
  TempDir browser_dir;
  Devtools page(chromium, browser_dir.dir.string());
  page.navigate(server.url());
  REQUIRE(page.wait_for("document.body.dataset.state === 'idle'"));
  page.set_files("#file", {photo});
  REQUIRE_MESSAGE(page.wait_for("document.body.dataset.explained === '1'"),
                  page.eval("document.getElementById('error').textContent"));
  int explained = 1;
  const auto set = [&](const std::string& id, const std::string& value) {
    page.eval(
        fmt::format("(() => {{ const e = document.getElementById('{}'); e.value = '{}'; "
                    "e.dispatchEvent(new Event('change')); }})()",
                    id, value));
  };
  const auto wait = [&] {
    REQUIRE_MESSAGE(
        page.wait_for(fmt::format("document.body.dataset.explained === '{}'", ++explained)),
        page.eval("document.getElementById('error').textContent"));
  };
  // Every shown picture: its own pixels' aspect and its aspect on the page, width / height.
  const auto aspects = [&](const std::string& selector) {
    return page.eval(fmt::format(
        "Array.from(document.querySelectorAll('{}')).map((i) => {{ const r = "
        "i.getBoundingClientRect(); return [i.naturalWidth / i.naturalHeight, r.width / "
        "r.height]; }})",
        selector));
  };
  const auto check_shape = [&](double aspect) {
    for (const char* selector : {"#input-image", "#overlay", "#gallery img", "#heads-grid img"}) {
      const json a = aspects(selector);
      REQUIRE_MESSAGE(!a.empty(), selector);
      for (const json& pair : a) {
        CHECK_MESSAGE(pair[0].get<double>() == doctest::Approx(aspect).epsilon(1e-9), selector);
        // On the page: within a pixel's rounding of the picture's own aspect.
        CHECK_MESSAGE(pair[1].get<double>() == doctest::Approx(aspect).epsilon(0.02), selector);
      }
    }
  };
  // The default: the shorter side to 28 (60 x 38 -> 44 x 28), a centre crop to 28 x 28.
  CHECK(page.eval("document.body.dataset.input") == "28x28");
  check_shape(1.0);
  // None: the photo's own size, cropped to a multiple of the patch (56 x 35): not squashed.
  set("resize", "none");
  wait();
  CHECK(page.eval("document.body.dataset.input") == "56x35");
  check_shape(56.0 / 35.0);
  // The crop control reaches the server: the top-left crop is the API's.
  httplib::Client c = client(server);
  const auto api_input = [&](const std::string& options) {
    const auto r = post_image(c, bytes_of(photo), options, "wide.png");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return json::parse(r->body)["input"]["png"].get<std::string>();
  };
  const std::string centre = page.eval("document.getElementById('input-image').src");
  CHECK(centre == api_input(R"({"methods": "attention", "resize": "none", "crop": "center"})"));
  set("crop", "topleft");
  wait();
  const std::string topleft = page.eval("document.getElementById('input-image').src");
  CHECK(topleft != centre);
  CHECK(topleft == api_input(R"({"methods": "attention", "resize": "none", "crop": "topleft"})"));
  // A factor: 0.5 makes 30 x 19, cropped to 28 x 14.
  set("resize", "factor");
  CHECK(page.eval("document.getElementById('factor-row').classList.contains('hidden')") ==
        json(false));
  wait();
  CHECK(page.eval("document.body.dataset.input") == "28x14");
  check_shape(2.0);
  // DINO's position-embedding interpolation: the overlay is the API's with pos_interp dino.
  set("pos-interp", "dino");
  wait();
  const auto r = post_image(
      c, bytes_of(photo),
      R"({"methods": "attention", "heads": false, "resize": "factor:0.5", "crop": "topleft", "pos_interp": "dino"})",
      "wide.png");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(page.eval("document.querySelector('#gallery figure[data-method=attention] img').src") ==
        json::parse(r->body)["methods"][0]["png"]);
  // Normalisation and upsampling (DINO's recipe: the pixels as they are, nearest): the page's
  // overlay is the API's with both; each changes the picture.
  CHECK(page.eval("document.getElementById('normalise').options[1].disabled") == json(true));
  CHECK(page.eval("document.getElementById('normalise').options[0].textContent")
            .get<std::string>()
            .starts_with("the checkpoint's: mean 0.25, std 0.5"));
  set("normalise", "none");
  wait();
  set("upsample", "nearest");
  wait();
  const std::string dino_options =
      R"({"methods": "attention", "heads": false, "resize": "factor:0.5", "crop": "topleft", "pos_interp": "dino")";
  const auto api_png = [&](const std::string& more) {
    const auto a = post_image(c, bytes_of(photo), dino_options + more + "}", "wide.png");
    REQUIRE(a);
    REQUIRE(a->status == 200);
    const json j = json::parse(a->body);
    return std::pair{j["methods"][0]["png"].get<std::string>(), j["input"]["normalisation"]};
  };
  const auto [both, used] = api_png(R"(, "normalise": "none", "upsample": "nearest")");
  CHECK(page.eval("document.querySelector('#gallery figure[data-method=attention] img').src") ==
        both);
  CHECK(used == json({{"from", "none"}, {"mean", {0.0}}, {"std", {1.0}}}));
  CHECK(both != api_png(R"(, "upsample": "nearest")").first);  // the normalisation counts
  CHECK(both != api_png(R"(, "normalise": "none")").first);    // and the upsampling
  CHECK(page.eval("document.getElementById('error').textContent") == "");
  CHECK_MESSAGE(page.console.empty(), fmt::format("{}", fmt::join(page.console, "\n")));
}

TEST_CASE("serve: qkv and activation-max through the API, as the library computes them") {
  ex::ExplainService s = make_service(files().checkpoint);
  const json a = s.explain(bytes_of(files().images[3]),
                           R"({"methods": "qkv,activation-max", "patch": [1, 3], "am_steps": 6,
                               "layer": 0, "heads": false})",
                           "im3.png");
  REQUIRE(a["methods"].size() == 2);
  const json& q = a["methods"][0];
  CHECK(q["method"] == "qkv");
  CHECK(q["patch"] == json::array({1, 3}));
  REQUIRE(q["head_pngs"].size() == 2);
  REQUIRE(q["value_pngs"].size() == 2);
  CHECK(png_of(q["head_pngs"][1].get<std::string>()).width == 224);
  const json& m = a["methods"][1];
  CHECK(m["method"] == "activation-max");
  CHECK(m["activation_max"]["end"].get<double>() > m["activation_max"]["start"].get<double>());
  CHECK(png_of(m["png"].get<std::string>()).height == 224);
  // The same numbers as the library's with the same options (the server's black and white).
  const ex::LoadedModel& l = s.model();
  ex::Options o;
  o.am_steps = 6;
  o.layer = 0;
  o.black = ex::black_pixel(l);
  for (size_t c = 0; c < l.mean.size(); ++c) o.white.push_back((1 - l.mean[c]) / l.std[c]);
  const ex::ActivationMax lib =
      ex::activation_max(*l.model, {1, 1, 28, 28}, {a["prediction"]["target"].get<int64_t>()}, o);
  CHECK(lib.end[0] == doctest::Approx(m["activation_max"]["end"].get<double>()).epsilon(1e-6));
  const auto [status, message] =
      client_error([&] { s.explain(bytes_of(files().images[3]), R"({"patch": [1]})", "x.png"); });
  CHECK(status == 400);
  CHECK(message.find("option patch: expected [row, column]") != std::string::npos);
}

namespace {

/// The long flags vitrine-explain --help lists, without their "--".
std::set<std::string> help_flags() {
  TempDir dir;
  const ProcessResult help = run_process(kExe, {"--help"}, dir, "help");
  REQUIRE(help.code == 0);
  std::set<std::string> flags;
  const std::regex flag(R"(--([a-z0-9][a-z0-9-]*))");
  for (std::sregex_iterator it(help.output.begin(), help.output.end(), flag), end; it != end; ++it)
    flags.insert((*it)[1]);
  return flags;
}

std::set<std::string> set_of(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE(
    "vitrine-explain: the option names are the same in --help, the server's JSON and the page") {
  // The schema's names by where they are read.
  const std::set<std::string> cli_names = set_of(ex::request_option_names(ex::kCliOption));
  const std::set<std::string> server_names = set_of(ex::request_option_names(ex::kServerOption));
  // The command line: every request option of the schema is a flag of that very name.
  const std::set<std::string> flags = help_flags();
  for (const std::string& n : cli_names) CHECK_MESSAGE(flags.count(n) == 1, "--" << n);
  // A server option the command line has is spelled as its flag; the rest are the answer's own.
  std::set<std::string> server_only;
  for (const std::string& n : server_names)
    if (flags.count(n) == 0) server_only.insert(n);
  CHECK(server_only == std::set<std::string>{"heads", "grids"});
  // The server reports exactly those names, and accepts each with its default; the old spellings
  // give the same answer; a name and its alias together are a 400.
  ex::ExplainService s = make_service(files().checkpoint);
  const json report = s.options_info();
  std::set<std::string> reported;
  for (const json& o : report["options"]) reported.insert(o["name"].get<std::string>());
  CHECK(reported == server_names);
  const std::string image = bytes_of(files().images[2]);
  for (const json& o : report["options"]) {
    const std::string name = o["name"];
    if (name == "method" || name == "heads") continue;  // set below
    json req = {{"method", "attention"}, {"heads", false}, {name, o["default"]}};
    if (name == "patch") req[name] = json::array({1, 1});  // its default is "the centre"
    if (name == "target") req[name] = -1;
    CHECK_NOTHROW_MESSAGE(s.explain(image, req.dump()), name);
  }
  // Every method the registry has is reported, with options that are the schema's names.
  std::vector<std::string> methods;
  for (const json& m : report["methods"]) {
    methods.push_back(m["name"]);
    for (const json& o : m["options"])
      CHECK_MESSAGE(ex::find_request_option(o.get<std::string>()) != nullptr, m["name"], " ", o);
  }
  CHECK(methods == ex::method_names(true));
  const auto png = [&](const std::string& options) {
    return s.explain(image, options)["methods"][0]["png"].get<std::string>();
  };
  CHECK(
      png(R"({"methods": "rollout", "head_fusion": "max", "discard_ratio": 0.5, "heads": false})") ==
      png(R"({"method": "rollout", "head-fusion": "max", "discard-ratio": 0.5, "heads": false})"));
  CHECK(png(R"({"methods": ["integrated-gradients"], "ig_rule": "trapezoid", "steps": 4})") ==
        png(R"({"method": ["integrated-gradients"], "ig-method": "trapezoid", "steps": 4})"));
  const auto [status, message] =
      client_error([&] { s.explain(image, R"({"discard_ratio": 0.5, "discard-ratio": 0.4})"); });
  CHECK(status == 400);
  CHECK(message.find("option discard-ratio is given twice") != std::string::npos);
  // --list-options: one row per entry.
  {
    TempDir dir;
    const ProcessResult list = run_process(kExe, {"--list-options"}, dir, "list");
    CHECK(list.code == 0);
    // docs/explain.md holds the table as the program prints it (paste it there when it changes).
    const std::string doc = read_text(std::string(VITRINE_FIXTURES) + "/../../docs/explain.md");
    CHECK_MESSAGE(doc.find(list.output) != std::string::npos,
                  "docs/explain.md's request options differ from vitrine-explain --list-options");
    for (const ex::OptionSpec& o : ex::request_options()) {
      const std::string shown = o.scope & ex::kCliOption ? fmt::format("| `--{}` |", o.name)
                                                         : fmt::format("| - | `{}`", o.name);
      CHECK_MESSAGE(list.output.find(shown) != std::string::npos, o.name);
    }
  }
  // The page: a control for every reported option (by data-option), the methods and the class
  // included, save those the page sets on each request itself.
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    skip("chromium is not on PATH (scripts/install-deps.sh installs it): the page is not read");
    return;
  }
  Server server({});
  TempDir browser_dir;
  Devtools page(chromium, browser_dir.dir.string());
  page.navigate(server.url());
  REQUIRE(page.wait_for("document.body.dataset.state === 'idle'"));
  const json controls = page.eval(
      "Array.from(document.querySelectorAll('[data-option]')).map((e) => e.dataset.option)");
  std::set<std::string> on_page;
  for (const json& c : controls) CHECK_MESSAGE(on_page.insert(c.get<std::string>()).second, c);
  for (const json& c : page.eval("INTERNAL")) on_page.insert(c.get<std::string>());
  CHECK(on_page == server_names);
  const json listed =
      page.eval("Array.from(document.getElementById('method').options).map((o) => o.value)");
  CHECK(listed == json(ex::method_names(true)));
  CHECK_MESSAGE(page.console.empty(), fmt::format("{}", fmt::join(page.console, "\n")));
}
