// `epserve engine`: the engine world of a multi-group deployment. Run alone it is one DP group;
// under mpirun it is an expert-parallel world (EP = DP x TP, runtime/ep_replica.h) stepping in
// lock-step. The leader rank of every DP group serves the gRPC engine service
// (rpc/engine_service.h) that `epserve serve --engines` (or `serve --np N`, which starts this
// command itself) routes requests to. SIGINT/SIGTERM on any rank stops every rank.
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/guarded_thread.h"
#include "comm/communicator.h"
#include "rpc/engine_service.h"
#include "rpc/tls.h"
#include "runtime/engine_worker.h"
#include "runtime/ep_replica.h"
#include "runtime/loaded_model.h"
#include "runtime/online_placer.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/flag_checks.h"
#include "tools/replace_flags.h"
#include "tools/stop_signal.h"

namespace epserve::tools {

namespace {

struct EngineCmdFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  std::string token_file;   // --engine-token-file; else $EPSERVE_ENGINE_TOKEN (serve --np sets it)
  rpc::ServerTlsFiles tls;  // --tls-cert, --tls-key, --tls-client-ca
  EngineFlags engine;
  int tp = 1;
  int ranks_per_node = 0;
  std::string a2a = "sparse";
  std::string placement;
  ReplaceFlags replace;
  double timeout = 120;
};

// The group's address for the scheduler: PREFIX.G holds "host:port", written whole (rename).
Status WritePortFile(const std::string& prefix, int group, const std::string& address) {
  const std::string path = prefix + "." + std::to_string(group);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << address << "\n";
    if (!out) return Status::IoError(tmp + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  return Status::Ok();
}

// "auto": this machine's own address, the first IPv4 address its host name resolves to (what a
// scheduler on another machine of the hostfile reaches it by).
StatusOr<std::string> ResolveHost(const std::string& host) {
  if (host != "auto") return host;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return Status::IoError("gethostname failed");
  addrinfo hints = {};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr)
    return Status::InvalidArgument(
        std::string("--host auto: cannot resolve this machine's name \"") + name +
        "\"; give its address");
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof(ip));
  freeaddrinfo(res);
  return std::string(ip);
}

// The engine service's token and credentials, read at the start (before the model loads), so
// that a bad file fails at once on every rank.
struct ServiceSecurity {
  std::string token;
  std::shared_ptr<grpc::ServerCredentials> credentials;
};
StatusOr<ServiceSecurity> ReadServiceSecurity(const EngineCmdFlags& f) {
  ServiceSecurity s;
  if (!f.token_file.empty()) {
    ASSIGN_OR_RETURN(s.token, rpc::ReadTokenFile(f.token_file));
  } else if (const char* env = std::getenv("EPSERVE_ENGINE_TOKEN"); env != nullptr) {
    s.token = env;
  }
  ASSIGN_OR_RETURN(s.credentials, rpc::MakeServerCredentials(f.tls));
  return s;
}

// This rank's place in the world.
struct GroupPlace {
  int group = 0, dp = 1;
  std::string ranks;         // "ranks a-b", or "one process"
  bool leader = true;        // serves the group's engine service
  bool distributed = false;  // under mpirun: the worker steps on this thread
};

// Serves `worker` on the leader; steps (on this thread when distributed) until a stop signal.
Status Serve(const EngineCmdFlags& f, const ServiceSecurity& security, EngineWorker& worker,
             const GroupPlace& place) {
  std::unique_ptr<rpc::EngineService> service;
  if (place.leader) {
    const int port = f.port > 0 ? f.port + place.group : 0;
    ASSIGN_OR_RETURN(std::string host, ResolveHost(f.host));
    ASSIGN_OR_RETURN(service,
                     rpc::EngineService::Start(worker, {.listen = host + ":" + std::to_string(port),
                                                        .token = security.token,
                                                        .credentials = security.credentials}));
    const std::string address = host + ":" + std::to_string(service->port());
    if (!f.port_file.empty()) RETURN_IF_ERROR(WritePortFile(f.port_file, place.group, address));
    // serve --np reads the address from this line (tools/engine_world.cc): it ends with it.
    std::printf("epserve engine: group %d of %d (%s) listening on %s\n", place.group, place.dp,
                place.ranks.c_str(), address.c_str());
    std::fflush(stdout);
  }
  std::atomic<bool> done{false};
  std::thread watch = GuardedThread("the signal watcher", [&] {
    while (!done && StopSignal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!done) worker.RequestStop();
  });
  Status st = place.distributed ? worker.Run() : Status::Ok();
  if (!place.distributed) {
    while (StopSignal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    worker.Shutdown();
  }
  done = true;
  watch.join();
  if (service) service->Shutdown(std::chrono::milliseconds(500));
  return st;
}

Status RunEngine(const EngineCmdFlags& f) {
  InstallStopSignalHandler(/*restart=*/false);
  if (f.port < 0 || f.port > 65535) return Status::InvalidArgument("--port must be in [0, 65535]");
  if (!(f.timeout > 0) || !std::isfinite(f.timeout))
    return Status::InvalidArgument("--timeout must be a positive number of seconds");
  if (f.a2a != "sparse" && f.a2a != "padded")
    return Status::InvalidArgument("--a2a must be sparse or padded, got " + f.a2a);
  ASSIGN_OR_RETURN(ServiceSecurity security, ReadServiceSecurity(f));
  if (!comm::LaunchedByMpi()) {
    if (f.tp != 1 || !f.placement.empty() || f.ranks_per_node != 0 || f.replace.every >= 0)
      return Status::InvalidArgument(
          "--tp, --placement, --ranks-per-node and --replace-every need several ranks: run under "
          "mpirun -np N");
    std::string dir = f.model;
    if (dir.empty()) {
      ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
    }
    ASSIGN_OR_RETURN(auto local, StartLocalEngine(dir, f.engine));
    EngineWorker worker(*local->engine);
    return Serve(f, security, worker, {.ranks = "one process"});
  }
  if (f.engine.device.cuda())
    return Status::InvalidArgument("--device " + f.engine.device.device +
                                   ": expert parallelism across GPU ranks is not built yet; run "
                                   "one process per GPU without mpirun");
  if (f.model.empty())
    return Status::InvalidArgument("--model is needed under mpirun (serve --np N passes it)");
  // serve's POST /admin/replace-experts reaches every rank as SIGUSR2 (through mpirun): one that
  // comes while this rank loads is kept for its first step, not fatal.
  if (f.replace.every >= 0) OnlinePlacer::InstallSignalHandler();
  ASSIGN_OR_RETURN(auto mpi,
                   comm::MpiWorld::Init(nullptr, nullptr, {.timeout_seconds = f.timeout}));
  std::unique_ptr<EpReplica> rep;
  EpError err =
      BuildEpReplica(*mpi,
                     {.model_dir = f.model,
                      .tp = f.tp,
                      .ranks_per_node = f.ranks_per_node,
                      .a2a = f.a2a == "padded" ? comm::A2aMode::kPadded : comm::A2aMode::kSparse,
                      .placement_path = f.placement,
                      .threads = f.engine.threads,
                      .requant = RequantFromFlag(f.engine.requant),
                      .mtp = f.engine.mtp == "on"},
                     &rep);
  const int rank = mpi->world().rank();
  auto fail = [&](const Status& st, bool global) -> Status {
    if (global) {
      if (rank == 0) std::fprintf(stderr, "epserve: error: %s\n", st.message().c_str());
      return Status::Unavailable("");  // exit code 1, printed once
    }
    std::fprintf(stderr, "epserve: error: rank %d: %s\n", rank, st.message().c_str());
    std::fflush(stderr);
    mpi->Abort(1);
  };
  if (!err.status.ok()) return fail(err.status, err.is_global);
  const bool v4 = rep->family == ModelFamily::kDeepSeekV4;
  if (v4 && f.replace.every >= 0)
    return fail(Status::InvalidArgument(f.model + " is a DeepSeek-V4 checkpoint: --replace-every "
                                                  "(online re-placement) is not built for V4 yet"),
                true);
  if (rank == 0)
    std::printf("%s\n", v4 ? ("model: " + rep->forward().Describe()).c_str()
                           : DescribeLoad(*rep->loaded, f.model).c_str());
  std::string note;
  StatusOr<EngineOptions> eo =
      v4 ? f.engine.OptionsFor(f.model, rep->forward(), rep->v4_weights->config().eos_token_ids,
                               rep->num_ranks, rep->tp, rep->ranks_per_node, &note)
         : f.engine.Options(f.model, rep->config, rep->num_ranks, rep->tp, rep->ranks_per_node,
                            &note);
  if (!eo.ok()) return fail(eo.status(), true);
  if (rank == 0 && !note.empty()) std::printf("%s\n", note.c_str());
  // TP followers replay their leader's block ids: every rank of a group takes the smallest pool
  // any of them could hold (a share of available memory differs a little between ranks).
  int64_t neg = -eo->num_blocks;
  if (Status st = rep->group_comm->AllReduceMax(&neg, 1); !st.ok()) return fail(st, false);
  eo->num_blocks = -neg;
  Engine engine(rep->forward(), *eo);
  std::unique_ptr<OnlinePlacer> placer;
  if (std::optional<OnlinePlacerOptions> po = f.replace.Options()) {
    po->load.requant = RequantFromFlag(f.engine.requant);
    auto made = OnlinePlacer::Create(*rep, *po);
    if (!made.ok()) return fail(made.status(), true);
    placer = std::move(*made);
    rep->model->SetRouteObserver([p = placer.get()](const RouteEvent& ev) { p->Observe(ev); });
  }
  EngineWorker worker(engine, {.lockstep = {.world = &mpi->world(), .group = rep->group_comm.get()},
                               .participant = placer.get(),
                               .add_metrics = [p = placer.get()](WorkerMetrics* m) {
                                 if (p != nullptr) p->AddMetrics(m);
                               }});
  const std::string ranks = "ranks " + std::to_string(rep->group * rep->tp) + "-" +
                            std::to_string(rep->group * rep->tp + rep->tp - 1);
  if (rank == 0)
    std::printf(
        "epserve engine: %d ranks (machines: %d, DP %d x TP %d), KV cache per group: %lld "
        "blocks x %lld positions (%s)\n",
        rep->num_ranks, rep->num_nodes, rep->dp, rep->tp, static_cast<long long>(eo->num_blocks),
        static_cast<long long>(eo->block_size), KvDTypeName(eo->kv_dtype));
  Status st = Serve(f, security, worker,
                    {.group = rep->group,
                     .dp = rep->dp,
                     .ranks = ranks,
                     .leader = rep->leader(),
                     .distributed = true});
  if (!st.ok()) return fail(st, false);
  return Status::Ok();
}

}  // namespace

void RegisterEngineCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<EngineCmdFlags>();
  CLI::App* cmd = app.add_subcommand(
      "engine",
      "Run the engine world of a multi-group deployment: alone, one DP group; under mpirun -np N,\n"
      "N expert-parallel ranks in DP groups of --tp ranks. The first rank of each group serves\n"
      "the gRPC engine service (a shared token; TLS with --tls-cert/--tls-key) that\n"
      "`epserve serve --engines HOST:PORT,...` routes to. `serve --np N` starts this itself.");
  cmd->add_option("--model", f->model, "model folder (default: the embedded tiny model)");
  cmd->add_option("--engine-token-file", f->token_file,
                  "a file holding the shared secret every call to the engine service must carry "
                  "(serve --engine-token-file gives the same file); without it, "
                  "$EPSERVE_ENGINE_TOKEN (serve --np sets it for its world), else no check, "
                  "which is allowed only on a loopback --host");
  const char* tls = "TLS";
  cmd->add_option("--tls-cert", f->tls.cert,
                  "serve the engine service over TLS with this PEM certificate (chain, leaf "
                  "first); serve --engine-tls-ca verifies it")
      ->group(tls);
  cmd->add_option("--tls-key", f->tls.key, "the certificate's PEM private key (not encrypted)")
      ->group(tls);
  cmd->add_option("--tls-client-ca", f->tls.client_ca,
                  "mutual TLS: every caller must present a certificate this PEM CA signed "
                  "(serve --engine-tls-cert/--engine-tls-key)")
      ->group(tls);
  cmd->add_option("--host", f->host,
                  "address the engine service binds; auto: this machine's address (by its host "
                  "name), for a scheduler on another machine")
      ->capture_default_str();
  cmd->add_option("--port", f->port,
                  "port of group 0's service; group G uses PORT+G (0: any free port)")
      ->check(IntRange(0, 65535))
      ->capture_default_str();
  cmd->add_option("--port-file", f->port_file,
                  "each group leader writes \"host:port\" to PREFIX.G once it listens");
  f->engine.AddTo(cmd);
  const char* ep = "Expert parallelism (under mpirun -np N)";
  cmd->add_option("--tp", f->tp, "ranks per DP group (tensor-parallel attention)")
      ->check(IntRange(1, 1 << 10))
      ->capture_default_str()
      ->group(ep);
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "ranks per machine (default: as MPI reports; set it to emulate machines)")
      ->check(IntRange(1, 1 << 16))
      ->group(ep);
  cmd->add_option("--a2a", f->a2a, "dispatch/combine: sparse or padded")
      ->capture_default_str()
      ->group(ep);
  cmd->add_option("--placement", f->placement, "expert placement file (default contiguous)")
      ->group(ep);
  f->replace.AddTo(cmd, ep);
  cmd->add_option("--timeout", f->timeout,
                  "seconds a rank waits in one collective before failing (a dead peer)")
      ->check(PositiveReal())
      ->capture_default_str()
      ->group(ep);
  cmd->callback([f, &ctx] {
    Status st = RunEngine(*f);
    if (!st.ok() && !st.message().empty()) ReportError(ctx, st.message());
    if (!st.ok()) ctx.exit_code = 1;
  });
}

}  // namespace epserve::tools
