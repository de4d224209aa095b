// `epserve serve`: the OpenAI-compatible HTTP server (docs/serving-api.md) over one engine,
// i.e. one DP group in one process.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/engine.h"
#include "runtime/loaded_model.h"
#include "runtime/engine_worker.h"
#include "serve/http_server.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "tools/command.h"

namespace epserve::tools {

namespace {

struct ServeFlags {
  std::string model;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  int64_t max_body_bytes = 1 << 20;
  int64_t max_batch_tokens = 256;
  int max_running = 64;
  int64_t block_size = 64;
  std::string kv_dtype = "f32";
  std::string kv_memory = "10%";
  int threads = 0;
};

// Set by the SIGINT/SIGTERM handler. A handler, not a blocked mask with sigwait: libraries
// (OpenBLAS) start threads before main, and any of them could take a process signal.
std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal = sig; }

// Polls for the signal, then cancels every request, gives their responses up to 5 s to go out
// (the HTTP library cuts open streams when it stops) and stops the server. Returns when `done`.
void WatchSignals(serve::HttpServer* server, serve::ServeContext* ctx,
                  const std::atomic<bool>* done) {
  while (!*done) {
    if (g_stop_signal != 0) {
      std::fprintf(stderr, "epserve: signal %d, shutting down\n", g_stop_signal.load());
      ctx->worker->CancelAll();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (ctx->num_sessions > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      server->Stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status RunServe(const ServeFlags& f) {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  if (f.max_batch_tokens < 1) return Status::InvalidArgument("--max-batch-tokens must be >= 1");
  if (f.max_running < 1) return Status::InvalidArgument("--max-running must be >= 1");
  if (f.block_size < 1) return Status::InvalidArgument("--block-size must be >= 1");
  if (f.max_body_bytes < 1) return Status::InvalidArgument("--max-body-bytes must be >= 1");
  ASSIGN_OR_RETURN(KvDType dtype, ParseKvDType(f.kv_dtype));
  ASSIGN_OR_RETURN(int64_t kv_bytes, ParseKvMemory(f.kv_memory));
  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    return Status::NotFound(dir + "/tokenizer.json: serve needs the model's tokenizer");
  ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, text::Tokenizer::Load(dir));
  // A model without a chat template still serves /v1/completions.
  StatusOr<text::ChatTemplate> tmpl = text::LoadChatTemplate(dir + "/tokenizer_config.json");
  if (!tmpl.ok())
    std::fprintf(stderr, "epserve: no chat template (%s); /v1/chat/completions answers 400\n",
                 tmpl.status().message().c_str());

  ASSIGN_OR_RETURN(auto loaded, LoadModel(dir, {}));
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreads());
  Model model(loaded->config, *loaded->weights, pool);
  LocalExperts experts(*loaded->weights, pool, ExpertInputFormat::kF32);
  model.SetExperts(&experts);
  const ModelConfig& c = loaded->config;
  EngineOptions eo{.max_batch_tokens = f.max_batch_tokens,
                   .max_running = f.max_running,
                   .block_size = f.block_size,
                   .kv_dtype = dtype};
  eo.default_stop_ids.assign(c.eos_token_ids.begin(), c.eos_token_ids.end());
  eo.num_blocks = KvMemoryBlocks(c, dtype, f.block_size, kv_bytes);
  if (eo.num_blocks < 1)
    return Status::InvalidArgument("--kv-memory " + f.kv_memory + " holds not one cache block");
  std::printf("KV cache: %lld blocks x %lld positions (%s)\n",
              static_cast<long long>(eo.num_blocks), static_cast<long long>(eo.block_size),
              KvDTypeName(dtype));

  Engine engine(model, eo);
  EngineWorker worker(engine);
  serve::ServeContext ctx;
  ctx.worker = &worker;
  ctx.tokenizer = tok.get();
  ctx.chat_template = tmpl.ok() ? &*tmpl : nullptr;
  ctx.model_name = f.served_model_name.empty() ? std::filesystem::path(dir).filename().string()
                                               : f.served_model_name;
  ctx.max_model_len = c.max_position_embeddings;
  std::string api_key = f.api_key;
  if (api_key.empty() && std::getenv("EPSERVE_API_KEY") != nullptr)
    api_key = std::getenv("EPSERVE_API_KEY");
  serve::HttpServer server(ctx, {.host = f.host,
                                 .port = f.port,
                                 .api_key = api_key,
                                 .max_body_bytes = static_cast<size_t>(f.max_body_bytes)});
  ASSIGN_OR_RETURN(int port, server.Bind());
  std::atomic<bool> done{false};
  std::thread signals(WatchSignals, &server, &ctx, &done);
  std::printf("epserve: serving %s on http://%s:%d\n", ctx.model_name.c_str(), f.host.c_str(),
              port);
  std::fflush(stdout);
  Status st = server.Serve();
  done = true;
  signals.join();
  worker.Shutdown();
  return st;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
      "/v1/models, /health, /metrics; docs/serving-api.md). One process is one DP group on one\n"
      "engine; routing over several groups (gRPC) is not in this version.");
  cmd->add_option("--model", f->model, "model folder (default: the embedded tiny model)");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "the name clients give as \"model\" (default: the folder's name)");
  cmd->add_option("--host", f->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", f->port, "port to bind (0: any free port, printed)")
      ->capture_default_str();
  cmd->add_option("--api-key", f->api_key,
                  "require \"Authorization: Bearer KEY\" on /v1/* (default: $EPSERVE_API_KEY)");
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "largest request body (413 above)")
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", f->max_batch_tokens, "token budget of one engine step")
      ->capture_default_str();
  cmd->add_option("--max-running", f->max_running, "requests holding cache blocks at once")
      ->capture_default_str();
  cmd->add_option("--block-size", f->block_size, "positions per cache block")
      ->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "latent cache elements: f32 or bf16")
      ->capture_default_str();
  cmd->add_option("--kv-memory", f->kv_memory,
                  "cache pool: bytes (K/M/G suffix) or a share of available memory (N%)")
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "compute threads (default: all cores)");
  cmd->callback([f, &ctx] {
    Status st = RunServe(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
