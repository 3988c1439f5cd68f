// `vitrine-explain --serve`: the explanation service (serve.h) on HTTP with cpp-httplib, as
// llama.cpp's server: one self-contained page at /, the JSON API at /api/model (GET), /api/options
// (GET: the request options and the methods, options_schema.h) and /api/explain (POST,
// multipart/form-data: the file in "image", the options' JSON in "options").
// Nothing else is served: every other path, a traversal attempt included, is a 404 with a JSON
// error, and nothing on disk is read after the model.
//
//   curl -s http://127.0.0.1:8080/api/model
//   curl -s -F image=@cat.jpg -F 'options={"methods": "attention,rollout", "head": 2}'
//        http://127.0.0.1:8080/api/explain           (one command)
#pragma once
#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "explain/serve.h"

namespace vitrine::explain {

struct HttpOptions {
  /// The address to listen on: the loopback interface unless the user asks for another.
  std::string host = "127.0.0.1";
  /// 0: a free port chosen by the system (port() says which).
  int port = 8080;
  /// Threads reading requests and writing answers (the model still runs one request at a time).
  int threads = 8;
  /// Seconds a client may take to send its request, and to read the answer.
  int io_timeout_s = 10;
  /// Where one line per request goes (method, path shortened, status, size); empty: nowhere.
  std::function<void(const std::string&)> log;
};

/// Whether host names this machine's loopback interface (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);

/// The page served at / (serve_page.html, compiled in).
const std::string& serve_page();

class HttpServer {
 public:
  HttpServer(ExplainService& service, HttpOptions options);
  ~HttpServer();
  /// Binds the address; an Error names host and port when it cannot (in use, not this machine's).
  void bind();
  /// The port bound (after bind()).
  int port() const;
  /// Answers requests until stop() (from another thread or a signal handler thread).
  void listen();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it starts later, the
/// OpenMP threads included) and returns them: serve() waits for them in a thread of its own, with
/// no work in a signal handler. Call it before anything starts threads (before loading the model).
sigset_t block_stop_signals();

/// The program's --serve (after block_stop_signals()): binds, prints the address (and a warning
/// when it is not the loopback interface), answers until SIGINT or SIGTERM, then stops cleanly.
/// Returns the exit code.
int serve(ExplainService& service, const HttpOptions& options);

}  // namespace vitrine::explain
