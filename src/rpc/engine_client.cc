#include "rpc/engine_client.h"

#include <grpcpp/grpcpp.h>

#include <future>

#include "rpc/engine_service.grpc.pb.h"
#include "rpc/wire.h"

namespace epserve::rpc {

class GrpcEngineGroup::Stubs {
 public:
  Stubs(const std::string& address, const GrpcEngineGroupOptions& options) {
    grpc::ChannelArguments args;
    // A restarted engine is found again within a second or so, not after gRPC's default
    // backoff of up to two minutes.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(64 << 20);
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
    channel = grpc::CreateCustomChannel(
        address,
        options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
        args);
    stub = rpc::Engine::NewStub(channel);
  }
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<rpc::Engine::Stub> stub;
};

// One Generate call. It keeps itself alive (self_) until gRPC reports it done.
class GrpcEngineGroup::Call : public grpc::ClientReadReactor<GenerateReply> {
 public:
  Call(GrpcEngineGroup* owner, std::shared_ptr<RequestStream> stream)
      : owner_(owner), stream_(std::move(stream)) {}

  std::future<StatusOr<RequestId>> Start(std::shared_ptr<Call> self, const EngineRequest& r) {
    self_ = std::move(self);
    ToProto(r, &request_);
    auto accepted = accepted_.get_future();
    owner_->Authorize(&context_);
    owner_->stubs()->stub->async()->Generate(&context_, &request_, this);
    StartRead(&reply_);
    StartCall();
    return accepted;
  }
  void TryCancel() { context_.TryCancel(); }
  void Abort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(why_mu_);
      why_ = why;
    }
    context_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    if (!accepted_set_) {
      id_ = reply_.request_id();
      owner_->Register(id_, self_);
      accepted_set_ = true;
      accepted_.set_value(id_);
    }
    for (const Event& e : reply_.events()) {
      TokenEvent ev = FromProto(e);
      ev.request = id_;
      saw_finish_ = saw_finish_ || ev.finish != FinishReason::kNone;
      stream_->Push(std::move(ev));
    }
    StartRead(&reply_);
  }

  void OnDone(const grpc::Status& st) override {
    if (!accepted_set_) {
      Status err = FromGrpc(st, owner_->name_);
      if (err.ok()) err = Status::Unavailable(owner_->name_ + ": the call ended unanswered");
      accepted_.set_value(err);
    } else {
      owner_->Unregister(id_);
      if (!saw_finish_) {
        std::string why;
        {
          std::lock_guard<std::mutex> lock(why_mu_);
          why = why_;
        }
        if (why.empty()) why = st.ok() ? "the stream ended early" : st.error_message();
        stream_->Push({.request = id_,
                       .finish = FinishReason::kError,
                       .error = owner_->name_ + " failed: " + why,
                       .retryable = true});
      }
    }
    // Let go of this call (its ClientContext, which holds gRPC's call and a reference to the
    // channel's completion queue) before the owner may see it done: ~GrpcEngineGroup waits for
    // that and then destroys the channel, and a context still being destroyed on this gRPC
    // thread then raced the queue's destruction (an ASan double free inside libgrpc).
    GrpcEngineGroup* owner = owner_;
    std::shared_ptr<Call> keep = std::move(self_);
    keep.reset();  // may destroy `this`: nothing of it is used below
    owner->CallEnded();
  }

 private:
  GrpcEngineGroup* owner_;
  std::shared_ptr<RequestStream> stream_;
  std::shared_ptr<Call> self_;
  grpc::ClientContext context_;
  GenerateRequest request_;
  GenerateReply reply_;
  std::promise<StatusOr<RequestId>> accepted_;
  bool accepted_set_ = false, saw_finish_ = false;
  RequestId id_ = 0;
  std::mutex why_mu_;
  std::string why_;  // set by Abort
};

GrpcEngineGroup::GrpcEngineGroup(std::string name, std::string address,
                                 GrpcEngineGroupOptions options)
    : name_(std::move(name)),
      options_(std::move(options)),
      address_(std::move(address)),
      stubs_(std::make_unique<Stubs>(address_, options_)) {}

GrpcEngineGroup::GrpcEngineGroup(std::string name, std::string address, std::string token)
    : GrpcEngineGroup(std::move(name), std::move(address),
                      GrpcEngineGroupOptions{.token = std::move(token)}) {}

std::string GrpcEngineGroup::address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return address_;
}

GrpcEngineGroup::Stubs* GrpcEngineGroup::stubs() {
  std::lock_guard<std::mutex> lock(mu_);
  return stubs_.get();
}

void GrpcEngineGroup::SetAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (address == address_) return;
  // The old channel stays alive as long as this object: calls started on it may still be
  // ending (their contexts refer to it).
  retired_.push_back(std::move(stubs_));
  stubs_ = std::make_unique<Stubs>(address, options_);
  address_ = address;
}

GrpcEngineGroup::~GrpcEngineGroup() {
  Abort("the scheduler is shutting down");
  std::unique_lock<std::mutex> lock(mu_);
  calls_done_.wait_for(lock, std::chrono::seconds(5), [this] { return open_calls_ == 0; });
}

void GrpcEngineGroup::CallEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  --open_calls_;
  calls_done_.notify_all();
}

void GrpcEngineGroup::Register(RequestId id, std::shared_ptr<Call> call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_[id] = std::move(call);
}

void GrpcEngineGroup::Unregister(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(id);
}

StatusOr<RequestId> GrpcEngineGroup::Submit(EngineRequest request,
                                            std::shared_ptr<RequestStream> stream,
                                            std::chrono::milliseconds timeout) {
  auto call = std::make_shared<Call>(this, stream);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_calls_;
  }
  std::future<StatusOr<RequestId>> accepted = call->Start(call, request);
  if (accepted.wait_for(timeout) != std::future_status::ready) {
    stream->Abandon();
    call->TryCancel();  // the engine cancels it if it was queued after all
    return Status::Unavailable(name_ + " did not accept the request in " +
                               std::to_string(timeout.count()) + " ms");
  }
  return accepted.get();
}

void GrpcEngineGroup::Cancel(RequestId id, FinishReason count_as) {
  std::shared_ptr<Call> call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;  // done already
    call = it->second;
  }
  if (count_as == FinishReason::kCancelled) {
    call->TryCancel();  // the engine cancels a request whose caller cancelled
    return;
  }
  // Counted otherwise (a stop string ended it): say so; the stream then ends by itself. An open
  // call like the streams, so that the destructor waits for it (see Call::OnDone).
  struct Pending {
    grpc::ClientContext context;
    CancelRequest request;
    CancelReply reply;
  };
  auto* p = new Pending;
  p->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Authorize(&p->context);
  p->request.set_request_id(id);
  p->request.set_count_as(FinishReasonName(count_as));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_calls_;
  }
  stubs()->stub->async()->Cancel(&p->context, &p->request, &p->reply, [this, p](grpc::Status) {
    delete p;
    CallEnded();
  });
}

StatusOr<WorkerMetrics> GrpcEngineGroup::Load(std::chrono::milliseconds timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  Authorize(&context);
  LoadRequest request;
  LoadReply reply;
  grpc::Status st = stubs()->stub->Load(&context, request, &reply);
  if (!st.ok()) {
    Status err = FromGrpc(st, name_ + " (" + address() + ")");
    // gRPC 1.51 reports a failed TLS handshake only as a failure to connect ("Socket closed" at
    // first, then "tcp handshaker shutdown"; the reason goes to gRPC's log): say what to check.
    // Load is serve's startup and health check. Only before the first answer: a service that
    // answered once and then closed its socket died, which is no handshake problem.
    const std::string& why = st.error_message();
    if (err.code() == StatusCode::kUnavailable && !answered_ &&
        (why.find("andshake") != std::string::npos ||
         why.find("Socket closed") != std::string::npos))
      err = Status::Unavailable(
          err.message() +
          (options_.credentials == nullptr
               ? " (the connection failed in its handshake: does the engine service use TLS? "
                 "then give --engine-tls-ca)"
               : " (the TLS handshake failed: is the engine service's certificate signed by "
                 "--engine-tls-ca and issued to the address's host or --engine-tls-server-name; "
                 "does it want a client certificate (--engine-tls-cert); does it use TLS at "
                 "all?)"));
    return err;
  }
  answered_ = true;
  if (!reply.serving()) return Status::Unavailable(name_ + " is shutting down");
  return FromProto(reply);
}

void GrpcEngineGroup::Authorize(grpc::ClientContext* context) const {
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
}

void GrpcEngineGroup::Abort(const std::string& why) {
  std::vector<std::shared_ptr<Call>> calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, c] : calls_) calls.push_back(c);
  }
  for (auto& c : calls) c->Abort(why);
}

}  // namespace epserve::rpc
