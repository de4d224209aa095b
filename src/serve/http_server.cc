#include "serve/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "base/json.h"
#include "serve/chat_prompt.h"
#include "serve/client_socket.h"

namespace epserve::serve {

namespace {

using Json = nlohmann::json;

void SendError(HttpResponse* res, const ApiError& e) {
  res->status = e.http_status;
  res->content_type = "application/json";
  // Messages may quote the request's path or method, which can be any bytes: invalid UTF-8 is
  // replaced (a plain dump() throws on it; the fuzzer found that crash).
  res->body = e.Body().dump(-1, ' ', false, Json::error_handler_t::replace);
}

void SetJson(HttpResponse* res, const Json& j) {
  res->content_type = "application/json";
  res->body = j.dump();
}

bool IsJson(const HttpRequest& req) {
  std::string type = req.Header("Content-Type");
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type.rfind("application/json", 0) == 0;
}

std::string TlsError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

}  // namespace

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& ref =
      a.size() == b.size() ? b : a;  // compare a with itself on length mismatch
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ ref[i]);
  return diff == 0;
}

HttpServer::HttpServer(ServeContext& ctx, HttpServerOptions options)
    : ctx_(ctx), options_(std::move(options)) {
  // A client that goes away mid-answer must not kill the process (TLS writes can raise it).
  std::signal(SIGPIPE, SIG_IGN);
  limits_.max_body_bytes = options_.max_body_bytes;
  limits_.max_headers = options_.max_headers;
  limits_.max_header_bytes = options_.max_header_bytes;
  limits_.header_timeout_ms = options_.header_timeout_ms;
  limits_.read_timeout_ms = options_.read_timeout_ms;
  limits_.keep_alive_timeout_ms = options_.keep_alive_timeout_ms;
  limits_.keep_alive_max_requests = std::max(1, options_.keep_alive_max_requests);
  Routes();
}

HttpServer::~HttpServer() {
  Stop();
  std::unique_lock<std::mutex> lock(mu_);
  connection_ended_.wait(lock, [this] { return connections_ == 0; });
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

StatusOr<int> HttpServer::Bind() {
  if (options_.ssl_certfile.empty() != options_.ssl_keyfile.empty())
    return Status::InvalidArgument("HTTPS needs both a certificate and its key");
  if (!options_.ssl_certfile.empty()) {
    tls_.reset(SSL_CTX_new(TLS_server_method()));
    if (tls_ == nullptr) return Status::Internal("cannot create a TLS context: " + TlsError());
    SSL_CTX_set_min_proto_version(tls_.get(), TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(tls_.get(), options_.ssl_certfile.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls_.get(), options_.ssl_keyfile.c_str(), SSL_FILETYPE_PEM) !=
            1 ||
        SSL_CTX_check_private_key(tls_.get()) != 1)
      return Status::InvalidArgument(options_.ssl_certfile + ", " + options_.ssl_keyfile +
                                     ": cannot load the certificate and key (PEM files that "
                                     "match): " +
                                     TlsError());
  }
  if (options_.port < 0 || options_.port > 65535)
    return Status::InvalidArgument("--port must be in [0, 65535], got " +
                                   std::to_string(options_.port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (const int e = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); e != 0)
    return Status::Unavailable("cannot bind to " + options_.host + ": " + gai_strerror(e));
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, options_.listen_backlog) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0)
    return Status::Unavailable("cannot bind to " + options_.host + ":" + port + " (" + why + ")");
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  return static_cast<int>(ntohs(bound.ss_family == AF_INET6
                                    ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port));
}

Status HttpServer::Serve() {
  if (listen_fd_ < 0) return Status::Internal("Serve() before a successful Bind()");
  const int bound = std::max(1, options_.num_threads);
  if (ctx_.metrics != nullptr) ctx_.metrics->SetHttpConnections(0, bound);
  Status result = Status::Ok();
  while (!stopping_) {
    {  // Beyond twice the bound, new connections wait in the kernel's backlog.
      std::unique_lock<std::mutex> lock(mu_);
      connection_ended_.wait_for(lock, std::chrono::milliseconds(100),
                                 [&] { return connections_ < 2 * bound || stopping_; });
      if (connections_ >= 2 * bound) continue;
    }
    pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: let some close
        std::fprintf(stderr, "epserve: accept: %s\n", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    int yes = 1;  // server-sent events are many small writes
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    bool overloaded;
    {
      std::lock_guard<std::mutex> lock(mu_);
      overloaded = connections_ >= bound;
      ++connections_;
      if (ctx_.metrics != nullptr) ctx_.metrics->SetHttpConnections(connections_, bound);
    }
    try {
      std::thread([this, fd, overloaded, bound] {
        ServeConnection(fd, tls_.get(), overloaded, limits_, *this, stopping_);
        std::lock_guard<std::mutex> lock(mu_);
        --connections_;
        if (ctx_.metrics != nullptr) ctx_.metrics->SetHttpConnections(connections_, bound);
        connection_ended_.notify_all();
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had: refuse this one
      ::close(fd);
      std::lock_guard<std::mutex> lock(mu_);
      --connections_;
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  connection_ended_.wait(lock, [this] { return connections_ == 0; });
  return result;
}

int HttpServer::OpenConnections() {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_;
}

void HttpServer::Stop() {
  stopping_ = true;
  connection_ended_.notify_all();
}

bool HttpServer::Screen(const HttpRequest& head, HttpResponse* res) {
  // A connection beyond the bound is answered at once (and closed); /health still is.
  if (head.overloaded && head.path != "/health") {
    SendError(res,
              {.http_status = 503,
               .message = "too many open connections (at most " +
                          std::to_string(options_.num_threads) + ", --http-threads); retry later",
               .code = "too_many_connections",
               .type = "server_error"});
    res->close = true;
    return true;
  }
  // Every route but the probes needs the key when one is set.
  if (!options_.api_key.empty() && head.path != "/health" && head.path != "/metrics") {
    const std::string auth = head.Header("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0 ||
        !ConstantTimeEquals(auth.substr(prefix.size()), options_.api_key)) {
      SendError(res, {.http_status = 401,
                      .message = "Incorrect or missing API key (Authorization: Bearer <key>)",
                      .code = "invalid_api_key"});
      return true;
    }
  }
  const auto route = routes_.find(head.path);
  if (route == routes_.end()) {
    SendError(res, {.http_status = 404, .message = "no such route: " + head.path});
    return true;
  }
  const std::string method = head.method == "HEAD" ? "GET" : head.method;
  if (route->second.count(method) == 0) {
    std::string allow;
    for (const auto& [m, _] : route->second) allow += (allow.empty() ? "" : ", ") + m;
    SendError(res,
              {.http_status = 405,
               .message = head.method + " is not allowed on " + head.path + " (" + allow + ")"});
    res->headers.emplace_back("Allow", allow);
    return true;
  }
  return false;
}

void HttpServer::Handle(const HttpRequest& req, HttpResponse* res) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  try {
    routes_.at(req.path).at(method)(req, res);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "epserve: %s %s: %s\n", req.method.c_str(), req.path.c_str(), e.what());
    *res = HttpResponse();
    SendError(res, {.http_status = 500, .message = "internal error", .type = "server_error"});
  }
}

void HttpServer::Refuse(const HttpRefusal& refusal, HttpResponse* res) {
  SendError(res, {.http_status = refusal.status, .message = refusal.message, .code = refusal.code});
}

void HttpServer::Finished(const HttpRequest& req, int status) {
  if (ctx_.metrics != nullptr && req.method == "POST" && req.path.rfind("/v1/", 0) == 0)
    ctx_.metrics->CountRequest(status == 200 ? "ok" : std::to_string(status));
}

void HttpServer::Routes() {
  routes_["/health"]["GET"] = [this](const HttpRequest& req, HttpResponse* res) {
    // 200 while some DP group can take requests ("degraded" when not all can, or while the
    // connection bound is reached and other requests get 503); 503 otherwise.
    const int up = ctx_.router->num_up(), all = ctx_.router->num_groups();
    const bool ok = !ctx_.draining && up > 0;
    if (ctx_.draining)
      res->body = "the server is shutting down\n";
    else if (up == 0)
      res->body = "no engine group is up\n";
    else if (up < all)
      res->body = "degraded: " + std::to_string(all - up) + " of " + std::to_string(all) +
                  " engine groups down\n";
    // This connection counts: at the bound, the next one is refused whether or not this is.
    const int bound = std::max(1, options_.num_threads), open = OpenConnections();
    if (ok && (req.overloaded || open >= bound))
      res->body += "degraded: HTTP connections at the bound (" + std::to_string(open) +
                   " open, --http-threads " + std::to_string(bound) +
                   "): requests on new connections get 503 too_many_connections\n";
    res->status = ok ? 200 : 503;
  };
  routes_["/metrics"]["GET"] = [this](const HttpRequest&, HttpResponse* res) {
    res->content_type = "text/plain; version=0.0.4";
    res->body = ctx_.metrics->Render(ctx_.router->Metrics(/*refresh=*/true));
  };
  routes_["/v1/models"]["GET"] = [this](const HttpRequest&, HttpResponse* res) {
    Json model = {{"id", ctx_.model_name},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "epserve"},
                  {"max_model_len", ctx_.max_model_len}};
    SetJson(res, Json{{"object", "list"}, {"data", Json::array({model})}});
  };
  // Parses a JSON request body (bounded in size by the connection) into *body, bounded in
  // nesting; false when it answered the request with an error.
  auto read_json = [this](const HttpRequest& req, HttpResponse* res, nlohmann::ordered_json* body) {
    if (!IsJson(req)) {
      SendError(res, {.message = "Content-Type must be application/json",
                      .code = "invalid_content_type"});
      return false;
    }
    // Checked before parsing: a body of 60,000 '[' is valid JSON to the parser, and the
    // recursive copy of it that followed overflowed the stack (the whole server, exit 139).
    if (JsonNestingDepth(req.body, options_.max_json_depth) > options_.max_json_depth) {
      SendError(res, {.message = "the request body nests arrays/objects deeper than " +
                                 std::to_string(options_.max_json_depth) + " levels",
                      .code = "json_too_deep"});
      return false;
    }
    *body = nlohmann::ordered_json::parse(req.body, nullptr, false);
    if (body->is_discarded()) {
      SendError(res, {.message = "the request body is not valid JSON", .code = "invalid_json"});
      return false;
    }
    return true;
  };
  auto completion = [this, read_json](Endpoint endpoint) {
    return [this, read_json, endpoint](const HttpRequest& req, HttpResponse* res) {
      nlohmann::ordered_json body;
      if (!read_json(req, res, &body)) return;
      auto parsed = ParseCompletionRequest(body, endpoint, ctx_.sampling_defaults);
      if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
      CompletionParams params = std::move(std::get<CompletionParams>(parsed));
      const bool stream = params.stream;
      auto started = CompletionSession::Start(ctx_, std::move(params));
      if (auto* e = std::get_if<ApiError>(&started)) return SendError(res, *e);
      std::shared_ptr<CompletionSession> session =
          std::move(std::get<std::unique_ptr<CompletionSession>>(started));
      if (!stream) {
        // A client that gives up cancels its request: its socket is watched while it runs.
        // Serialized as it is built: a tree of a large answer (n x max_tokens x top_logprobs)
        // would be ~10x its text.
        auto result = session->CollectText([fd = req.fd] { return ClientClosed(fd); });
        if (auto* e = std::get_if<ApiError>(&result)) return SendError(res, *e);
        res->content_type = "application/json";
        res->body = std::move(std::get<std::string>(result));
        return;
      }
      res->content_type = "text/event-stream";
      res->headers.emplace_back("Cache-Control", "no-cache");
      res->next = [session](std::string* out) {
        return session->NextSse(out, std::chrono::milliseconds(100));
      };
      res->abandoned = [session] { session->Cancel(); };
    };
  };
  routes_["/v1/completions"]["POST"] = completion(Endpoint::kCompletions);
  routes_["/v1/chat/completions"]["POST"] = completion(Endpoint::kChat);
  // vLLM's /tokenize and /detokenize (also under /v1): the ids a prompt or a chat renders to.
  auto tokenize = [this, read_json](const HttpRequest& req, HttpResponse* res) {
    nlohmann::ordered_json body;
    if (!read_json(req, res, &body)) return;
    auto parsed = ParseTokenizeRequest(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    auto built = BuildPrompt(ctx_, std::get<CompletionParams>(parsed));
    if (auto* e = std::get_if<ApiError>(&built)) return SendError(res, *e);
    const auto& ids = std::get<std::vector<int32_t>>(built);
    Json out = {{"count", ids.size()}, {"max_model_len", ctx_.max_model_len}, {"tokens", ids}};
    if (std::get<CompletionParams>(parsed).return_token_strs) {
      Json strs = Json::array();
      for (int32_t id : ids) strs.push_back(ctx_.tokenizer->IdToToken(id));
      out["token_strs"] = strs;
    }
    SetJson(res, out);
  };
  auto detokenize = [this, read_json](const HttpRequest& req, HttpResponse* res) {
    nlohmann::ordered_json body;
    if (!read_json(req, res, &body)) return;
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      return SendError(res,
                       {.message = "'tokens' must be an array of token ids", .param = "tokens"});
    for (const auto& [key, value] : body.items())
      if (key != "tokens" && key != "model" && !value.is_null())
        return SendError(
            res, {.message = "'" + key + "' is not supported by this server", .param = key});
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() >= ctx_.tokenizer->vocab_size())
        return SendError(res, {.message = "'tokens' holds " + t.dump() +
                                          ", not a token id of this model's vocabulary [0, " +
                                          std::to_string(ctx_.tokenizer->vocab_size()) + ")",
                               .param = "tokens"});
      ids.push_back(t.get<int32_t>());
    }
    StatusOr<std::string> text = ctx_.tokenizer->Decode(ids);
    if (!text.ok()) return SendError(res, {.message = text.status().message(), .param = "tokens"});
    SetJson(res, Json{{"prompt", *text}});
  };
  // Re-places the engine world's experts now (serve --np with --replace-every; the switch
  // follows over its next steps with traffic, docs/expert-parallelism.md).
  routes_["/admin/replace-experts"]["POST"] = [this](const HttpRequest&, HttpResponse* res) {
    if (!ctx_.replace_experts)
      return SendError(res, {.http_status = 404,
                             .message = "this deployment does not re-place experts (it needs "
                                        "serve --np with --replace-every)",
                             .code = "replacement_not_enabled"});
    // Rate-limited: each accepted request moves expert weights between the ranks.
    std::lock_guard<std::mutex> lock(admin_mu_);
    const auto now = std::chrono::steady_clock::now();
    const auto interval = std::chrono::milliseconds(options_.admin_replace_interval_ms);
    if (last_replacement_ != std::chrono::steady_clock::time_point{} &&
        now < last_replacement_ + interval) {
      const std::string retry = std::to_string(std::max<int64_t>(
          1, std::chrono::ceil<std::chrono::seconds>(last_replacement_ + interval - now).count()));
      char every[32];
      std::snprintf(every, sizeof(every), "%g", options_.admin_replace_interval_ms / 1000.0);
      SendError(res, {.http_status = 429,
                      .message = std::string("at most one re-placement is accepted per ") + every +
                                 " s (--admin-replace-interval); retry in " + retry + " s",
                      .code = "rate_limit_exceeded",
                      .type = "rate_limit_error"});
      res->headers.emplace_back("Retry-After", retry);
      return;
    }
    const Status st = ctx_.replace_experts();
    if (!st.ok())
      return SendError(res, {.http_status = 503,
                             .message = st.message(),
                             .code = "replacement_unavailable",
                             .type = "server_error"});
    last_replacement_ = now;
    SetJson(res, Json{{"status", "requested"}});
  };
  for (const char* path : {"/v1/tokenize", "/tokenize"}) routes_[path]["POST"] = tokenize;
  for (const char* path : {"/v1/detokenize", "/detokenize"}) routes_[path]["POST"] = detokenize;
}

}  // namespace epserve::serve
