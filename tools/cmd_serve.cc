// `epserve serve`: the OpenAI-compatible HTTP server and request scheduler (docs/serving-api.md).
// Three deployments behind the same API and router:
// - default: one DP group, its engine in this process;
// - --np N [--tp T] [--hostfile F]: starts the `epserve engine` world through mpirun (N ranks,
//   N/T DP groups) and routes to its groups' gRPC engine services;
// - --engines HOST:PORT,...: routes to engine services started elsewhere.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "base/guarded_thread.h"
#include "base/json.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "model/v4/v4_config.h"
#include "rpc/engine_client.h"
#include "rpc/engine_service.h"
#include "rpc/tls.h"
#include "runtime/engine_group.h"
#include "runtime/engine_worker.h"
#include "runtime/loaded_model.h"
#include "runtime/model_family.h"
#include "serve/chat_output.h"
#include "serve/completion_session.h"
#include "serve/group_router.h"
#include "serve/http_server.h"
#include "serve/serve_metrics.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/engine_world.h"
#include "tools/flag_checks.h"
#include "tools/replace_flags.h"
#include "tools/stop_signal.h"
#include "tools/world_supervisor.h"

namespace epserve::tools {

namespace {

struct ServeFlags {
  std::string model;
  std::string served_model_name;
  std::string generation_config = "auto";  // auto | none | PATH (model/generation_config.h)
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string ssl_certfile, ssl_keyfile;
  int64_t max_body_bytes = 1 << 20;
  int max_concurrent = 256;
  int64_t max_output_units = serve::kDefaultMaxOutputUnits;
  int http_threads = 0;
  double http_header_timeout = 10, http_read_timeout = 10, http_keep_alive = 5;
  double admin_replace_interval = 10;
  EngineFlags engine;
  // Deployment.
  std::string engines;
  std::string engine_token_file;   // --engines: the services' shared secret
  rpc::ClientTlsFiles engine_tls;  // --engine-tls-ca, -cert, -key, -server-name: the channels
  rpc::ServerTlsFiles world_tls;   // --np: the world's --tls-cert, --tls-key, --tls-client-ca
  int np = 0, tp = 1, ranks_per_node = 0;
  std::string hostfile, mpirun = "mpirun", mpirun_args,
                        engine_host;  // "": 127.0.0.1, or auto with a hostfile
  int engine_port = 0;
  std::string placement;
  ReplaceFlags replace;  // handed to the world --np starts
  double startup_timeout = 600, drain_timeout = 30;
  // Self-healing (tools/world_supervisor.h, CompletionSession's resume).
  int max_restarts_per_minute = 3;
  double stall_timeout = 30, resume_timeout = 600;
  // Routing.
  std::string policy = "cache_aware";
  serve::RoutingOptions routing;
  // Chat output.
  std::string tool_call_format = "auto", reasoning_parser = "auto";
  std::string scripted_outputs;  // tests only
  int health_interval_ms = 500, health_timeout_ms = 1000;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}

struct ChatFormats {
  serve::ToolCallFormat tools = serve::ToolCallFormat::kNone;
  serve::ServeContext::Reasoning reasoning = serve::ServeContext::Reasoning::kNone;
};

// --tool-call-format and --reasoning-parser; "auto" reads the chat template's text: one that
// writes tool calls says which format, one that mentions <think> reasons (V3.1's only when
// its `thinking` variable is set).
StatusOr<ChatFormats> ReadChatFormats(const ServeFlags& f, const std::string& dir) {
  std::string source;
  if (f.tool_call_format == "auto" || f.reasoning_parser == "auto") {
    StatusOr<std::string> text = ReadTextFile(dir + "/tokenizer_config.json");
    if (text.ok()) {
      const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
        source = j["chat_template"].get<std::string>();
    }
  }
  ChatFormats out;
  if (f.tool_call_format == "auto") {
    out.tools = serve::GuessToolCallFormat(source);
  } else {
    ASSIGN_OR_RETURN(out.tools, serve::ParseToolCallFormat(f.tool_call_format));
  }
  using R = serve::ServeContext::Reasoning;
  if (f.reasoning_parser == "auto") {
    if (source.find("<think>") != std::string::npos)
      out.reasoning =
          source.find("thinking") != std::string::npos ? R::kDeepSeekV3 : R::kDeepSeekR1;
  } else {
    out.reasoning = f.reasoning_parser == "deepseek-r1"   ? R::kDeepSeekR1
                    : f.reasoning_parser == "deepseek-v3" ? R::kDeepSeekV3
                                                          : R::kNone;
  }
  return out;
}

// The mpirun command line of `--np N`.
std::vector<std::string> MpirunArgv(const ServeFlags& f, const std::string& dir) {
  std::vector<std::string> a = {f.mpirun, "-np", std::to_string(f.np)};
  if (!f.hostfile.empty()) a.insert(a.end(), {"--hostfile", f.hostfile});
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"--bind-to", "none"});  // each rank runs its own thread pool
  if (f.hostfile.empty() && f.np > static_cast<int>(std::thread::hardware_concurrency()))
    a.push_back("--oversubscribe");
  for (const auto& x : Split(f.mpirun_args, ' ')) a.push_back(x);
  a.insert(a.end(), {"-x", "EPSERVE_ENGINE_TOKEN"});  // to every rank, also on other machines
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  a.push_back(n > 0 ? std::string(self, n) : "epserve");
  a.insert(a.end(),
           {"engine", "--model", dir, "--tp", std::to_string(f.tp), "--host",
            !f.engine_host.empty() ? f.engine_host : (f.hostfile.empty() ? "127.0.0.1" : "auto"),
            "--port", std::to_string(f.engine_port)});
  if (f.ranks_per_node > 0)
    a.insert(a.end(), {"--ranks-per-node", std::to_string(f.ranks_per_node)});
  if (!f.placement.empty()) a.insert(a.end(), {"--placement", f.placement});
  for (const auto& x : f.replace.Args()) a.push_back(x);
  for (const auto& x : f.engine.Args()) a.push_back(x);
  // Absolute: the ranks may start elsewhere (the files must be at the same path on every machine).
  auto file = [&](const char* flag, const std::string& path) {
    if (!path.empty()) a.insert(a.end(), {flag, std::filesystem::absolute(path).string()});
  };
  file("--tls-cert", f.world_tls.cert);
  file("--tls-key", f.world_tls.key);
  file("--tls-client-ca", f.world_tls.client_ca);
  return a;
}

// Polls for the signal; then stops taking requests, lets running ones finish for up to
// --drain-timeout, cancels the rest, gives their responses a moment to go out, and stops the
// HTTP server. Returns when `done`.
void WatchSignals(const ServeFlags& f, serve::HttpServer* server, serve::ServeContext* ctx,
                  const std::function<void()>& cancel_all, const std::atomic<bool>* done) {
  while (!*done) {
    if (StopSignal() != 0) {
      std::fprintf(stderr, "epserve: signal %d, draining %d requests (up to %.0f s)\n",
                   StopSignal(), ctx->num_sessions.load(), f.drain_timeout);
      ctx->draining = true;
      auto until = [&](double seconds) {
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
        while (ctx->num_sessions > 0 && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
      };
      until(f.drain_timeout);
      if (ctx->num_sessions > 0) {
        std::fprintf(stderr, "epserve: cancelling %d requests\n", ctx->num_sessions.load());
        cancel_all();
        until(5);
      }
      server->Stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status RunServe(const ServeFlags& f) {
  InstallStopSignalHandler(/*restart=*/true);
  f.engine.ApplyProcessWide();  // this process compiles grammars too (request validation)
  if (f.max_body_bytes < 1) return Status::InvalidArgument("--max-body-bytes must be >= 1");
  if (f.max_concurrent < 1)
    return Status::InvalidArgument("--max-concurrent-requests must be >= 1");
  if (f.np < 0) return Status::InvalidArgument("--np must be >= 1");
  if (f.tp < 1) return Status::InvalidArgument("--tp must be >= 1");
  if (f.np > 0 && f.np % f.tp != 0)
    return Status::InvalidArgument("--np " + std::to_string(f.np) + " is not a multiple of --tp " +
                                   std::to_string(f.tp));
  if (f.np > 0 && f.engine.device.cuda())
    return Status::InvalidArgument("--device " + f.engine.device.device +
                                   " with --np: expert parallelism across GPU ranks is not built "
                                   "yet (one in-process engine per GPU works: drop --np)");
  if (f.np > 0 && !f.engines.empty())
    return Status::InvalidArgument("--np starts engines, --engines uses running ones: not both");
  if (f.np == 0 && (f.tp != 1 || !f.hostfile.empty() || f.ranks_per_node != 0))
    return Status::InvalidArgument("--tp, --hostfile and --ranks-per-node need --np N");
  if (f.np == 0 && f.replace.every >= 0)
    return Status::InvalidArgument(
        "--replace-every moves experts between the ranks of the world --np N starts (for "
        "--engines, give it to their `epserve engine`)");
  if (f.http_threads < 0) return Status::InvalidArgument("--http-threads must be >= 0");
  if (f.engine_port < 0 || f.engine_port > 65535)
    return Status::InvalidArgument("--engine-port must be in [0, 65535]");
  if (f.health_interval_ms < 10 || f.health_timeout_ms < 10)
    return Status::InvalidArgument("--health-interval-ms and --health-timeout-ms must be >= 10");
  if (!(f.startup_timeout > 0) || !std::isfinite(f.startup_timeout))
    return Status::InvalidArgument("--startup-timeout must be a positive number of seconds");
  if (!(f.stall_timeout >= 0) || !std::isfinite(f.stall_timeout))
    return Status::InvalidArgument("--stall-timeout must be a number of seconds >= 0");
  if (!(f.resume_timeout >= 0) || !std::isfinite(f.resume_timeout))
    return Status::InvalidArgument("--resume-timeout must be a number of seconds >= 0");
  if (!(f.drain_timeout >= 0) || !std::isfinite(f.drain_timeout))
    return Status::InvalidArgument("--drain-timeout must be a number of seconds >= 0");
  if (f.ssl_certfile.empty() != f.ssl_keyfile.empty())
    return Status::InvalidArgument("--ssl-certfile and --ssl-keyfile go together");
  serve::RoutingOptions routing = f.routing;
  ASSIGN_OR_RETURN(routing.policy, serve::ParseRoutingPolicy(f.policy));
  RETURN_IF_ERROR(routing.Validate());

  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    return Status::NotFound(dir + "/tokenizer.json: serve needs the model's tokenizer");
  ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, text::Tokenizer::Load(dir));
  // A model without a chat template still serves /v1/completions.
  StatusOr<text::ChatTemplate> tmpl = text::LoadChatTemplate(dir + "/tokenizer_config.json");
  ASSIGN_OR_RETURN(std::string config_text, ReadTextFile(dir + "/config.json"));
  // What the scheduler needs of the model: its kind and context (either family).
  ASSIGN_OR_RETURN(const ModelFamily family, DetectModelFamily(dir));
  std::string model_type = "deepseek_v4";
  int64_t max_model_len = 0;
  if (family == ModelFamily::kDeepSeekV4) {
    ASSIGN_OR_RETURN(v4::V4Config v4_config, v4::ParseV4Config(config_text, dir + "/config.json"));
    max_model_len = v4_config.max_position_embeddings;
  } else {
    ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Parse(config_text, dir + "/config.json"));
    model_type = config.model_type;
    max_model_len = config.max_position_embeddings;
  }
  // The sampling defaults of requests that set none: the checkpoint's generation_config.json.
  ASSIGN_OR_RETURN(GenerationConfig generation, ReadGenerationConfig(f.generation_config, dir));
  serve::SamplingDefaults sampling;
  sampling.temperature = generation.temperature.value_or(sampling.temperature);
  sampling.top_p = generation.top_p.value_or(sampling.top_p);
  sampling.top_k = generation.top_k.value_or(sampling.top_k);
  std::fprintf(stderr,
               "epserve: sampling defaults (requests that set none): temperature %g, top_p %g, "
               "top_k %d (%s)\n",
               sampling.temperature, sampling.top_p, sampling.top_k, generation.Source().c_str());
  ChatFormats formats;
  ASSIGN_OR_RETURN(formats, ReadChatFormats(f, dir));
  // DeepSeek-V3.2 ships encoding/encoding_dsv32.py instead of a chat template: "auto" takes its
  // DSML tool calls, V3.1-style reasoning and the built-in prompt (serve/dsv32_prompt.h).
  // DeepSeek-V4 likewise (encoding/encoding_dsv4.py; serve/dsv4_prompt.h).
  const bool builtin_v32 = model_type == "deepseek_v32";
  if ((builtin_v32 || family == ModelFamily::kDeepSeekV4) && !tmpl.ok()) {
    if (f.tool_call_format == "auto")
      formats.tools =
          builtin_v32 ? serve::ToolCallFormat::kDeepSeekV32 : serve::ToolCallFormat::kDeepSeekV4;
    if (f.reasoning_parser == "auto")
      formats.reasoning = serve::ServeContext::Reasoning::kDeepSeekV3;
  }
  if (!tmpl.ok()) {
    if (serve::IsDsml(formats.tools))
      std::fprintf(
          stderr,
          "epserve: no chat template (%s); chat prompts are rendered by the built-in "
          "%s encoding\n",
          tmpl.status().message().c_str(),
          formats.tools == serve::ToolCallFormat::kDeepSeekV4 ? "DeepSeek-V4" : "DeepSeek-V3.2");
    else
      std::fprintf(stderr, "epserve: no chat template (%s); /v1/chat/completions answers 400\n",
                   tmpl.status().message().c_str());
  }
  std::fprintf(stderr, "epserve: chat output: tool calls: %s, reasoning: %s\n",
               std::string(serve::ToolCallFormatName(formats.tools)).c_str(),
               formats.reasoning == serve::ServeContext::Reasoning::kDeepSeekR1   ? "deepseek-r1"
               : formats.reasoning == serve::ServeContext::Reasoning::kDeepSeekV3 ? "deepseek-v3"
                                                                                  : "none");

  // The engines.
  const auto startup_deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(f.startup_timeout * 1000));
  std::unique_ptr<LocalEngine> local;
  std::unique_ptr<EngineWorker> worker;
  std::unique_ptr<WorldSupervisor> world;
  std::vector<rpc::GrpcEngineGroup*> grpc_groups;
  std::vector<std::unique_ptr<EngineGroup>> groups;
  std::vector<std::string> addresses = Split(f.engines, ',');
  // The engine services' shared secret: made here for the world --np starts (handed to it in
  // the environment, not on a command line others can read), or read for --engines.
  std::string token;
  if (!f.engine_token_file.empty()) {
    if (f.engines.empty())
      return Status::InvalidArgument("--engine-token-file is for --engines (--np makes its own)");
    ASSIGN_OR_RETURN(token, rpc::ReadTokenFile(f.engine_token_file));
  }
  // TLS on the channels to the engine services; with --np, the world's services too (their
  // files are checked here, before the world starts, and again by every rank).
  if (!f.engine_tls.empty() && f.np == 0 && f.engines.empty())
    return Status::InvalidArgument("--engine-tls-* are for --engines or --np");
  if (!f.world_tls.empty()) {
    if (f.np == 0)
      return Status::InvalidArgument(
          "--tls-cert, --tls-key and --tls-client-ca are the engine world's (with --np); HTTPS "
          "is --ssl-certfile and --ssl-keyfile");
    if (f.engine_tls.ca.empty())
      return Status::InvalidArgument(
          "--tls-cert with --np needs --engine-tls-ca, the CA that signed it");
    if (!f.world_tls.client_ca.empty() && f.engine_tls.cert.empty())
      return Status::InvalidArgument(
          "--tls-client-ca makes the world require a client certificate: give --engine-tls-cert "
          "and --engine-tls-key");
    RETURN_IF_ERROR(rpc::MakeServerCredentials(f.world_tls).status());
  } else if (f.np > 0 && !f.engine_tls.empty()) {
    return Status::InvalidArgument(
        "--engine-tls-* with --np: give the world's certificate too (--tls-cert, --tls-key)");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   rpc::MakeChannelCredentials(f.engine_tls));
  if (f.np > 0) {
    ASSIGN_OR_RETURN(token, rpc::RandomToken());
    setenv("EPSERVE_ENGINE_TOKEN", token.c_str(), 1);
    std::vector<std::string> argv = MpirunArgv(f, dir);
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "epserve: starting the engine world: %s\n", line.c_str());
    ASSIGN_OR_RETURN(world, WorldSupervisor::Start(
                                {.argv = argv,
                                 .num_groups = f.np / f.tp,
                                 .startup_timeout =
                                     std::chrono::seconds(static_cast<int64_t>(f.startup_timeout)),
                                 .down_timeout = std::chrono::milliseconds(
                                     static_cast<int64_t>(std::max(1.0, f.stall_timeout) * 1000)),
                                 .max_restarts_per_minute = f.max_restarts_per_minute}));
    addresses = world->addresses();
  }
  if (!addresses.empty()) {
    for (size_t g = 0; g < addresses.size(); ++g) {
      // Named by index only: a restarted world's group has another address.
      auto group = std::make_unique<rpc::GrpcEngineGroup>(
          "group " + std::to_string(g) + (world ? "" : " (" + addresses[g] + ")"), addresses[g],
          rpc::GrpcEngineGroupOptions{.token = token,
                                      .credentials = credentials,
                                      .tls_server_name = f.engine_tls.server_name});
      grpc_groups.push_back(group.get());
      groups.push_back(std::move(group));
    }
  } else {
    ASSIGN_OR_RETURN(local, StartLocalEngine(dir, f.engine));
    worker = std::make_unique<EngineWorker>(*local->engine);
    groups.push_back(std::make_unique<LocalEngineGroup>(*worker));
  }
  const int num_groups = static_cast<int>(groups.size());
  ASSIGN_OR_RETURN(
      auto router,
      serve::GroupRouter::Create(
          std::move(groups), {.routing = routing,
                              .health_interval = std::chrono::milliseconds(f.health_interval_ms),
                              .health_timeout = std::chrono::milliseconds(f.health_timeout_ms),
                              .stall_timeout = std::chrono::milliseconds(
                                  static_cast<int64_t>(f.stall_timeout * 1000))}));
  // One --startup-timeout for all of it: the world listening and every group answering.
  const auto left = startup_deadline - std::chrono::steady_clock::now();
  RETURN_IF_ERROR(
      router->WaitUntilUp(std::max(std::chrono::milliseconds(1000),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(left))));

  serve::ServeContext ctx;
  ctx.router = router.get();
  ctx.tokenizer = tok.get();
  ctx.chat_template = tmpl.ok() ? &*tmpl : nullptr;
  ctx.model_name = f.served_model_name.empty() ? std::filesystem::path(dir).filename().string()
                                               : f.served_model_name;
  ctx.max_model_len = max_model_len;
  ctx.sampling_defaults = sampling;
  ctx.tool_format = formats.tools;
  ctx.reasoning = formats.reasoning;
  if (!f.scripted_outputs.empty()) {
    ASSIGN_OR_RETURN(std::string scripts_text, ReadTextFile(f.scripted_outputs));
    ASSIGN_OR_RETURN(nlohmann::json scripts, ParseJson(scripts_text, f.scripted_outputs));
    if (!scripts.is_array())
      return Status::InvalidArgument(f.scripted_outputs + ": expected an array of {when, output}");
    for (const auto& s : scripts) {
      if (!s.is_object() || !s.contains("when") || !s["when"].is_string() ||
          !s.contains("output") || !s["output"].is_string())
        return Status::InvalidArgument(f.scripted_outputs +
                                       ": each entry needs string \"when\" and \"output\"");
      ctx.scripted_outputs.push_back(
          {s["when"].get<std::string>(), s["output"].get<std::string>()});
    }
    std::fprintf(stderr, "epserve: --scripted-outputs: %zu scripted answers (tests only)\n",
                 ctx.scripted_outputs.size());
  }
  ctx.max_sessions = f.max_concurrent;
  ctx.max_output_units = f.max_output_units;
  ctx.resume_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.resume_timeout * 1000));
  if (world) ctx.groups_may_return = [w = world.get()] { return w->healing(); };
  if (world && f.replace.every >= 0)
    ctx.replace_experts = [w = world.get()] { return w->RequestReplacement(); };
  serve::ServeMetrics metrics(ctx.model_name);
  ctx.metrics = &metrics;
  std::string api_key = f.api_key;
  if (api_key.empty() && std::getenv("EPSERVE_API_KEY") != nullptr)
    api_key = std::getenv("EPSERVE_API_KEY");
  serve::HttpServer server(
      ctx,
      {.host = f.host,
       .port = f.port,
       .api_key = api_key,
       .max_body_bytes = static_cast<size_t>(f.max_body_bytes),
       .num_threads = f.http_threads > 0 ? f.http_threads : std::max(1024, f.max_concurrent + 16),
       .ssl_certfile = f.ssl_certfile,
       .ssl_keyfile = f.ssl_keyfile,
       .header_timeout_ms = static_cast<int>(f.http_header_timeout * 1000),
       .read_timeout_ms = static_cast<int>(f.http_read_timeout * 1000),
       .keep_alive_timeout_ms = static_cast<int>(f.http_keep_alive * 1000),
       .admin_replace_interval_ms = static_cast<int>(f.admin_replace_interval * 1000)});
  ASSIGN_OR_RETURN(int port, server.Bind());
  std::atomic<bool> done{false};
  auto cancel_all = [&] {
    if (worker) worker->CancelAll();
    for (int g = 0; g < num_groups; ++g) router->ReportFailure(g, "the server is shutting down");
  };
  std::thread signals = GuardedThread("the signal watcher",
                                      [&] { WatchSignals(f, &server, &ctx, cancel_all, &done); });
  if (world)
    world->Supervise(router.get(), grpc_groups, [&metrics] { metrics.CountWorldRestart(); });
  std::printf("epserve: serving %s on %s://%s:%d (%d DP group%s, policy %s)\n",
              ctx.model_name.c_str(), f.ssl_certfile.empty() ? "http" : "https", f.host.c_str(),
              port, num_groups, num_groups == 1 ? "" : "s",
              serve::RoutingPolicyName(routing.policy));
  std::fflush(stdout);
  Status st = server.Serve();
  done = true;
  signals.join();
  if (world) world->Stop();  // no restarts while shutting down
  router.reset();
  if (worker) worker->Shutdown();
  return st;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
      "/v1/models, /health, /metrics; docs/serving-api.md). By default one DP group runs in this\n"
      "process; --np N starts an expert-parallel engine world of N ranks through mpirun and\n"
      "routes requests over its N/--tp DP groups; --engines routes to engine services started\n"
      "with `epserve engine`. SIGINT/SIGTERM drains running requests, then stops everything.");
  cmd->add_option("--model", f->model, "model folder (default: the embedded tiny model)");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "the name clients give as \"model\" (default: the folder's name)");
  cmd->add_option("--generation-config", f->generation_config,
                  "sampling defaults (temperature, top_p, top_k) of requests that set none: "
                  "auto = the model folder's generation_config.json if it has one, none = "
                  "OpenAI's (1, 1, all tokens), or the path of such a file; a request's own "
                  "values always win")
      ->capture_default_str();
  const char* http = "HTTP";
  cmd->add_option("--host", f->host, "address to bind")->capture_default_str()->group(http);
  cmd->add_option("--port", f->port, "port to bind (0: any free port, printed)")
      ->check(IntRange(0, 65535))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--api-key", f->api_key,
                  "require \"Authorization: Bearer KEY\" on /v1/* (default: $EPSERVE_API_KEY)")
      ->group(http);
  cmd->add_option("--ssl-certfile", f->ssl_certfile, "serve HTTPS with this PEM certificate")
      ->group(http);
  cmd->add_option("--ssl-keyfile", f->ssl_keyfile, "the certificate's PEM private key")
      ->group(http);
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "largest request body (413 above)")
      ->check(IntRange(1, int64_t{1} << 32))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--max-concurrent-requests", f->max_concurrent,
                  "completion requests open at once (429 above)")
      ->check(IntRange(1, 1 << 16))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--max-output-units", f->max_output_units,
                  "a request's bound on n x max_tokens x (1 + top logprobs), the size of its "
                  "answer (400 above; 0: none)")
      ->check(IntRange(0, int64_t{1} << 40))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--http-threads", f->http_threads,
                  "HTTP connections open at once, each on its own thread (default: 1024, or "
                  "max-concurrent-requests + 16 if more); up to as many again are answered 503 "
                  "at once (/health as usual), more wait")
      ->check(IntRange(0, 1 << 16))
      ->group(http);
  cmd->add_option("--http-header-timeout", f->http_header_timeout,
                  "seconds a request's head (request line and headers) may take to arrive in "
                  "all, however slowly it trickles in (408 and closed beyond)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--http-read-timeout", f->http_read_timeout,
                  "seconds a request body may wait for its next bytes (408 beyond; a body "
                  "takes at most 60 s in all)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--http-keep-alive", f->http_keep_alive,
                  "seconds an idle keep-alive connection stays open")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str()
      ->group(http);
  cmd->add_option("--admin-replace-interval", f->admin_replace_interval,
                  "seconds: POST /admin/replace-experts is accepted at most once per this "
                  "interval (429 with Retry-After before; 0: no limit)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str()
      ->group(http);
  f->engine.AddTo(cmd);
  const char* dep = "Deployment";
  cmd->add_option("--np", f->np, "start an engine world of N ranks through mpirun")
      ->check(IntRange(1, 1 << 16))
      ->group(dep);
  cmd->add_option("--tp", f->tp, "ranks per DP group (with --np)")
      ->check(IntRange(1, 1 << 10))
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "ranks per machine (with --np; default as MPI reports)")
      ->check(IntRange(1, 1 << 16))
      ->group(dep);
  cmd->add_option("--hostfile", f->hostfile, "Open MPI hostfile: run the world across machines")
      ->group(dep);
  cmd->add_option("--placement", f->placement, "expert placement file for the world")->group(dep);
  f->replace.AddTo(cmd, dep);
  cmd->add_option("--mpirun", f->mpirun, "the MPI launcher")->capture_default_str()->group(dep);
  cmd->add_option("--mpirun-args", f->mpirun_args, "more launcher arguments, space-separated")
      ->group(dep);
  cmd->add_option("--engine-host", f->engine_host,
                  "address the group leaders' engine services bind (default 127.0.0.1; with "
                  "--hostfile: auto, each machine's own address; keep it a private network)")
      ->group(dep);
  cmd->add_option("--engine-port", f->engine_port,
                  "port of group 0's engine service, PORT+G for group G (0: any free)")
      ->check(IntRange(0, 65535))
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--engine-token-file", f->engine_token_file,
                  "with --engines: the file holding the engine services' shared secret (the "
                  "engines' --engine-token-file)")
      ->group(dep);
  const char* etls = "Engine TLS";
  cmd->add_option("--engine-tls-ca", f->engine_tls.ca,
                  "talk to the engine services over TLS, verifying their certificates against "
                  "this PEM CA (--engines, or --np with --tls-cert)")
      ->group(etls);
  cmd->add_option("--engine-tls-cert", f->engine_tls.cert,
                  "mutual TLS: the PEM client certificate serve presents to the engine services "
                  "(for engines started with --tls-client-ca)")
      ->group(etls);
  cmd->add_option("--engine-tls-key", f->engine_tls.key, "the client certificate's PEM private key")
      ->group(etls);
  cmd->add_option("--engine-tls-server-name", f->engine_tls.server_name,
                  "the name the engines' certificates must carry (default: the host of each "
                  "address)")
      ->group(etls);
  cmd->add_option("--tls-cert", f->world_tls.cert,
                  "with --np: the world's engine services serve TLS with this PEM certificate "
                  "(engine --tls-cert; not HTTPS, that is --ssl-certfile)")
      ->group(etls);
  cmd->add_option("--tls-key", f->world_tls.key,
                  "with --np: the world's certificate's PEM private key (engine --tls-key)")
      ->group(etls);
  cmd->add_option("--tls-client-ca", f->world_tls.client_ca,
                  "with --np: the world requires client certificates this PEM CA signed (engine "
                  "--tls-client-ca; give --engine-tls-cert/--engine-tls-key)")
      ->group(etls);
  cmd->add_option("--engines", f->engines,
                  "route to running engine services instead: HOST:PORT,HOST:PORT,...")
      ->group(dep);
  cmd->add_option("--startup-timeout", f->startup_timeout,
                  "seconds to wait for every group to load and answer")
      ->check(PositiveReal())
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--max-restarts-per-minute", f->max_restarts_per_minute,
                  "with --np: restart the engine world when a rank dies or a group stays down "
                  "for --stall-timeout, at most this often (0: never; requests then get 503)")
      ->check(IntRange(0, 1000))
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--stall-timeout", f->stall_timeout,
                  "seconds a group may make no progress with requests waiting before it is "
                  "marked down and its requests move (0: never)")
      ->check(NonNegativeReal())
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--resume-timeout", f->resume_timeout,
                  "seconds a request whose group failed waits for a group to resume it (its "
                  "stream pauses, then goes on where it stopped)")
      ->check(NonNegativeReal())
      ->capture_default_str()
      ->group(dep);
  cmd->add_option("--drain-timeout", f->drain_timeout,
                  "seconds running requests may take to finish after SIGTERM")
      ->check(NonNegativeReal())
      ->capture_default_str()
      ->group(dep);
  const char* chat = "Chat output";
  cmd->add_option("--tool-call-format", f->tool_call_format,
                  "how the model writes tool calls: deepseek_v3 (V3, R1), deepseek_v31 (V3.1), "
                  "deepseek_v32 (V3.2's DSML; without a chat template, also its built-in "
                  "prompt), deepseek_v4 (V4's DSML; likewise), none, or auto (read from the "
                  "chat template or the model's kind)")
      ->check(CLI::IsMember({"auto", "deepseek_v3", "deepseek_r1", "deepseek_v31", "deepseek_v32",
                             "deepseek_v4", "none"}))
      ->capture_default_str()
      ->group(chat);
  cmd->add_option("--reasoning-parser", f->reasoning_parser,
                  "where reasoning_content comes from: deepseek-r1 (output reasons until "
                  "</think>), deepseek-v3 (V3.1, V3.2, V4: only with chat_template_kwargs "
                  "{\"thinking\": true} or a reasoning_effort), none, or auto (read from the "
                  "chat template)")
      ->check(CLI::IsMember({"auto", "deepseek-r1", "deepseek-v3", "none"}))
      ->capture_default_str()
      ->group(chat);
  cmd->add_option("--scripted-outputs", f->scripted_outputs,
                  "tests only: a JSON file [{\"when\": text, \"output\": text}, ...]; a chat "
                  "request whose last message contains `when` is answered with exactly "
                  "`output`'s tokens (docs/testing.md)")
      ->check(CLI::ExistingFile)
      ->group("Testing");
  const char* rt = "Routing";
  cmd->add_option("--policy", f->policy, "round_robin, least_load or cache_aware")
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--cache-threshold", f->routing.cache_threshold,
                  "cache_aware: share of the prompt a group must hold to win it (SGLang's 0.3)")
      ->check(RealRange(0, 1))
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--balance-abs-threshold", f->routing.balance_abs_threshold,
                  "imbalanced when max - min in-flight requests exceeds this (SGLang's 64) ...")
      ->check(AtLeast(0))
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--balance-rel-threshold", f->routing.balance_rel_threshold,
                  "... and max exceeds this times min (SGLang's 1.5): then least-loaded wins")
      ->check(NonNegativeReal())
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--max-tree-tokens", f->routing.max_tree_tokens,
                  "bound on the router's prefix tree (tokens over all groups; LRU eviction)")
      ->check(IntRange(1, int64_t{1} << 34))
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--health-interval-ms", f->health_interval_ms, "health checks of every group")
      ->check(IntRange(10, 3600000))
      ->capture_default_str()
      ->group(rt);
  cmd->add_option("--health-timeout-ms", f->health_timeout_ms,
                  "a group not answering within this is down")
      ->check(IntRange(10, 3600000))
      ->capture_default_str()
      ->group(rt);
  cmd->callback([f, &ctx] {
    Status st = RunServe(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
