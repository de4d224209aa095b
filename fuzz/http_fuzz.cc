// Fuzzes the HTTP layer itself on the server's own path: each input is sent as raw bytes over a
// loopback TCP connection to an in-process `HttpServer` (serve/http_connection.h: Beast's
// request line, header and chunked-body parsing under our limits and timeouts, pipelined
// requests, then every route and handler: completions and chat whole and streamed, tokenize,
// models, health, metrics), behind a GroupRouter whose one engine group answers every request
// at once with a few tokens. The client half-closes after its input; the server answers up to
// four pipelined requests, waits 50 ms for bytes a request still lacks, and the client reads
// until the server closes, then until the connection's thread has ended (bounded: 5 s). Any
// crash, sanitizer report, or a connection the server leaves hanging past the bound is a finding.
// EPSERVE_FUZZ_HTTP_ECHO=1 prints each answer's status line (to check a corpus).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "fuzz/fuzz_util.h"
#include "runtime/engine_group.h"
#include "serve/group_router.h"
#include "serve/http_server.h"
#include "serve/serve_metrics.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/deepseek_v3_tokens.h"
#include "text/tokenizer.h"

namespace {

using namespace epserve;

// Answers every request at once: up to three tokens, then `length` (or refuses a prompt with
// an id outside the vocabulary, as an engine would).
class InstantGroup : public EngineGroup {
 public:
  explicit InstantGroup(int32_t vocab) : vocab_(vocab) {}
  std::string name() const override { return "group 0"; }
  StatusOr<RequestId> Submit(EngineRequest r, std::shared_ptr<RequestStream> stream,
                             std::chrono::milliseconds) override {
    for (int32_t t : r.prompt)
      if (t < 0 || t >= vocab_)
        return Status::InvalidArgument("prompt token outside the vocabulary");
    const RequestId id = next_++;
    const int n = std::max(1, std::min(r.max_tokens, 3));
    for (int i = 0; i < n; ++i)
      stream->Push({.request = id,
                    .token = 40 + i,
                    .finish = i + 1 == n ? FinishReason::kLength : FinishReason::kNone});
    return id;
  }
  void Cancel(RequestId, FinishReason) override {}
  StatusOr<WorkerMetrics> Load(std::chrono::milliseconds) override { return WorkerMetrics{}; }

 private:
  int32_t vocab_;
  std::atomic<RequestId> next_{1};
};

struct Server {
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;
  std::unique_ptr<serve::GroupRouter> router;
  std::unique_ptr<serve::ServeMetrics> metrics;
  serve::ServeContext ctx;
  std::unique_ptr<serve::HttpServer> http;
  std::thread thread;
  int port = 0;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "http_fuzz: %s\n", what.c_str());
  std::abort();
}

Server* Start() {
  auto* s = new Server;
  auto files = text::TrainByteLevelBpe({.vocab_size = 512});
  if (!files.ok()) Die(files.status().message());
  auto tok = text::Tokenizer::FromJson(files->tokenizer, files->tokenizer_config);
  if (!tok.ok()) Die(tok.status().message());
  s->tokenizer = std::move(*tok);
  auto tmpl = text::ChatTemplate::Parse(text::DeepSeekV3ChatTemplate(), "chat_template");
  if (!tmpl.ok()) Die(tmpl.status().message());
  s->chat_template = std::make_unique<text::ChatTemplate>(std::move(*tmpl));
  std::vector<std::unique_ptr<EngineGroup>> groups;
  groups.push_back(std::make_unique<InstantGroup>(s->tokenizer->vocab_size()));
  auto router = serve::GroupRouter::Create(std::move(groups), {});
  if (!router.ok()) Die(router.status().message());
  s->router = std::move(*router);
  if (!s->router->WaitUntilUp(std::chrono::seconds(5)).ok()) Die("the fake group is not up");
  s->metrics = std::make_unique<serve::ServeMetrics>("fuzz");
  s->ctx.router = s->router.get();
  s->ctx.metrics = s->metrics.get();
  s->ctx.tokenizer = s->tokenizer.get();
  s->ctx.chat_template = s->chat_template.get();
  s->ctx.model_name = "fuzz";
  s->ctx.max_model_len = 4096;
  s->ctx.max_sessions = 64;
  s->http = std::make_unique<serve::HttpServer>(
      s->ctx, serve::HttpServerOptions{.host = "127.0.0.1",
                                       .port = 0,
                                       .max_body_bytes = 1 << 16,
                                       .num_threads = 16,
                                       .header_timeout_ms = 50,
                                       .read_timeout_ms = 50,
                                       .keep_alive_timeout_ms = 50,
                                       .keep_alive_max_requests = 4});
  auto port = s->http->Bind();
  if (!port.ok()) Die(port.status().message());
  s->port = *port;
  s->thread = std::thread([s] { (void)s->http->Serve(); });
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* const server = Start();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server->port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // libFuzzer's timeout check is a SIGALRM every second: any call here may be interrupted.
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
    int err = errno;
    socklen_t len = sizeof(err);
    if (err == EINTR) {  // the connection goes on: wait for it
      while (poll(&p, 1, 5000) < 0 && errno == EINTR) {
      }
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) Die(std::string("connect: ") + std::strerror(err));
  }
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early (a bad request line): fine
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);  // the input ends here
  const auto start = std::chrono::steady_clock::now();
  static const bool echo = std::getenv("EPSERVE_FUZZ_HTTP_ECHO") != nullptr;
  std::string answer;
  size_t received = 0;
  char buf[4096];
  for (;;) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5))
      Die("the answer did not end within 5 s");
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) received += static_cast<size_t>(n);
    if (n > 0 && echo && answer.size() < 200) answer.append(buf, static_cast<size_t>(n));
    if (n == 0) {  // the server closed: done
      if (echo) std::fprintf(stderr, "  -> %s\n", answer.substr(0, answer.find('\r')).c_str());
      break;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) break;
      const int err = errno;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      Die("reading the answer failed after " + std::to_string(ms) + " ms (" + std::strerror(err) +
          "; past 5 s: a hung connection), " + std::to_string(received) + " bytes of the answer, " +
          std::to_string(sent) + " of " + std::to_string(size) + " sent");
    }
  }
  close(fd);
  // The unit ends when the server's side of it has: its connection's thread has freed what it
  // held (else libFuzzer's leak check, run between units, can catch it mid-way), and a thread
  // that outlives its closed connection is a finding too.
  while (server->http->OpenConnections() > 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5))
      Die("a connection's thread still runs 5 s after its client closed");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return 0;
}
