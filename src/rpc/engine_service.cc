#include "rpc/engine_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <unordered_map>

#include "rpc/engine_service.grpc.pb.h"
#include "rpc/wire.h"

namespace epserve::rpc {

namespace {

// Compares in time that depends only on the lengths.
bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

bool IsLoopbackHost(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(
        1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

StatusOr<std::string> RandomToken() {
  std::random_device rd;  // the system's entropy source (/dev/urandom on Linux)
  static const char* kHex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 32; ++i) t += kHex[rd() % 16];
  return t;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot read the engine token file");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  const size_t b = t.find_first_not_of(" \t\r\n"), e = t.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return Status::InvalidArgument(path + ": the engine token is empty");
  return t.substr(b, e - b + 1);
}

class EngineService::Impl final : public rpc::Engine::Service {
 public:
  Impl(EngineWorker& worker, std::string token) : worker_(worker), token_(std::move(token)) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateReply>* writer) override {
    if (grpc::Status st = Authorize(*ctx); !st.ok()) return st;
    auto stream = std::make_shared<RequestStream>();
    StatusOr<RequestId> id = worker_.Submit(FromProto(*req), stream);
    if (!id.ok()) return ToGrpc(id.status());
    const uint64_t handle = AddHandle(*id);
    struct Forget {
      Impl* impl;
      uint64_t handle;
      ~Forget() { impl->DropHandle(handle); }
    } forget{this, handle};
    GenerateReply accepted;
    accepted.set_request_id(handle);
    if (!writer->Write(accepted)) {
      worker_.Cancel(*id);
      return grpc::Status::CANCELLED;
    }
    int64_t completion = 0, cached = 0;
    for (;;) {
      std::vector<TokenEvent> events;
      if (!stream->Pop(&events, std::chrono::milliseconds(100))) {
        if (ctx->IsCancelled()) {
          worker_.Cancel(*id);  // the scheduler cancelled, or went away
          return grpc::Status::CANCELLED;
        }
        continue;
      }
      GenerateReply reply;
      bool done = false;
      for (const TokenEvent& ev : events) {
        ToProto(ev, reply.add_events());
        if (ev.token >= 0 && completion++ == 0) cached = ev.cached_prompt_tokens;
        done = done || ev.finish != FinishReason::kNone;
      }
      if (done) {
        reply.mutable_usage()->set_prompt_tokens(req->prompt_size());
        reply.mutable_usage()->set_cached_tokens(cached);
        reply.mutable_usage()->set_completion_tokens(completion);
      }
      if (!writer->Write(reply)) {
        if (!done) worker_.Cancel(*id);
        return grpc::Status::CANCELLED;
      }
      if (done) return grpc::Status::OK;
    }
  }

  grpc::Status Cancel(grpc::ServerContext* ctx, const CancelRequest* req, CancelReply*) override {
    if (grpc::Status st = Authorize(*ctx); !st.ok()) return st;
    FinishReason as = FinishReason::kCancelled;
    if (!req->count_as().empty() && !ParseFinishReason(req->count_as(), &as))
      return {grpc::StatusCode::INVALID_ARGUMENT, "unknown count_as \"" + req->count_as() + "\""};
    // Only ids this service handed out, and only while their request runs.
    RequestId id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = handles_.find(req->request_id());
      if (it == handles_.end()) return grpc::Status::OK;  // ended already, or never ours
      id = it->second;
    }
    worker_.Cancel(id, as);
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext* ctx, const HealthRequest*, HealthReply* reply) override {
    if (grpc::Status st = Authorize(*ctx); !st.ok()) return st;
    reply->set_serving(worker_.accepting());
    return grpc::Status::OK;
  }

  grpc::Status Load(grpc::ServerContext* ctx, const LoadRequest*, LoadReply* reply) override {
    if (grpc::Status st = Authorize(*ctx); !st.ok()) return st;
    ToProto(worker_.Metrics(), reply);
    reply->set_serving(worker_.accepting());
    return grpc::Status::OK;
  }

 private:
  grpc::Status Authorize(const grpc::ServerContext& ctx) const {
    if (token_.empty()) return grpc::Status::OK;
    const auto& md = ctx.client_metadata();
    const auto it = md.find("authorization");
    if (it != md.end() &&
        SameSecret(std::string(it->second.data(), it->second.size()), "Bearer " + token_))
      return grpc::Status::OK;
    return {grpc::StatusCode::UNAUTHENTICATED, "missing or wrong engine token"};
  }
  uint64_t AddHandle(RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t h = 0;
    // From the system's entropy source, not a seeded generator whose later outputs a caller
    // could compute from the ids it was given.
    while (h == 0 || handles_.count(h) != 0) h = (uint64_t{rd_()} << 32) | rd_();
    handles_[h] = id;
    return h;
  }
  void DropHandle(uint64_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    handles_.erase(h);
  }

  EngineWorker& worker_;
  const std::string token_;
  std::mutex mu_;
  std::unordered_map<uint64_t, RequestId> handles_;  // handed-out id -> engine id, while running
  std::random_device rd_;
};

StatusOr<std::unique_ptr<EngineService>> EngineService::Start(EngineWorker& worker,
                                                              const EngineServiceOptions& o) {
  if (o.token.empty() && !IsLoopbackHost(o.listen))
    return Status::InvalidArgument("the engine service will not listen on " + o.listen +
                                   " without a token: anyone reaching it could submit and cancel "
                                   "requests (give --engine-token-file, or bind 127.0.0.1)");
  std::unique_ptr<EngineService> s(new EngineService());
  s->impl_ = std::make_unique<Impl>(worker, o.token);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      o.listen, o.credentials != nullptr ? o.credentials : grpc::InsecureServerCredentials(),
      &s->port_);
  builder.RegisterService(s->impl_.get());
  grpc::ResourceQuota quota("epserve-engine");
  quota.SetMaxThreads(o.max_threads);
  builder.SetResourceQuota(quota);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0)
    return Status::Unavailable("the engine service cannot listen on " + o.listen);
  return s;
}

EngineService::~EngineService() { Shutdown(); }

void EngineService::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  server_.reset();
}

}  // namespace epserve::rpc
