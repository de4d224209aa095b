#include "serve/http_connection.h"

#include <openssl/err.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>

#include "serve/client_socket.h"

namespace epserve::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), name.size()) == 0) return v;
  return "";
}

namespace {

using Clock = std::chrono::steady_clock;

// The socket (non-blocking), plain or TLS, read and written under deadlines: a read waits at
// most until the deadline and at most `idle` for its next bytes, and gives up once `stopping`
// is set (the server is shutting down; writes still finish).
class Transport {
 public:
  Transport(int fd, SSL* ssl, const std::atomic<bool>& stopping)
      : fd_(fd), ssl_(ssl), stopping_(stopping) {}
  ~Transport() {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);  // best effort: sends close_notify if the socket takes it
      SSL_free(ssl_);
    }
    ::close(fd_);
  }
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const { return fd_; }
  void SetDeadline(Clock::time_point deadline, std::chrono::milliseconds idle) {
    deadline_ = deadline;
    idle_ = idle;
  }

  // The TLS handshake, under the deadline; true for a plain connection.
  bool Handshake() {
    if (ssl_ == nullptr) return true;
    for (;;) {
      ERR_clear_error();
      const int r = SSL_accept(ssl_);
      if (r == 1) return true;
      if (!WaitFor(SSL_get_error(ssl_, r))) return false;
    }
  }

  size_t Read(void* p, size_t n, beast::error_code& ec) {
    ec = {};
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int r = SSL_read(ssl_, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (r > 0) return static_cast<size_t>(r);
        const int err = SSL_get_error(ssl_, r);
        if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) {
          ec = net::error::eof;
          return 0;
        }
        if (!WaitFor(err, &ec)) return 0;
        continue;
      }
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r > 0) return static_cast<size_t>(r);
      if (r == 0) {
        ec = net::error::eof;
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      if (!Poll(POLLIN, &ec)) return 0;
    }
  }

  size_t Write(const void* p, size_t n, beast::error_code& ec) {
    ec = {};
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int r = SSL_write(ssl_, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (r > 0) return static_cast<size_t>(r);
        if (!WaitFor(SSL_get_error(ssl_, r), &ec)) return 0;
        continue;
      }
      const ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec = beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      if (!Poll(POLLOUT, &ec)) return 0;
    }
  }

  // Before closing a connection whose client may still be sending (a refused body, a head cut
  // short): ends our side, then reads and drops what comes for up to 2 s (or 16 MB), so the
  // close does not reset the connection before the client has read the answer (a reset can
  // discard it from the client's buffer). nginx's lingering close.
  void Linger() {
    if (ssl_ != nullptr) SSL_shutdown(ssl_);
    ::shutdown(fd_, SHUT_WR);
    const auto until = Clock::now() + std::chrono::seconds(2);
    char sink[16384];
    for (size_t dropped = 0; dropped < (16 << 20);) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return;
      const ssize_t n = ::recv(fd_, sink, sizeof(sink), 0);
      if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) return;
      if (n > 0) dropped += static_cast<size_t>(n);
    }
  }

  // Waits until the client sends something (true), or `until` passes, the client closes or
  // `stopping` is set (false). Wakes every 100 ms to look at `stopping`.
  bool WaitReadable(Clock::time_point until, const std::atomic<bool>& stopping) {
    if (ssl_ != nullptr && SSL_pending(ssl_) > 0) return true;
    while (!stopping) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (r > 0) return (p.revents & POLLIN) != 0;
      if (r < 0 && errno != EINTR) return false;
    }
    return false;
  }

 private:
  // After a TLS call that could not finish: waits for what it wants; false (and *ec) on an
  // error, a timeout or a closed connection.
  bool WaitFor(int ssl_error, beast::error_code* ec = nullptr) {
    beast::error_code local;
    if (ec == nullptr) ec = &local;
    if (ssl_error == SSL_ERROR_WANT_READ) return Poll(POLLIN, ec);
    if (ssl_error == SSL_ERROR_WANT_WRITE) return Poll(POLLOUT, ec);
    *ec = net::error::connection_reset;
    return false;
  }

  bool Poll(short events, beast::error_code* ec) {
    const auto until = std::min(deadline_, Clock::now() + idle_);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) {
        *ec = beast::error::timeout;
        return false;
      }
      if ((events & POLLIN) != 0 && stopping_) {
        *ec = net::error::operation_aborted;
        return false;
      }
      pollfd p{.fd = fd_, .events = events, .revents = 0};
      const int slice = (events & POLLIN) != 0 ? 100 : 1 << 30;  // reads look at stopping_
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, slice)));
      if (r > 0) return true;  // readable, writable, or an error the next call reports
      if (r < 0 && errno != EINTR) {
        *ec = beast::error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  int fd_;
  SSL* ssl_;
  const std::atomic<bool>& stopping_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::chrono::milliseconds idle_{std::chrono::hours(24)};
};

// Beast's synchronous stream concept over a Transport.
class BeastStream {
 public:
  explicit BeastStream(Transport& t) : t_(t) {}

  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
      net::mutable_buffer b = *it;
      if (b.size() > 0) return t_.Read(b.data(), b.size(), ec);
    }
    ec = {};
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
      net::const_buffer b = *it;
      if (b.size() > 0) return t_.Write(b.data(), b.size(), ec);
    }
    ec = {};
    return 0;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  Transport& t_;
};

std::chrono::milliseconds Ms(int ms) { return std::chrono::milliseconds(ms); }

bool IsHeader(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view TrimOws(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// RFC 9110 5.6.2's tchar.
bool IsToken(std::string_view v) {
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           kSpecials.find(c) != std::string_view::npos;
  });
}

// How the request's body is framed (RFC 9112 6.1, 6.3), checked before anything is answered:
// the bytes after the head are only ever read as the next request when the body's length is
// beyond doubt. The one transfer coding served is `chunked` alone (any case); an unknown coding
// (gzip, identity, ...) is 501, as nginx and Go answer; a list that is not one (an empty or
// malformed element, `chunked` twice or not last), a Transfer-Encoding beside a Content-Length
// (which RFC 9112 6.3 lets a server process as chunked; refusing is safer behind proxies that
// pick the other) or under HTTP/1.0 is 400. Either way the connection then closes.
std::optional<HttpRefusal> CheckFraming(const HttpRequest& req) {
  std::vector<std::string_view> codings;
  bool transfer_encoding = false, content_length = false;
  for (const auto& [name, value] : req.headers) {
    if (IsHeader(name, "Content-Length")) content_length = true;
    if (!IsHeader(name, "Transfer-Encoding")) continue;
    transfer_encoding = true;
    std::string_view rest = value;
    for (;;) {
      const size_t comma = rest.find(',');
      codings.push_back(TrimOws(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (!transfer_encoding) return std::nullopt;
  auto bad = [](const std::string& why) {
    return HttpRefusal{400, why, "invalid_transfer_encoding"};
  };
  if (req.version == 10) return bad("an HTTP/1.0 request cannot have a Transfer-Encoding");
  if (content_length)
    return bad("a request with both Transfer-Encoding and Content-Length is refused");
  std::string unknown;
  for (size_t i = 0; i < codings.size(); ++i) {
    const std::string_view c = codings[i];
    if (!IsToken(TrimOws(c.substr(0, c.find(';')))))
      return bad("Transfer-Encoding is not a list of transfer codings");
    if (IsHeader(c, "chunked")) {
      if (i + 1 != codings.size())
        return bad("Transfer-Encoding: chunked must come once, as the last coding");
    } else if (unknown.empty()) {
      unknown = std::string(c);
    }
  }
  if (!unknown.empty())
    return HttpRefusal{501,
                       "the transfer coding '" + unknown +
                           "' is not implemented (only Transfer-Encoding: chunked is)",
                       "unsupported_transfer_encoding"};
  return std::nullopt;
}

class Connection {
 public:
  Connection(Transport& t, bool overloaded, const HttpLimits& limits, HttpHandler& handler,
             const std::atomic<bool>& stopping)
      : t_(t),
        stream_(t),
        buffer_(limits.max_header_bytes + (64 << 10)),
        overloaded_(overloaded),
        limits_(limits),
        handler_(handler),
        stopping_(stopping) {}

  void Run() {
    const auto opened = Clock::now();
    t_.SetDeadline(opened + Ms(limits_.header_timeout_ms), Ms(limits_.header_timeout_ms));
    if (!t_.Handshake()) return;
    for (int served = 0; served < limits_.keep_alive_max_requests && !stopping_; ++served) {
      // The first request's head is due within the header timeout of the connection opening;
      // a later one may wait the keep-alive timeout for its first byte, then has as long.
      auto start = opened;
      if (served > 0) {
        if (buffer_.size() == 0 &&
            !t_.WaitReadable(Clock::now() + Ms(limits_.keep_alive_timeout_ms), stopping_))
          return;
        start = Clock::now();
      }
      if (!ServeOne(start, served + 1 == limits_.keep_alive_max_requests)) break;
    }
    if (linger_) t_.Linger();
  }

 private:
  // Reads and answers one request; false when the connection is to close.
  bool ServeOne(Clock::time_point start, bool last) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    parser.body_limit(limits_.max_body_bytes);
    t_.SetDeadline(start + Ms(limits_.header_timeout_ms), Ms(limits_.header_timeout_ms));
    beast::error_code ec;
    const size_t before = buffer_.size();
    http::read_header(stream_, buffer_, parser, ec);
    if (ec == http::error::end_of_stream) return false;  // closed between requests
    if (ec) return RefuseHead(ec, before);

    const auto& head = parser.get();
    HttpRequest req;
    req.method = std::string(head.method_string().data(), head.method_string().size());
    const std::string_view target(head.target().data(), head.target().size());
    const size_t q = target.find('?');
    req.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
    req.version = head.version() == 10 ? 10 : 11;
    for (const auto& f : head)
      req.headers.emplace_back(std::string(f.name_string().data(), f.name_string().size()),
                               std::string(f.value().data(), f.value().size()));
    req.fd = t_.fd();
    req.overloaded = overloaded_;
    if (auto refusal = CheckFraming(req)) return Refuse(req, *refusal);
    if (target.size() > limits_.max_target_bytes)
      return Refuse(req, {414,
                          "the request target is longer than " +
                              std::to_string(limits_.max_target_bytes) + " bytes",
                          "uri_too_long"});
    if (req.headers.size() > limits_.max_headers)
      return Refuse(req, {431, TooLargeHead(), "request_header_fields_too_large"});
    const bool client_keep = head.keep_alive();
    const bool keep = client_keep && !last;
    const bool body_pending = !parser.is_done();

    HttpResponse res;
    if (handler_.Screen(req, &res)) {
      // Answered from the head: a body still coming is not read, so the connection ends.
      linger_ = body_pending;
      return AnswerAndEnd(req, res, keep && !body_pending, client_keep);
    }
    if (body_pending) {
      if (beast::iequals(head[http::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        t_.SetDeadline(Clock::now() + Ms(limits_.write_timeout_ms), Ms(limits_.write_timeout_ms));
        net::write(stream_, net::buffer(kContinue.data(), kContinue.size()), ec);
        if (ec) return false;
      }
      t_.SetDeadline(start + Ms(limits_.request_timeout_ms), Ms(limits_.read_timeout_ms));
      http::read(stream_, buffer_, parser, ec);
      if (ec == http::error::body_limit)
        return Refuse(req, {413, TooLargeBody(), "request_too_large"});
      if (ec == beast::error::timeout)
        return Refuse(req, {408, "the request body did not arrive in time", "request_timeout"});
      if (ec)
        return Refuse(req, {400, "the request body is malformed or incomplete", "invalid_body"});
    }
    req.body = parser.release().body();
    handler_.Handle(req, &res);
    return AnswerAndEnd(req, res, keep, client_keep);
  }

  // Answer(), and when it ends a connection its client meant to keep (the keep-alive limit,
  // a 503 beyond the connection bound, the server stopping), a lingering close: that client
  // may have pipelined more requests, and closing with them unread sends a reset, which can
  // discard the answers already written from the client's buffer before it reads them.
  bool AnswerAndEnd(const HttpRequest& req, HttpResponse& res, bool keep, bool client_keep) {
    const bool more = Answer(req, res, keep);
    if (!more && client_keep) linger_ = true;
    return more;
  }

  // A head that could not be read whole.
  bool RefuseHead(const beast::error_code& ec, size_t buffered_before) {
    HttpRequest req;  // nothing of it is known
    req.fd = t_.fd();
    if (ec == beast::error::timeout) {
      // Nothing sent at all: an idle connection, closed quietly.
      if (buffered_before == 0 && buffer_.size() == 0) return false;
      return Refuse(req, {408,
                          "the request head did not arrive within " +
                              std::to_string(limits_.header_timeout_ms) + " ms",
                          "request_timeout"});
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      // A request line that alone fills the head's bound: the target is too long.
      const std::string_view seen(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      if (seen.find("\r\n") == std::string_view::npos && seen.find('\n') == std::string_view::npos)
        return Refuse(req, {414, "the request target is too long", "uri_too_long"});
      return Refuse(req, {431, TooLargeHead(), "request_header_fields_too_large"});
    }
    if (ec == http::error::body_limit)  // a Content-Length over the bound
      return Refuse(req, {413, TooLargeBody(), "request_too_large"});
    if (ec == net::error::eof || ec == http::error::partial_message) return false;
    return Refuse(req, {400, "malformed HTTP request (" + ec.message() + ")", "invalid_request"});
  }

  // Answers with a refusal of the connection's own and closes.
  bool Refuse(const HttpRequest& req, const HttpRefusal& refusal) {
    HttpResponse res;
    res.status = refusal.status;
    handler_.Refuse(refusal, &res);
    linger_ = true;
    Answer(req, res, /*keep=*/false);
    return false;
  }

  std::string TooLargeHead() const {
    return "request headers too large (at most " + std::to_string(limits_.max_headers) +
           " headers, " + std::to_string(limits_.max_header_bytes) + " bytes)";
  }
  std::string TooLargeBody() const {
    return "the request body is larger than --max-body-bytes (" +
           std::to_string(limits_.max_body_bytes) + " bytes)";
  }

  // Writes the answer; whether the connection may serve another request.
  bool Answer(const HttpRequest& req, HttpResponse& res, bool keep) {
    keep = keep && !res.close && !stopping_;
    const bool ok = res.next ? Stream(req, res, &keep) : Whole(req, res, keep);
    handler_.Finished(req, res.status);
    return ok && keep;
  }

  template <class Message>
  void SetFields(const HttpResponse& res, Message* m) {
    m->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) m->set(k, v);
  }

  bool Whole(const HttpRequest& req, const HttpResponse& res, bool keep) {
    http::response<http::string_body> m{static_cast<http::status>(res.status), req.version};
    SetFields(res, &m);
    m.keep_alive(keep);
    m.body() = res.body;
    m.prepare_payload();
    t_.SetDeadline(Clock::now() + Ms(limits_.write_timeout_ms), Ms(limits_.write_timeout_ms));
    beast::error_code ec;
    if (req.method == "HEAD") {
      http::response_serializer<http::string_body> sr{m};
      http::write_header(stream_, sr, ec);
    } else {
      http::write(stream_, m, ec);
    }
    return !ec;
  }

  // A streamed answer: chunked under HTTP/1.1; under 1.0 the body runs to the close.
  bool Stream(const HttpRequest& req, HttpResponse& res, bool* keep) {
    const bool chunked = req.version == 11;
    if (!chunked) *keep = false;
    http::response<http::empty_body> m{static_cast<http::status>(res.status), req.version};
    SetFields(res, &m);
    m.keep_alive(*keep);
    if (chunked) m.chunked(true);
    beast::error_code ec;
    auto write_deadline = [&] {
      t_.SetDeadline(Clock::now() + Ms(limits_.write_timeout_ms), Ms(limits_.write_timeout_ms));
    };
    write_deadline();
    http::response_serializer<http::empty_body> sr{m};
    http::write_header(stream_, sr, ec);
    for (bool done = false; !ec && !done;) {
      std::string out;
      done = res.next(&out);
      if (!out.empty()) {
        write_deadline();
        if (chunked)
          net::write(stream_, http::make_chunk(net::buffer(out)), ec);
        else
          net::write(stream_, net::buffer(out), ec);
      } else if (!done && ClientClosed(t_.fd())) {
        ec = net::error::connection_reset;
      }
    }
    if (!ec && chunked) {
      write_deadline();
      net::write(stream_, http::make_chunk_last(), ec);
    }
    if (ec) {
      if (res.abandoned) res.abandoned();
      return false;
    }
    return true;
  }

  Transport& t_;
  BeastStream stream_;
  beast::flat_buffer buffer_;  // bytes read and not yet parsed: the next pipelined request
  const bool overloaded_;
  bool linger_ = false;  // the client may still be sending when the connection ends
  const HttpLimits& limits_;
  HttpHandler& handler_;
  const std::atomic<bool>& stopping_;
};

}  // namespace

void ServeConnection(int fd, SSL_CTX* tls, bool overloaded, const HttpLimits& limits,
                     HttpHandler& handler, const std::atomic<bool>& stopping) {
  SSL* ssl = nullptr;
  if (tls != nullptr) {
    ssl = SSL_new(tls);
    if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
      if (ssl != nullptr) SSL_free(ssl);
      ::close(fd);
      return;
    }
  }
  Transport t(fd, ssl, stopping);
  // Nothing a connection does may end the process: an exception (a handler's, Beast's) closes
  // this connection only.
  try {
    Connection(t, overloaded, limits, handler, stopping).Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "epserve: HTTP connection closed on an error: %s\n", e.what());
  }
}

}  // namespace epserve::serve
