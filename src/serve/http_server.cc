#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cstdio>
#include <ctime>

#include "base/json.h"
#include "serve/chat_prompt.h"
#include "serve/client_socket.h"
#include "serve/connection_queue.h"

namespace epserve::serve {

namespace {

using Json = nlohmann::json;

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.Body().dump(), "application/json");
}

bool IsJson(const httplib::Request& req) {
  std::string type = req.get_header_value("Content-Type");
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type.rfind("application/json", 0) == 0;
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
  if (!options_.ssl_certfile.empty())
    server_ = std::make_unique<httplib::SSLServer>(options_.ssl_certfile.c_str(),
                                                   options_.ssl_keyfile.c_str());
  else
    server_ = std::make_unique<httplib::Server>();
  // A thread per connection, bounded (serve/connection_queue.h): slow clients and long
  // streams cannot starve the others.
  const int connections = options_.num_threads;
  server_->new_task_queue = [connections] { return new ConnectionQueue(connections); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_keep_alive_timeout(2);
  server_->set_read_timeout(options_.read_timeout_ms / 1000,
                            (options_.read_timeout_ms % 1000) * 1000);
  if (options_.keep_alive_max_requests > 0)
    server_->set_keep_alive_max_count(static_cast<size_t>(options_.keep_alive_max_requests));
  server_->set_write_timeout(10);
  // cpp-httplib listens with a backlog of 5: a burst of new connections (a load test opening
  // 200 at once) overflows it and connections fail. Keep the listening socket (this hook sees
  // it before bind) and listen again with a real backlog once bound.
  server_->set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  server_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (ctx_.metrics != nullptr && req.method == "POST" && req.path.rfind("/v1/", 0) == 0)
      ctx_.metrics->CountRequest(res.status == 200 ? "ok" : std::to_string(res.status));
  });
  Routes();
}

HttpServer::~HttpServer() = default;

StatusOr<int> HttpServer::Bind() {
  if (!server_->is_valid())
    return Status::InvalidArgument(options_.ssl_certfile + ", " + options_.ssl_keyfile +
                                   ": cannot load the certificate and key (PEM files that match)");
  if (options_.port < 0 || options_.port > 65535)
    return Status::InvalidArgument("--port must be in [0, 65535], got " +
                                   std::to_string(options_.port));
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    if (port < 0) return Status::Unavailable("cannot bind to " + options_.host);
  } else if (!server_->bind_to_port(options_.host, options_.port)) {
    return Status::Unavailable("cannot bind to " + options_.host + ":" +
                               std::to_string(options_.port) + " (in use?)");
  }
  if (listen_fd_ >= 0 && ::listen(listen_fd_, options_.listen_backlog) != 0)
    return Status::Unavailable("listen(" + std::to_string(options_.listen_backlog) +
                               ") failed on " + options_.host);
  return port;
}

Status HttpServer::Serve() {
  if (!server_->listen_after_bind())
    return Status::Unavailable("the HTTP server stopped with an error");
  return Status::Ok();
}

void HttpServer::Stop() { server_->stop(); }

void HttpServer::Routes() {
  const std::string key = options_.api_key;
  const size_t max_headers = options_.max_headers, max_header_bytes = options_.max_header_bytes;
  const int connections = options_.num_threads;
  server_->set_pre_routing_handler([key, max_headers, max_header_bytes, connections](
                                       const httplib::Request& req, httplib::Response& res) {
    // A connection beyond the bound is answered at once (and closed); /health still is.
    if (ConnectionQueue::Overloaded() && req.path != "/health") {
      SendError(res, {.http_status = 503,
                      .message = "too many open connections (at most " +
                                 std::to_string(connections) + ", --http-threads); retry later",
                      .code = "too_many_connections",
                      .type = "server_error"});
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Header count and total size are bounded (cpp-httplib 0.11 bounds only each line): 431.
    size_t header_bytes = 0;
    for (const auto& [k, v] : req.headers) header_bytes += k.size() + v.size() + 4;
    if (req.headers.size() > max_headers || header_bytes > max_header_bytes) {
      SendError(res,
                {.http_status = 431,
                 .message = "request headers too large (at most " + std::to_string(max_headers) +
                            " headers, " + std::to_string(max_header_bytes) + " bytes)",
                 .code = "request_header_fields_too_large"});
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (key.empty() || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool ok =
        auth.rfind(prefix, 0) == 0 && ConstantTimeEquals(auth.substr(prefix.size()), key);
    if (ok) return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, {.http_status = 401,
                    .message = "Incorrect or missing API key (Authorization: Bearer <key>)",
                    .code = "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Answers the library's own errors (413, unknown routes, wrong methods) in OpenAI's shape.
  server_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e{.http_status = res.status, .message = "request failed"};
        if (res.status == 413) {
          e.message = "the request body is larger than --max-body-bytes";
          e.code = "request_too_large";
        } else if (res.status == 404) {
          e.message = "no such route";
        } else if (res.status == 405) {
          e.message = "method not allowed";
        }
        SendError(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, {.http_status = 500, .message = what, .type = "server_error"});
      });

  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    // 200 while some DP group can take requests ("degraded" when not all can); 503 otherwise.
    const int up = ctx_.router->num_up(), all = ctx_.router->num_groups();
    const bool ok = !ctx_.draining && up > 0;
    std::string body;
    if (ctx_.draining)
      body = "the server is shutting down\n";
    else if (up == 0)
      body = "no engine group is up\n";
    else if (up < all)
      body = "degraded: " + std::to_string(all - up) + " of " + std::to_string(all) +
             " engine groups down\n";
    res.set_content(body, "text/plain");
    res.status = ok ? 200 : 503;
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx_.metrics->Render(ctx_.router->Metrics(/*refresh=*/true)),
                    "text/plain; version=0.0.4");
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Json model = {{"id", ctx_.model_name},
                  {"object", "model"},
                  {"created", static_cast<int64_t>(std::time(nullptr))},
                  {"owned_by", "epserve"},
                  {"max_model_len", ctx_.max_model_len}};
    res.set_content(Json{{"object", "list"}, {"data", Json::array({model})}}.dump(),
                    "application/json");
  });
  // Reads a JSON request body into *body, bounded in size and nesting whatever the transfer
  // encoding; false when it answered the request with an error.
  auto read_json = [this](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& content, nlohmann::ordered_json* body) {
    if (!IsJson(req)) {
      SendError(res, {.message = "Content-Type must be application/json",
                      .code = "invalid_content_type"});
      return false;
    }
    // cpp-httplib enforces set_payload_max_length for a Content-Length body only, and read a
    // chunked one whole (100 MB cost 430 MB of memory).
    std::string body_text;
    const size_t limit = options_.max_body_bytes;
    bool too_large = req.get_header_value<uint64_t>("Content-Length") > limit;
    const bool read = too_large || content([&](const char* data, size_t n) {
                        if (body_text.size() + n > limit) {
                          too_large = true;
                          return false;
                        }
                        body_text.append(data, n);
                        return true;
                      });
    if (!read && !too_large) {
      SendError(res, {.message = "the request body could not be read", .code = "invalid_body"});
      return false;
    }
    if (too_large) {
      res.set_header("Connection", "close");
      SendError(res, {.http_status = 413,
                      .message = "the request body is larger than --max-body-bytes (" +
                                 std::to_string(limit) + " bytes)",
                      .code = "request_too_large"});
      return false;
    }
    // Checked before parsing: a body of 60,000 '[' is valid JSON to the parser, and the
    // recursive copy of it that followed overflowed the stack (the whole server, exit 139).
    if (JsonNestingDepth(body_text, options_.max_json_depth) > options_.max_json_depth) {
      SendError(res, {.message = "the request body nests arrays/objects deeper than " +
                                 std::to_string(options_.max_json_depth) + " levels",
                      .code = "json_too_deep"});
      return false;
    }
    *body = nlohmann::ordered_json::parse(body_text, nullptr, false);
    if (body->is_discarded()) {
      SendError(res, {.message = "the request body is not valid JSON", .code = "invalid_json"});
      return false;
    }
    return true;
  };
  auto completion = [this, read_json](Endpoint endpoint) {
    return [this, read_json, endpoint](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& content) {
      nlohmann::ordered_json body;
      if (!read_json(req, res, content, &body)) return;
      auto parsed = ParseCompletionRequest(body, endpoint);
      if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
      CompletionParams params = std::move(std::get<CompletionParams>(parsed));
      const bool stream = params.stream;
      auto started = CompletionSession::Start(ctx_, std::move(params));
      if (auto* e = std::get_if<ApiError>(&started)) return SendError(res, *e);
      std::shared_ptr<CompletionSession> session =
          std::move(std::get<std::unique_ptr<CompletionSession>>(started));
      if (!stream) {
        // A client that gives up cancels its request (cpp-httplib does not tell: its socket
        // is looked up and watched, serve/client_socket.h).
        int fd = req.ssl != nullptr
                     ? SSL_get_fd(req.ssl)
                     : FindClientSocket(req.local_port, req.remote_addr, req.remote_port);
        auto result = session->Collect([fd] { return ClientClosed(fd); });
        if (auto* e = std::get_if<ApiError>(&result)) return SendError(res, *e);
        res.set_content(std::get<Json>(result).dump(), "application/json");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [session](size_t, httplib::DataSink& sink) {
            std::string out;
            const bool done = session->NextSse(&out, std::chrono::milliseconds(100));
            // A failed write or a dead socket while waiting: the client is gone.
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (out.empty() && !sink.is_writable()) return false;
            if (done) sink.done();
            return true;
          },
          [session](bool success) {
            if (!success) session->Cancel();
          });
    };
  };
  server_->Post("/v1/completions", completion(Endpoint::kCompletions));
  server_->Post("/v1/chat/completions", completion(Endpoint::kChat));
  // vLLM's /tokenize and /detokenize (also under /v1): the ids a prompt or a chat renders to.
  auto tokenize = [this, read_json](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& content) {
    nlohmann::ordered_json body;
    if (!read_json(req, res, content, &body)) return;
    auto parsed = ParseTokenizeRequest(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
    auto built = BuildPrompt(ctx_, std::get<CompletionParams>(parsed));
    if (auto* e = std::get_if<ApiError>(&built)) return SendError(res, *e);
    const auto& ids = std::get<std::vector<int32_t>>(built);
    Json out = {{"count", ids.size()}, {"max_model_len", ctx_.max_model_len}, {"tokens", ids}};
    if (body.value("return_token_strs", false)) {
      Json strs = Json::array();
      for (int32_t id : ids) strs.push_back(ctx_.tokenizer->IdToToken(id));
      out["token_strs"] = strs;
    }
    res.set_content(out.dump(), "application/json");
  };
  auto detokenize = [this, read_json](const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& content) {
    nlohmann::ordered_json body;
    if (!read_json(req, res, content, &body)) return;
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
    res.set_content(Json{{"prompt", *text}}.dump(), "application/json");
  };
  for (const char* path : {"/v1/tokenize", "/tokenize"}) server_->Post(path, tokenize);
  for (const char* path : {"/v1/detokenize", "/detokenize"}) server_->Post(path, detokenize);
}

}  // namespace epserve::serve
