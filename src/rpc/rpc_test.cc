// The engine service end to end on loopback: a GrpcEngineGroup against an EngineService over a
// real EngineWorker (tiny model), compared with the same worker used directly.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "model/test_util.h"
#include "rpc/engine_client.h"
#include "rpc/engine_service.grpc.pb.h"
#include "rpc/engine_service.h"
#include "rpc/tls.h"
#include "runtime/loaded_model.h"

namespace epserve::rpc {
namespace {

std::vector<TokenEvent> Drain(RequestStream& s, int limit_ms = 30000) {
  std::vector<TokenEvent> all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<TokenEvent> got;
    if (!s.Pop(&got, std::chrono::milliseconds(100))) continue;
    for (auto& e : got) all.push_back(std::move(e));
    if (!all.empty() && all.back().finish != FinishReason::kNone) return all;
  }
  ADD_FAILURE() << "no finish within " << limit_ms << " ms";
  return all;
}

// Throwaway certificates from the openssl command line, in `dir`: ca.pem (a CA), server.pem for
// 127.0.0.1 and client.pem, both signed by it (with server.key, client.key), and rogue.pem, a
// self-signed CA of the same name. False when openssl is missing or fails.
bool MakeCertificates(const std::string& dir) {
  if (std::system("openssl version >/dev/null 2>&1") != 0) return false;
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
  std::string sh = "set -e; mkdir -p " + dir + "; cd " + dir + "; exec 2>/dev/null;";
  for (const char* ca : {"ca", "rogue"})
    sh += "openssl req -x509" + ec + " -keyout " + ca + ".key -out " + ca +
          ".pem -subj /CN=epserve-test-ca;";
  for (const char* leaf : {"server", "client"})
    sh += std::string("openssl req") + ec + " -keyout " + leaf + ".key -out " + leaf +
          ".csr -subj /CN=" + leaf + "; printf 'subjectAltName=IP:127.0.0.1\n' >" + leaf +
          ".ext; openssl x509 -req -in " + leaf + ".csr -CA ca.pem -CAkey ca.key " +
          "-CAcreateserial -days 2 -extfile " + leaf + ".ext -out " + leaf + ".pem;";
  return std::system(("sh -c \"" + sh + "\"").c_str()) == 0;
}

class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = epserve::testing::MakeTiny("rpc_" + std::to_string(::getpid()));
    loaded_ = LoadModel(dir_, {}).value();
    pool_ = std::make_unique<ThreadPool>(1);
    model_ = std::make_unique<Model>(loaded_->config, *loaded_->weights, *pool_);
    engine_ = std::make_unique<epserve::Engine>(*model_,
                                                EngineOptions{.block_size = 16, .num_blocks = 32});
    // At least 2 ms a step: the 400-token requests below must still be running when a test
    // cancels them or shuts the service down, however fast this machine runs the tiny model.
    worker_ = std::make_unique<EngineWorker>(*engine_, EngineWorkerOptions{.before_step = [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }});
    service_ = EngineService::Start(*worker_, {.token = kToken}).value();
    client_ = std::make_unique<GrpcEngineGroup>("group 0", Address(), kToken);
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(service_->port()); }
  static constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
  void TearDown() override {
    client_.reset();
    service_.reset();
    worker_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<epserve::Engine> engine_;
  std::unique_ptr<EngineWorker> worker_;
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<GrpcEngineGroup> client_;
};

// An exception inside a step (here injected; in life a bug or memory running out) ends the
// request with the error, and the worker then refuses new requests with it instead of hanging
// them; the remote client sees the same error.
TEST_F(RpcTest, AnExceptionInAStepFailsItsRequestsAndStopsTheWorker) {
  epserve::Engine engine(*model_, EngineOptions{.block_size = 16, .num_blocks = 32});
  int steps = 0;
  EngineWorker worker(engine, {.before_step = [&] {
                        if (++steps == 3) throw std::runtime_error("injected fault");
                      }});
  auto stream = std::make_shared<RequestStream>();
  ASSERT_TRUE(
      worker.Submit({.prompt = {5, 6, 7}, .max_tokens = 10, .use_default_stop = false}, stream)
          .ok());
  std::vector<TokenEvent> events = Drain(*stream);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, FinishReason::kError);
  EXPECT_EQ(events.back().error, "internal error in the engine loop: injected fault");
  EXPECT_FALSE(worker.accepting());
  auto again = worker.Submit({.prompt = {5}, .max_tokens = 2}, std::make_shared<RequestStream>(),
                             std::chrono::seconds(5));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("injected fault"), std::string::npos);
}

TEST_F(RpcTest, RemoteTokensEqualLocalOnes) {
  EngineRequest r{
      .prompt = {5, 6, 7, 8, 9}, .max_tokens = 12, .use_default_stop = false, .logprobs = 2};
  auto local = std::make_shared<RequestStream>();
  ASSERT_TRUE(worker_->Submit(r, local).ok());
  auto remote = std::make_shared<RequestStream>();
  auto id = client_->Submit(r, remote, std::chrono::seconds(10));
  ASSERT_TRUE(id.ok()) << id.status().message();
  std::vector<TokenEvent> a = Drain(*local), b = Drain(*remote);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token) << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << i;
    EXPECT_EQ(a[i].top_logprobs, b[i].top_logprobs) << i;
    EXPECT_EQ(a[i].finish, b[i].finish) << i;
    EXPECT_EQ(b[i].request, *id);
  }
  EXPECT_EQ(b.back().finish, FinishReason::kLength);
  auto load = client_->Load(std::chrono::seconds(2));
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_EQ(load->generation_tokens, 24);
  EXPECT_EQ(load->finished.at("length"), 2);
  EXPECT_EQ(load->kv_blocks_total, 32);
}

TEST_F(RpcTest, BadRequestsComeBackAsInvalidArgument) {
  auto s = std::make_shared<RequestStream>();
  auto id = client_->Submit({.prompt = {1, 5000}}, s, std::chrono::seconds(10));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("outside the vocabulary"), std::string::npos);
}

TEST_F(RpcTest, CancelFreesTheRequestAndCountsItsReason) {
  auto s = std::make_shared<RequestStream>();
  auto id = client_->Submit({.prompt = {5, 6}, .max_tokens = 400, .use_default_stop = false}, s,
                            std::chrono::seconds(10));
  ASSERT_TRUE(id.ok());
  std::vector<TokenEvent> got;
  ASSERT_TRUE(s->Pop(&got, std::chrono::seconds(10)));  // it runs
  client_->Cancel(*id, FinishReason::kStop);
  std::vector<TokenEvent> rest = Drain(*s);
  EXPECT_EQ(rest.back().finish, FinishReason::kCancelled);
  for (int i = 0; i < 100; ++i) {
    auto load = client_->Load(std::chrono::seconds(2));
    ASSERT_TRUE(load.ok());
    if (load->num_running == 0 && load->finished.count("stop")) {
      EXPECT_EQ(load->kv_blocks_used, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "the cancelled request still runs, or is not counted as stop";
}

// The service checks its token on every call: without it, or with a wrong one, nothing is
// submitted or reported.
TEST_F(RpcTest, CallsWithoutTheTokenAreRefused) {
  for (const char* token : {"", "0123456789abcdef0123456789abcdeX"}) {
    GrpcEngineGroup stranger("group 0", Address(), token);
    auto s = std::make_shared<RequestStream>();
    auto id = stranger.Submit({.prompt = {5, 6}, .max_tokens = 4}, s, std::chrono::seconds(10));
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("token"), std::string::npos) << id.status().message();
    EXPECT_FALSE(stranger.Load(std::chrono::seconds(5)).ok());
  }
  EXPECT_EQ(worker_->Metrics().num_running + worker_->Metrics().num_waiting, 0);
}

// Request ids are random: cancelling every small id (what guessing sequential ids did: 36
// guessed Cancel calls ended another client's stream) ends nothing, even with the token.
TEST_F(RpcTest, GuessedCancelsEndNothing) {
  auto s = std::make_shared<RequestStream>();
  auto id = client_->Submit({.prompt = {5, 6}, .max_tokens = 40, .use_default_stop = false}, s,
                            std::chrono::seconds(10));
  ASSERT_TRUE(id.ok());
  auto channel = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  auto stub = rpc::Engine::NewStub(channel);
  for (uint64_t guess = 0; guess <= 1000; ++guess) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
    CancelRequest req;
    req.set_request_id(guess);
    CancelReply reply;
    ASSERT_TRUE(stub->Cancel(&ctx, req, &reply).ok());
  }
  std::vector<TokenEvent> all = Drain(*s);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().finish, FinishReason::kLength);
  // Without the token a Cancel is refused outright.
  grpc::ClientContext ctx;
  CancelRequest req;
  req.set_request_id(*id);
  CancelReply reply;
  EXPECT_EQ(stub->Cancel(&ctx, req, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// A TLS service (mutual: client certificates required) serves a caller that trusts its CA and
// presents a certificate that CA signed, with the token; a plaintext caller, one trusting
// another CA, and one without a client certificate never get an answer.
TEST_F(RpcTest, ATlsServiceServesOnlyCallersWithTheRightCertificates) {
  const std::string d = dir_ + "/tls";
  if (!MakeCertificates(d)) GTEST_SKIP() << "no working openssl command to make certificates";
  auto server_creds = MakeServerCredentials(
      {.cert = d + "/server.pem", .key = d + "/server.key", .client_ca = d + "/ca.pem"});
  ASSERT_TRUE(server_creds.ok()) << server_creds.status().message();
  auto tls = EngineService::Start(*worker_, {.token = kToken, .credentials = *server_creds});
  ASSERT_TRUE(tls.ok()) << tls.status().message();
  const std::string address = "127.0.0.1:" + std::to_string((*tls)->port());
  auto client_creds = MakeChannelCredentials(
      {.ca = d + "/ca.pem", .cert = d + "/client.pem", .key = d + "/client.key"});
  ASSERT_TRUE(client_creds.ok()) << client_creds.status().message();

  GrpcEngineGroup trusted("tls", address, {.token = kToken, .credentials = *client_creds});
  EngineRequest r{.prompt = {5, 6, 7}, .max_tokens = 6, .use_default_stop = false};
  auto plain = std::make_shared<RequestStream>(), secure = std::make_shared<RequestStream>();
  ASSERT_TRUE(client_->Submit(r, plain, std::chrono::seconds(10)).ok());
  auto id = trusted.Submit(r, secure, std::chrono::seconds(10));
  ASSERT_TRUE(id.ok()) << id.status().message();
  std::vector<TokenEvent> a = Drain(*plain), b = Drain(*secure);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].token, b[i].token) << i;
  EXPECT_TRUE(trusted.Load(std::chrono::seconds(5)).ok());

  auto no_cert = MakeChannelCredentials({.ca = d + "/ca.pem"});
  auto other_ca = MakeChannelCredentials(
      {.ca = d + "/rogue.pem", .cert = d + "/client.pem", .key = d + "/client.key"});
  ASSERT_TRUE(no_cert.ok() && other_ca.ok());
  GrpcEngineGroup plaintext("plaintext", address, kToken);
  GrpcEngineGroup without_cert("without a client certificate", address,
                               {.token = kToken, .credentials = *no_cert});
  GrpcEngineGroup distrusting("another CA", address, {.token = kToken, .credentials = *other_ca});
  for (GrpcEngineGroup* g : {&plaintext, &without_cert, &distrusting}) {
    auto load = g->Load(std::chrono::seconds(2));
    EXPECT_EQ(load.status().code(), StatusCode::kUnavailable) << g->name();
    EXPECT_NE(load.status().message().find("handshake"), std::string::npos)  // the hint
        << load.status().message();
  }
  // With a client certificate the token is still needed.
  GrpcEngineGroup tokenless("no token", address, {.credentials = *client_creds});
  auto load = tokenless.Load(std::chrono::seconds(5));
  EXPECT_NE(load.status().message().find("missing or wrong engine token"), std::string::npos)
      << load.status().message();
}

// Bad files are errors at once, naming the flag and the file.
TEST(RpcTlsFilesTest, BadFilesAreErrorsNamingTheFlagAndTheFile) {
  const std::string d = epserve::testing::TempDir("rpc_tls_" + std::to_string(::getpid()));
  if (!MakeCertificates(d)) GTEST_SKIP() << "no working openssl command to make certificates";
  auto error = [](const StatusOr<std::shared_ptr<grpc::ServerCredentials>>& s) {
    return s.ok() ? std::string("ok") : s.status().message();
  };
  EXPECT_TRUE(MakeServerCredentials({}).ok());
  EXPECT_EQ(*MakeServerCredentials({}), nullptr);  // plaintext
  EXPECT_EQ(error(MakeServerCredentials({.cert = d + "/server.pem", .key = d + "/none.key"})),
            "--tls-key " + d + "/none.key: no such file");
  EXPECT_EQ(
      error(MakeServerCredentials({.cert = d + "/server.key", .key = d + "/server.key"})),
      "--tls-cert " + d + "/server.key: no PEM certificate in it (-----BEGIN CERTIFICATE-----)");
  EXPECT_EQ(
      error(MakeServerCredentials({.cert = d + "/server.pem", .key = d + "/server.pem"})),
      "--tls-key " + d + "/server.pem: no PEM private key in it (-----BEGIN PRIVATE KEY-----)");
  EXPECT_EQ(error(MakeServerCredentials({.cert = d + "/server.pem", .key = d + "/client.key"})),
            "--tls-key " + d +
                "/client.key: not the private key of the certificate in --tls-cert " + d +
                "/server.pem");
  EXPECT_EQ(error(MakeServerCredentials({.cert = d + "/server.pem"})),
            "--tls-cert and --tls-key go together");
  EXPECT_EQ(error(MakeServerCredentials(
                {.cert = d + "/server.pem", .key = d + "/server.key", .client_ca = d})),
            "--tls-client-ca " + d + ": not a file");
  auto client = MakeChannelCredentials(
      {.ca = d + "/ca.pem", .cert = d + "/client.pem", .key = d + "/server.key"});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().message(), "--engine-tls-key " + d +
                                           "/server.key: not the private key of the certificate "
                                           "in --engine-tls-cert " +
                                           d + "/client.pem");
  client = MakeChannelCredentials({.cert = d + "/client.pem", .key = d + "/client.key"});
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("need --engine-tls-ca"), std::string::npos);
  std::filesystem::remove_all(d);
}

TEST_F(RpcTest, ANonLoopbackAddressNeedsAToken) {
  auto st = EngineService::Start(*worker_, {.listen = "0.0.0.0:0"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("without a token"), std::string::npos);
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1:80"));
  EXPECT_TRUE(IsLoopbackHost("localhost:1"));
  EXPECT_TRUE(IsLoopbackHost("[::1]:5"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.2:80"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0:0"));
}

TEST_F(RpcTest, ACallerThatGoesAwayCancelsItsRequest) {
  auto s = std::make_shared<RequestStream>();
  auto id = client_->Submit({.prompt = {5, 6}, .max_tokens = 400, .use_default_stop = false}, s,
                            std::chrono::seconds(10));
  ASSERT_TRUE(id.ok());
  client_->Cancel(*id, FinishReason::kCancelled);
  for (int i = 0; i < 100; ++i) {
    if (worker_->Metrics().finished.count("cancelled")) {
      EXPECT_EQ(worker_->Metrics().kv_blocks_used, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "the engine never cancelled the request";
}

TEST_F(RpcTest, AnEngineThatGoesAwayEndsStreamsWithARetryableErrorAndFailsLoad) {
  auto s = std::make_shared<RequestStream>();
  auto id = client_->Submit({.prompt = {5, 6}, .max_tokens = 400, .use_default_stop = false}, s,
                            std::chrono::seconds(10));
  ASSERT_TRUE(id.ok());
  service_->Shutdown(std::chrono::milliseconds(100));
  std::vector<TokenEvent> all = Drain(*s);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().finish, FinishReason::kError);
  EXPECT_NE(all.back().error.find("group 0 failed"), std::string::npos) << all.back().error;
  auto load = client_->Load(std::chrono::milliseconds(500));
  EXPECT_EQ(load.status().code(), StatusCode::kUnavailable);
  auto again =
      client_->Submit({.prompt = {5}}, std::make_shared<RequestStream>(), std::chrono::seconds(2));
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
}

TEST(RpcClientTest, AnAddressNobodyServesIsUnavailableInBoundedTime) {
  GrpcEngineGroup g("group 3", "127.0.0.1:1");
  const auto t0 = std::chrono::steady_clock::now();
  auto load = g.Load(std::chrono::milliseconds(500));
  EXPECT_EQ(load.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(load.status().message().find("group 3 (127.0.0.1:1)"), std::string::npos);
  auto id = g.Submit({.prompt = {5}}, std::make_shared<RequestStream>(), std::chrono::seconds(3));
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace epserve::rpc
