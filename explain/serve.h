// The explanation service behind `vitrine-explain --serve`: one loaded model, requests of an
// image file's bytes and options (JSON) answered with the prediction and every method's picture
// (JSON, PNGs as data: URIs). No sockets here (serve_http.h puts it on HTTP), so that a C++
// program, the tests and the fuzzer can call it directly.
//
// One request runs at a time (the model runs on every core); at most `queue` more wait for it,
// and a request beyond those is refused at once with 503 and a Retry-After estimate: the backlog
// of work never grows without bound. Each image's forward and backward pass is cached (by the
// file's bytes, the target, the layer and the input geometry), and so are SmoothGrad's and
// integrated gradients' results (by their options): a change of the head, threshold, colormap
// or discard ratio redraws from the cached pass, a change of the target or layer runs one pass.
// Nothing is written to disk.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "explain/explain.h"
#include "explain/model.h"
#include "explain/options_schema.h"
#include "explain/render.h"
#include "nn/data/image_decode.h"

namespace vitrine::explain {

/// The server's limits; each is named (by its command-line option) in the error a client gets.
struct ServeLimits {
  /// --max-body-mb: the request body, bytes.
  int64_t max_body_bytes = int64_t{16} << 20;
  /// --max-image-side: the decoded image's width and height, each (checked from the header,
  /// before anything is decoded).
  int64_t max_image_side = 4096;
  /// --request-timeout: seconds a request may wait for the model plus run; a request past it
  /// stops between two methods and gets 503.
  double request_timeout_s = 60;
  /// --queue: requests that may wait while one runs; more get 503 with Retry-After.
  int64_t queue = 4;
  /// --max-steps: integrated gradients' steps and SmoothGrad's samples, each.
  int64_t max_steps = 256;
  /// --max-attention-mb: one pass's attention probabilities and their gradients (2 x L x H x
  /// N^2 x 4 bytes): bounds the tokens of an image kept at its own size.
  int64_t max_attention_mb = 2048;
  /// Images whose passes stay cached (least recently used dropped first).
  int64_t cache_images = 8;
};

/// What a client did wrong (4xx) or why the server cannot answer now (503): an HTTP status and
/// a message for the JSON error. retry_after: seconds, for 503.
struct ClientError : Error {
  int status;
  int64_t retry_after = 0;
  ClientError(int status_, const std::string& message, int64_t retry_after_ = 0)
      : Error(message), status(status_), retry_after(retry_after_) {}
};

/// One request's options, from the JSON object of POST /api/explain: every key optional, each one
/// an entry of options_schema.h's table under the command line's name (`ig-method`, `pos-interp`)
/// or an older spelling (`ig_rule`, `pos_interp`, `methods`); GET /api/options lists them with
/// their types, defaults, ranges and help. An unknown key, a key given twice, a wrong type or a
/// value out of range is a ClientError 400 naming it. The server's ranges are its model's and
/// limits' (the layer and head of the model, at most --max-steps steps and samples). The answer:
///   heads       whether to draw every head of the layer (default true)
///   grids       whether to return each method's raw patch-grid values (default false)
struct RequestOptions {
  std::vector<Method> methods;
  int64_t target = -1;  // -1: the predicted class
  Options method;       // layer, head, threshold, fusion, discard, steps, samples, ...
  Colormap colormap = Colormap::Inferno;
  Style style = Style::Overlay;
  double alpha = 0.5;
  InputGeometry geometry;
  bool heads = true, grids = false;
  std::string normalise = "checkpoint";
  std::vector<float> mean, std;  // the normalisation the image gets, one per channel
};

/// What a server's requests are checked against: its model's depth, heads, MLP width and classes,
/// and --max-steps.
ServerContext server_context(const LoadedModel& model, const ServeLimits& limits);

/// The options a request gets for the keys it leaves out: options_schema.h's defaults, the
/// steps and samples within --max-steps.
RequestValues request_defaults(const ServeLimits& limits);

/// Parses and checks the options JSON text (empty: the defaults) for a model.
RequestOptions parse_request_options(std::string_view json_text, const LoadedModel& model,
                                     const ServeLimits& limits);

/// Counters since the service started (GET /api/model shows them).
struct ServeStats {
  int64_t requests = 0, answered = 0, refused_busy = 0, client_errors = 0, pass_cache_hits = 0;
  bool running = false;  // a request has the model now
  int64_t waiting = 0;   // requests waiting for it
};

class ExplainService {
 public:
  /// The model must be a Vision Transformer (the page shows attention); with a head or without.
  ExplainService(LoadedModel model, ServeLimits limits = {});
  ~ExplainService();

  /// GET /api/model: the architecture, classes, normalisation, the methods it has, the limits.
  nlohmann::json model_info() const;

  /// GET /api/options: the request options (options_schema.h: name, aliases, type, default, the
  /// server's range, choices, help) and the methods, each with its help and the options it reads
  /// (what the upload page builds its controls from).
  nlohmann::json options_info() const;

  /// POST /api/explain: the image file's bytes (PNG, JPEG, BMP; its name for messages) and the
  /// options' JSON text. Thread-safe. Throws ClientError (400, 413, 415, 503) or Error (500).
  nlohmann::json explain(std::string_view image_bytes, std::string_view options_json,
                         const std::string& image_name = "the image");

  ServeStats stats() const;
  const ServeLimits& limits() const { return limits_; }
  const LoadedModel& model() const { return model_; }

 private:
  struct CachedImage;
  struct Admission;
  std::shared_ptr<CachedImage> cached_pass(const std::string& key, const Sample& sample,
                                           const RequestOptions& o, bool& hit);
  /// One method's result for a cached image: SmoothGrad's and integrated gradients' kept by
  /// their options (from_cache says whether it was), every other method's from the pass.
  Explanation method_result(CachedImage& cached, Method m, const RequestOptions& o,
                            bool& from_cache);
  nlohmann::json run(std::string_view image_bytes, const RequestOptions& o,
                     const std::string& image_name, std::chrono::steady_clock::time_point deadline);

  LoadedModel model_;
  ServeLimits limits_;
  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable turn_;
  bool running_ = false;  // a request has the model
  int64_t waiting_ = 0;
  double recent_seconds_ = 1;  // a running mean of the requests' times, for Retry-After
  ServeStats stats_;
  std::list<std::pair<std::string, std::shared_ptr<CachedImage>>> cache_;  // most recent first
};

}  // namespace vitrine::explain
