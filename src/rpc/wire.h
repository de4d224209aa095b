// Conversions between the engine's types and engine_service.proto's messages (both sides of
// the engine service).
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "base/status.h"
#include "rpc/engine_service.pb.h"
#include "runtime/engine.h"
#include "runtime/engine_worker.h"

namespace epserve::rpc {

EngineRequest FromProto(const GenerateRequest& m);
void ToProto(const EngineRequest& r, GenerateRequest* m);
TokenEvent FromProto(const Event& m);
void ToProto(const TokenEvent& ev, Event* m);
WorkerMetrics FromProto(const LoadReply& m);
void ToProto(const WorkerMetrics& w, LoadReply* m);
// "stop", "length", "cancelled", "error" (FinishReasonName's names).
bool ParseFinishReason(const std::string& name, FinishReason* reason);

grpc::Status ToGrpc(const Status& st);
// `who` names the peer in the message.
Status FromGrpc(const grpc::Status& st, const std::string& who);

}  // namespace epserve::rpc
