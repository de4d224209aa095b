// The OpenAI-compatible HTTP front end: /v1/completions, /v1/chat/completions (both also as
// server-sent events), /v1/models, /tokenize, /detokenize, /health, /metrics, and
// /admin/replace-experts. docs/serving-api.md lists the parameters, errors and metrics.
// The server listens, gives each connection its own thread (bounded, below), and routes; one
// connection's reading, limits and timeouts are serve/http_connection.h's.
// Thread safety: Stop() may be called from any thread (e.g. a signal thread) while Serve()
// runs; everything else from the owning thread. The ServeContext must outlive the server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "serve/completion_session.h"
#include "serve/http_connection.h"

namespace epserve::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 1 << 20;
  // Deepest nesting of arrays/objects a request body may have (400 json_too_deep beyond it). No
  // OpenAI request needs more than a handful of levels; 64 is below the common JSON libraries'
  // defaults, and every walk over the parsed body (copies, the chat template's values) recurses.
  int max_json_depth = 64;
  // Request headers beyond these get 431 (nginx's default buffers allow 4 x 8 KB).
  size_t max_headers = 100;
  size_t max_header_bytes = 32 << 10;
  // Connections open at once, each on its own thread. Slow clients (headers a byte at a time)
  // and long streams hold theirs, so a fixed pool would let a few hundred of them starve
  // everyone. Beyond this bound (up to as many again) a connection is answered at once with
  // 503, except /health (so a flood cannot hide the server's state: it answers 200 saying
  // `degraded: HTTP connections at the bound` while the bound is reached); beyond twice the
  // bound new connections wait in the kernel's backlog until one ends.
  int num_threads = 1024;
  std::string ssl_certfile, ssl_keyfile;  // both set: HTTPS
  int listen_backlog = 1024;              // pending connections the kernel queues
  // A request's head must arrive within header_timeout_ms; its body waits at most
  // read_timeout_ms for more bytes; an idle keep-alive connection closes after
  // keep_alive_timeout_ms; one connection serves at most keep_alive_max_requests requests.
  // The HTTP fuzz target shortens them.
  int header_timeout_ms = 10000;
  int read_timeout_ms = 10000;
  int keep_alive_timeout_ms = 5000;
  int keep_alive_max_requests = 1000;
  // POST /admin/replace-experts is accepted at most once per this interval (a re-placement
  // moves expert weights between ranks); earlier ones get 429 with Retry-After. 0: no limit.
  int admin_replace_interval_ms = 10000;
};

class HttpServer : private HttpHandler {
 public:
  HttpServer(ServeContext& ctx, HttpServerOptions options);
  ~HttpServer() override;
  // Binds the listening socket (and loads the certificate for HTTPS); returns the port (the
  // chosen one for port 0).
  StatusOr<int> Bind();
  // Serves until Stop(); returns once every connection has ended. REQUIRES: Bind() succeeded.
  Status Serve();
  void Stop();
  // Connections open now, each on its own thread (a connection counts until its thread has
  // released everything it held).
  int OpenConnections();

 private:
  using Route = std::function<void(const HttpRequest&, HttpResponse*)>;
  void Routes();
  // HttpHandler
  bool Screen(const HttpRequest& head, HttpResponse* res) override;
  void Handle(const HttpRequest& req, HttpResponse* res) override;
  void Refuse(const HttpRefusal& refusal, HttpResponse* res) override;
  void Finished(const HttpRequest& req, int status) override;

  ServeContext& ctx_;
  HttpServerOptions options_;
  HttpLimits limits_;
  std::map<std::string, std::map<std::string, Route>> routes_;  // path -> method -> route
  int listen_fd_ = -1;
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> tls_{nullptr, SSL_CTX_free};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable connection_ended_;
  int connections_ = 0;  // open, each on its own thread
  std::mutex admin_mu_;  // held while a re-placement is asked for
  std::chrono::steady_clock::time_point last_replacement_{};  // accepted; {}: none yet
};

// Whether `a` equals `b`, in time that depends only on their lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace epserve::serve
