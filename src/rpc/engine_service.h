// The gRPC engine service (engine_service.proto) over one DP group's EngineWorker: what the
// leader rank of each group in an `epserve engine` world serves to the request scheduler.
// gRPC's threads hand requests to the worker's single stepping thread (which keeps the MPI
// world in lock-step) and stream each request's events back; a caller that goes away (or
// cancels) cancels its request in the engine.
// Thread safety: Shutdown() may be called from any thread; the worker must outlive the service.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/engine_worker.h"

namespace grpc {
class Server;
}

namespace epserve::rpc {

struct EngineServiceOptions {
  // Where to listen: "host:port" (port 0: any free one). Loopback by default: the service has
  // no authentication, so it must only be reachable by the scheduler.
  std::string listen = "127.0.0.1:0";
  int max_threads = 1024;  // gRPC threads (each open Generate stream holds one)
};

class EngineService {
 public:
  static StatusOr<std::unique_ptr<EngineService>> Start(EngineWorker& worker,
                                                        const EngineServiceOptions& options);
  ~EngineService();  // Shutdown()
  int port() const { return port_; }
  // Stops taking calls; open streams end within `grace`. Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::seconds(2));

 private:
  class Impl;
  EngineService() = default;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace epserve::rpc
