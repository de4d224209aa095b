// The OpenAI-compatible HTTP front end (cpp-httplib): /v1/completions, /v1/chat/completions
// (both also as server-sent events), /v1/models, /health, /metrics. docs/serving-api.md lists
// the parameters, errors and metrics.
// Thread safety: Stop() may be called from any thread (e.g. a signal thread) while Serve()
// runs; everything else from the owning thread. The ServeContext must outlive the server.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "serve/completion_session.h"

namespace httplib {
class Server;
}

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
  // Connections open at once, each on its own thread (serve/connection_queue.h); beyond: 503.
  int num_threads = 1024;
  std::string ssl_certfile, ssl_keyfile;  // both set: HTTPS
  int listen_backlog = 1024;              // pending connections the kernel queues
  // How long a read of a request may wait for its next bytes, and how many requests one
  // connection may make (0: cpp-httplib's 5). The HTTP fuzz target shortens both.
  int read_timeout_ms = 10000;
  int keep_alive_max_requests = 0;
};

class HttpServer {
 public:
  HttpServer(ServeContext& ctx, HttpServerOptions options);
  ~HttpServer();
  // Binds the listening socket; returns the port (the chosen one for port 0).
  StatusOr<int> Bind();
  // Serves until Stop(). REQUIRES: Bind() succeeded.
  Status Serve();
  void Stop();

 private:
  void Routes();

  ServeContext& ctx_;
  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int listen_fd_ = -1;  // the listening socket, seen by the socket-options hook
};

// Whether `a` equals `b`, in time that depends only on their lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace epserve::serve
