// GrpcEngineGroup: an EngineGroup (runtime/engine_group.h) whose engine is the gRPC engine
// service of a DP group's leader (rpc/engine_service.h), possibly on another machine. Each
// request is one server-streaming Generate call driven by gRPC's callback API (no thread per
// request); its events go to the request's RequestStream as they arrive.
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/engine_group.h"

namespace grpc {
class Channel;
class ChannelCredentials;
class ClientContext;
}  // namespace grpc

namespace epserve::rpc {

struct GrpcEngineGroupOptions {
  // The service's shared secret (EngineServiceOptions::token), sent with every call; empty for a
  // service without one.
  std::string token;
  // How the channel is secured (rpc/tls.h, MakeChannelCredentials); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // With TLS credentials: the name the service's certificate must carry instead of the host of
  // the address (gRPC's SSL target name override); empty: the host.
  std::string tls_server_name;
};

class GrpcEngineGroup : public EngineGroup {
 public:
  // `address`: "host:port" of the engine service. Connects lazily (the first call); a TLS
  // handshake that fails (a certificate the CA did not sign, another name) fails that call and
  // every health check (Load) as unavailable.
  GrpcEngineGroup(std::string name, std::string address, GrpcEngineGroupOptions options);
  // Plaintext, with `token` as above.
  GrpcEngineGroup(std::string name, std::string address, std::string token = "");
  ~GrpcEngineGroup() override;  // Abort()s open calls and waits (bounded) for them to end

  std::string name() const override { return name_; }
  std::string address() const;
  // The service moved (serve --np restarted its world): calls from now on go to `address`.
  // Calls open on the old one are not touched (their group is down; the router aborts them).
  void SetAddress(const std::string& address);
  StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestStream> stream,
                             std::chrono::milliseconds timeout) override;
  void Cancel(RequestId id, FinishReason count_as) override;
  StatusOr<WorkerMetrics> Load(std::chrono::milliseconds timeout) override;
  // Ends every open call: each request's stream gets a retryable kError event. For a group
  // found down.
  void Abort(const std::string& why) override;

 private:
  class Call;
  class Stubs;
  void Register(RequestId id, std::shared_ptr<Call> call);
  void Unregister(RequestId id);
  void CallEnded();  // a call (stream or Cancel) and everything it held is gone
  void Authorize(grpc::ClientContext* context) const;  // adds the token, if any
  Stubs* stubs();

  const std::string name_;
  const GrpcEngineGroupOptions options_;
  mutable std::mutex mu_;
  std::string address_;                          // guarded by mu_
  std::unique_ptr<Stubs> stubs_;                 // guarded by mu_
  std::vector<std::unique_ptr<Stubs>> retired_;  // earlier addresses' (calls may use them)
  std::atomic<bool> answered_{false};            // a Load has succeeded (TLS hints only before)
  std::unordered_map<RequestId, std::shared_ptr<Call>> calls_;  // accepted, not yet done
  int open_calls_ = 0;                                          // started, not yet done
  std::condition_variable calls_done_;
};

}  // namespace epserve::rpc
