// The explanation service on HTTP (serve_http.h).
#include "explain/serve_http.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <deque>
#include <thread>

namespace vitrine::explain {

using json = nlohmann::json;

namespace {

// The page, compiled in from serve_page.html (CMake writes serve_page.inc).
const char* const kPage =
#include "serve_page.inc"
    ;

/// A fixed set of worker threads for the connections; when kMaxPending connections already
/// wait for one, the accepting thread serves the next itself, so that it stops accepting
/// meanwhile and the system's listen backlog (bounded) holds the rest: no unbounded list of
/// connections. The expensive part, the model, has its own bounded queue (ExplainService).
class BoundedPool : public httplib::TaskQueue {
 public:
  static constexpr size_t kMaxPending = 64;
  explicit BoundedPool(size_t n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock lock(mutex_);
      if (jobs_.size() < kMaxPending) {
        jobs_.push_back(std::move(fn));
        cond_.notify_one();
        return;
      }
    }
    fn();  // back-pressure: served here, nothing more is accepted meanwhile
  }
  void shutdown() override {
    {
      std::unique_lock lock(mutex_);
      shutdown_ = true;
    }
    cond_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        cond_.wait(lock, [&] { return shutdown_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // shutting down, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }
  std::vector<std::thread> threads_;
  std::deque<std::function<void()>> jobs_;
  std::mutex mutex_;
  std::condition_variable cond_;
  bool shutdown_ = false;
};

/// At most n bytes of s with every byte outside printable ASCII shown as '?' (for the log and
/// for messages: what a client sends is never repeated in full).
std::string shown(const std::string& s, size_t n = 80) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < n; ++i)
    out += std::isprint(static_cast<unsigned char>(s[i])) ? s[i] : '?';
  if (s.size() > n) out += "...";
  return out;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message,
                int64_t retry_after = 0) {
  if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
  send_json(res, status, {{"error", message}, {"status", status}});
}

}  // namespace

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

const std::string& serve_page() {
  static const std::string page(kPage);
  return page;
}

struct HttpServer::Impl {
  ExplainService& service;
  HttpOptions options;
  httplib::Server server;
  int port = -1;
  Impl(ExplainService& s, HttpOptions o) : service(s), options(std::move(o)) {}
};

HttpServer::HttpServer(ExplainService& service, HttpOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {
  httplib::Server& svr = impl_->server;
  ExplainService& service_ref = impl_->service;
  const ServeLimits& limits = service.limits();
  const int threads = std::max(1, impl_->options.threads);
  svr.new_task_queue = [threads] { return new BoundedPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(static_cast<size_t>(limits.max_body_bytes));
  svr.set_read_timeout(impl_->options.io_timeout_s, 0);
  svr.set_write_timeout(impl_->options.io_timeout_s, 0);
  svr.set_keep_alive_timeout(5);
  // Every answer: no caching, no sniffing, and a page that may fetch nothing but this server.
  svr.set_default_headers({{"Cache-Control", "no-store"},
                           {"X-Content-Type-Options", "nosniff"},
                           {"Referrer-Policy", "no-referrer"}});

  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src "
                   "'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                   "frame-ancestors 'none'");
    res.set_content(serve_page(), "text/html; charset=utf-8");
  });
  svr.Get("/api/model", [&service_ref](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, service_ref.model_info());
  });
  svr.Get("/api/options", [&service_ref](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, service_ref.options_info());
  });
  svr.Post("/api/explain", [&service_ref](const httplib::Request& req, httplib::Response& res) {
    if (!req.is_multipart_form_data()) {
      send_error(res, 415,
                 fmt::format("POST /api/explain: expected multipart/form-data with the image file "
                             "in \"image\" and the options' JSON in \"options\" (curl -F "
                             "image=@photo.jpg -F 'options={{...}}'), got Content-Type \"{}\"",
                             shown(req.get_header_value("Content-Type"))));
      return;
    }
    if (!req.has_file("image")) {
      send_error(res, 400,
                 "POST /api/explain: no \"image\" part: send the file as -F image=@photo.jpg");
      return;
    }
    const httplib::MultipartFormData image = req.get_file_value("image");
    const std::string options =
        req.has_file("options") ? req.get_file_value("options").content : std::string();
    const std::string name =
        image.filename.empty() ? std::string("the image") : shown(image.filename, 64);
    try {
      send_json(res, 200, service_ref.explain(image.content, options, name));
    } catch (const ClientError& e) {
      send_error(res, e.status, e.what(), e.retry_after);
    } catch (const std::bad_alloc&) {
      send_error(res, 503, "out of memory for this request; try a smaller image", 5);
    } catch (const std::exception& e) {
      send_error(res, 500, fmt::format("the server failed on this request: {}", e.what()));
    }
  });
  // Statuses httplib sets itself (no route, a body over the limit, a malformed request) get a
  // JSON error too; answers that already have one keep it.
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [&limits](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        switch (res.status) {
          case 404:
            message = fmt::format(
                "no such page: {} {}; the server has GET /, GET /api/model, GET /api/options and "
                "POST /api/explain",
                shown(req.method, 16), shown(req.path));
            break;
          case 413:
            message = fmt::format("the request body is over the limit of {} bytes (--max-body-mb)",
                                  limits.max_body_bytes);
            break;
          case 414:
            message = "the request's path is too long";
            break;
          default:
            message = fmt::format("malformed request (HTTP status {})", res.status);
        }
        send_error(res, res.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        send_error(res, 500, "the server failed on this request");
      });
  if (impl_->options.log)
    svr.set_logger(
        [log = impl_->options.log](const httplib::Request& req, const httplib::Response& res) {
          log(fmt::format("{} {} {} ({} bytes in, {} out)", shown(req.method, 16),
                          shown(req.path, 60), res.status,
                          shown(req.get_header_value("Content-Length"), 12), res.body.size()));
        });
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  VT_CHECK(o.port >= 0 && o.port <= 65535, "--port {}: expected 0 (any free port) to 65535",
           o.port);
  if (o.port == 0) {
    impl_->port = impl_->server.bind_to_any_port(o.host);
    VT_CHECK(impl_->port > 0, "--host {}: cannot listen there (not an address of this machine?)",
             o.host);
  } else {
    VT_CHECK(impl_->server.bind_to_port(o.host, o.port),
             "--host {} --port {}: cannot listen there (the port is in use, or the address is not "
             "this machine's)",
             o.host, o.port);
    impl_->port = o.port;
  }
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

sigset_t block_stop_signals() {
  // The default disposition first: a shell starts background programs with SIGINT ignored, and
  // an ignored signal is discarded, never waited for.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int serve(ExplainService& service, const HttpOptions& options) {
  const sigset_t signals = block_stop_signals();
  HttpServer server(service, options);
  server.bind();
  const std::string host =
      options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host;
  if (!is_loopback(options.host))
    fmt::print(
        "warning: listening on {}, not only this machine's loopback interface: anyone who can "
        "reach it on port {} can send images to the model and read the answers (there is no "
        "authentication)\n",
        options.host, server.port());
  fmt::print("vitrine-explain: serving {} at http://{}:{}/ (Ctrl-C stops)\n",
             service.model().spec.describe(), host, server.port());
  std::fflush(stdout);
  std::atomic<bool> done{false};
  std::atomic<int> received{0};
  std::thread watcher([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig == SIGINT || sig == SIGTERM) {
        received = sig;
        server.stop();
        return;
      }
    }
  });
  server.listen();
  done = true;
  watcher.join();
  const ServeStats s = service.stats();
  fmt::print(
      "vitrine-explain: stopped{} after {} requests ({} answered, {} refused while busy, "
      "{} bad)\n",
      received ? fmt::format(" on {}", received == SIGINT ? "SIGINT" : "SIGTERM") : "", s.requests,
      s.answered, s.refused_busy, s.client_errors);
  return 0;
}

}  // namespace vitrine::explain
