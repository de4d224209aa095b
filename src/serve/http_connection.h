// One HTTP/1.1 connection of the server, read and answered on its own thread (Boost.Beast's
// parser and serializer over our own socket code). It owns what a hostile client could abuse:
//  - every request's head must arrive whole within `header_timeout_ms` of its first byte (of
//    the connection, for the first request): a client sending a header line every few seconds
//    (slowloris) is answered 408 and closed, whatever the gaps;
//  - a body waits at most `read_timeout_ms` for its next bytes and `request_timeout_ms` in all;
//  - the head is bounded in bytes (431), header count (431) and target length (414); the body
//    in bytes whatever the transfer encoding (413, and the connection closes without reading
//    more: at most `max_body_bytes` is ever held);
//  - a body's framing must be beyond doubt before anything is answered: a Transfer-Encoding
//    other than `chunked` alone is refused (501 for an unknown coding, 400 for a malformed
//    list, or beside a Content-Length, or under HTTP/1.0) and the connection closes, so the
//    bytes after such a head are never read as another request (request smuggling);
//  - pipelined requests (sent before their predecessors were answered) are read from the same
//    buffer and answered in order; a connection the server ends while its client meant to keep
//    it (the keep-alive limit, a refusal) closes lingering: our side shut down, what the client
//    still sends read and dropped for up to 2 s, so the answers written reach it;
//  - an idle keep-alive connection closes after `keep_alive_timeout_ms`, or once the server
//    stops.
// What to answer is the HttpHandler's: the connection calls Screen with the head, reads the body
// only when Screen let it through, then Handle. A response is whole or streamed (chunked, for
// server-sent events); a streamed one learns when its client has gone and is then abandoned.
// Thread safety: ServeConnection runs on the connection's thread; the handler is shared by all
// connections and must be thread-safe.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epserve::serve {

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;
  size_t max_headers = 100;
  size_t max_header_bytes = 32 << 10;  // the whole head, request line included
  size_t max_target_bytes = 8 << 10;   // the request line's target (414 beyond)
  int header_timeout_ms = 10000;
  int read_timeout_ms = 10000;
  int request_timeout_ms = 60000;
  int keep_alive_timeout_ms = 5000;
  int keep_alive_max_requests = 1000;
  int write_timeout_ms = 10000;
};

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string path;    // the target up to '?'
  std::string query;   // after '?', undecoded
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;         // empty until the body was read
  int fd = -1;              // the connection's socket (to watch for a client that has gone)
  bool overloaded = false;  // the connection arrived beyond the server's connection bound
  // The first header of that name (case-insensitive), or "".
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this answer
  // Set for a streamed answer: called until it returns true (the end); each call may append the
  // next piece to *out (nothing: still waiting; it should then return within ~100 ms so the
  // connection can watch its client). A piece that cannot be written, or a client seen gone
  // while waiting, ends the stream early: `abandoned` is then called.
  std::function<bool(std::string* out)> next;
  std::function<void()> abandoned;
};

// A refusal decided by the connection itself (bad or oversized request, timeout).
struct HttpRefusal {
  int status;
  std::string message;
  std::string code;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // With the head only: true when *res is the answer (the body is then not read, and the
  // connection closes if one was coming); false to read the body and call Handle.
  virtual bool Screen(const HttpRequest& head, HttpResponse* res) = 0;
  virtual void Handle(const HttpRequest& req, HttpResponse* res) = 0;
  // Renders a refusal of the connection's own as *res (status set by the caller).
  virtual void Refuse(const HttpRefusal& refusal, HttpResponse* res) = 0;
  // After the answer went out (or its stream ended), with the status sent.
  virtual void Finished(const HttpRequest& req, int status) = 0;
};

// Serves `fd` (an accepted, connected socket; closed on return) until the client closes, a
// limit or error ends it, or `stopping` is set while it is idle. `tls`: a server context to
// speak TLS with (nullptr: plain).
void ServeConnection(int fd, SSL_CTX* tls, bool overloaded, const HttpLimits& limits,
                     HttpHandler& handler, const std::atomic<bool>& stopping);

}  // namespace epserve::serve
