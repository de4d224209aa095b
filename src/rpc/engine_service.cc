#include "rpc/engine_service.h"

#include <grpcpp/grpcpp.h>

#include <mutex>

#include "rpc/engine_service.grpc.pb.h"
#include "rpc/wire.h"

namespace epserve::rpc {

class EngineService::Impl final : public rpc::Engine::Service {
 public:
  explicit Impl(EngineWorker& worker) : worker_(worker) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateReply>* writer) override {
    auto stream = std::make_shared<RequestStream>();
    StatusOr<RequestId> id = worker_.Submit(FromProto(*req), stream);
    if (!id.ok()) return ToGrpc(id.status());
    GenerateReply accepted;
    accepted.set_request_id(*id);
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

  grpc::Status Cancel(grpc::ServerContext*, const CancelRequest* req, CancelReply*) override {
    FinishReason as = FinishReason::kCancelled;
    if (!req->count_as().empty() && !ParseFinishReason(req->count_as(), &as))
      return {grpc::StatusCode::INVALID_ARGUMENT, "unknown count_as \"" + req->count_as() + "\""};
    worker_.Cancel(req->request_id(), as);
    return grpc::Status::OK;
  }

  grpc::Status Health(grpc::ServerContext*, const HealthRequest*, HealthReply* reply) override {
    reply->set_serving(worker_.accepting());
    return grpc::Status::OK;
  }

  grpc::Status Load(grpc::ServerContext*, const LoadRequest*, LoadReply* reply) override {
    ToProto(worker_.Metrics(), reply);
    reply->set_serving(worker_.accepting());
    return grpc::Status::OK;
  }

 private:
  EngineWorker& worker_;
};

StatusOr<std::unique_ptr<EngineService>> EngineService::Start(EngineWorker& worker,
                                                              const EngineServiceOptions& o) {
  std::unique_ptr<EngineService> s(new EngineService());
  s->impl_ = std::make_unique<Impl>(worker);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &s->port_);
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
