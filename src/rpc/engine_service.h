// The gRPC engine service (engine_service.proto) over one DP group's EngineWorker: what the
// leader rank of each group in an `epserve engine` world serves to the request scheduler.
// gRPC's threads hand requests to the worker's single stepping thread (which keeps the MPI
// world in lock-step) and stream each request's events back; a caller that goes away (or
// cancels) cancels its request in the engine.
// Request ids handed to callers are random 64-bit values (not the engine's sequential ids), so a
// caller cannot cancel a request it did not submit by guessing.
// Thread safety: Shutdown() may be called from any thread; the worker must outlive the service.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/engine_worker.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace epserve::rpc {

struct EngineServiceOptions {
  // Where to listen: "host:port" (port 0: any free one). Loopback by default.
  std::string listen = "127.0.0.1:0";
  // A shared secret every call must carry ("authorization: Bearer <token>" metadata; calls
  // without it are UNAUTHENTICATED). Empty: no check, allowed only on a loopback address (Start
  // refuses anything else), since a request here bypasses the HTTP server's API key and limits.
  std::string token;
  // How the port is secured (rpc/tls.h, MakeServerCredentials); null: plaintext. TLS does not
  // replace the token: a caller needs both.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  int max_threads = 1024;  // gRPC threads (each open Generate stream holds one)
};

// Whether `host` (of "host:port", or a bare host) is a loopback address.
bool IsLoopbackHost(const std::string& host);
// 32 random hex digits from the system's entropy source, for an engine token.
StatusOr<std::string> RandomToken();
// The token in `path` (surrounding whitespace dropped); errors name the file. An empty file is
// an error: it would switch the check off.
StatusOr<std::string> ReadTokenFile(const std::string& path);

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
