// The SLO logic of `plan disagg` on hand-made cases: SLOs nothing meets, SLOs everything meets,
// the chosen pools meeting theirs while nothing smaller does, and the pieces of each SLO (the KV
// transfer in TTFT, Little's law in the decode batch, the co-located step mix).
#include "planner/disagg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

class DisaggTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h800_ = Gpu("H800");
    h200_ = Gpu("H200");
    model_ = Model("deepseek-v3");
    eff_ = Efficiency();
  }

  DisaggProblem Problem(ServingTarget target) const {
    return {.model = &model_,
            .decode_eff = &eff_,
            .prefill_eff = &eff_,
            .target = target,
            .decode = {.query_len = 2, .acceptance_rate = 0.6}};
  }
  PoolSearch Search(const HardwareSpec& hw) const {
    PoolSearch s;
    s.gpus = {&hw};
    return s;
  }
  const RoutingModel& Routing(int ep) {
    auto& slot = routing_[ep];
    if (!slot) {
      StatusOr<RoutingModel> r = RoutingModel::Uniform(model_, ep, std::min(ep, 8));
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      slot = std::make_unique<RoutingModel>(*r);
    }
    return *slot;
  }

  HardwareSpec h800_, h200_;
  ModelSpec model_;
  EfficiencyFactors eff_;
  std::map<int, std::unique_ptr<RoutingModel>> routing_;
};

TEST_F(DisaggTest, ATtftNoPoolCanMeetIsAClearError) {
  const ServingTarget t{
      .prompt_len = 4096, .output_len = 256, .rate = 1, .ttft_slo_ms = 1, .tpot_slo_ms = 100};
  StatusOr<DisaggPlan> plan = PlanDisagg(Problem(t), Search(h800_));
  ASSERT_FALSE(plan.ok());
  const std::string& m = plan.status().message();
  std::printf("%s\n", m.c_str());
  EXPECT_NE(m.find("no prefill pool on H800 meets TTFT <= 1.0 ms for 4096-token prompts"),
            std::string::npos);
  EXPECT_NE(m.find("the lowest TTFT found is"), std::string::npos);
}

TEST_F(DisaggTest, ATpotNoPoolCanMeetIsAClearError) {
  const ServingTarget t{
      .prompt_len = 1024, .output_len = 256, .rate = 1, .ttft_slo_ms = 5000, .tpot_slo_ms = 1};
  StatusOr<DisaggPlan> plan = PlanDisagg(Problem(t), Search(h800_));
  ASSERT_FALSE(plan.ok());
  const std::string& m = plan.status().message();
  std::printf("%s\n", m.c_str());
  EXPECT_NE(m.find("no decode pool on H800 meets TPOT <= 1.0 ms"), std::string::npos);
  EXPECT_NE(m.find("the lowest TPOT found is"), std::string::npos);
  // A bad target is an error naming the flag.
  ServingTarget bad = t;
  bad.rate = 0;
  StatusOr<DisaggPlan> none = PlanDisagg(Problem(bad), Search(h800_));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--rate"), std::string::npos);
}

TEST_F(DisaggTest, LooseSlosGiveTheSmallestDeployment) {
  const ServingTarget t{.prompt_len = 1024,
                        .output_len = 128,
                        .rate = 0.5,
                        .ttft_slo_ms = 10000,
                        .tpot_slo_ms = 1000};
  // One H200 machine holds the model (EP8): one machine per pool.
  StatusOr<DisaggPlan> h200 = PlanDisagg(Problem(t), Search(h200_));
  ASSERT_TRUE(h200.ok()) << h200.status().ToString();
  EXPECT_EQ(h200->machines, 2);
  EXPECT_EQ(h200->gpus, 16);
  EXPECT_EQ(h200->prefill.replicas, 1);
  EXPECT_EQ(h200->decode.replicas, 1);
  EXPECT_EQ(h200->prefill.deployment.ep, 8);
  EXPECT_EQ(h200->decode.deployment.ep, 8);
  // H800 machines cannot hold the weights at EP8 (checked here at every TP): two per pool.
  for (int tp : {1, 2, 4, 8}) {
    StatusOr<Deployment> d = MakeDeployment(model_, 8, tp, 8);
    ASSERT_TRUE(d.ok());
    const PlanContext ctx{.hw = &h800_, .model = &model_, .eff = &eff_, .routing = &Routing(8)};
    EXPECT_FALSE(EstimateMemory(ctx, *d, {.batch = 1, .kv_len = 1024}).weights_fit);
  }
  StatusOr<DisaggPlan> h800 = PlanDisagg(Problem(t), Search(h800_));
  ASSERT_TRUE(h800.ok()) << h800.status().ToString();
  EXPECT_EQ(h800->machines, 4);
  EXPECT_EQ(h800->prefill.Machines(), 2);
  EXPECT_EQ(h800->decode.Machines(), 2);
}

TEST_F(DisaggTest, ChosenPoolsMeetTheirSloAndNoSmallerPoolDoes) {
  // Needs more than the smallest pools: 2 replicas of a 2-machine prefill deployment, a
  // 4-machine decode deployment.
  const ServingTarget t{
      .prompt_len = 2048, .output_len = 256, .rate = 40, .ttft_slo_ms = 300, .tpot_slo_ms = 20};
  PoolSearch s = Search(h800_);
  s.ep_values = {16, 32, 64};
  s.redundant_values = {0};
  const DisaggProblem problem = Problem(t);
  StatusOr<DisaggPlan> plan = PlanDisagg(problem, s);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const PrefillPool& p = plan->prefill;
  const DecodePool& d = plan->decode;
  std::printf("prefill %d x %s (TTFT %.1f ms), decode %d x %s (TPOT %.2f ms, batch %d)\n",
              p.replicas, p.deployment.ToString().c_str(), p.ttft.ttft_us / 1e3, d.replicas,
              d.deployment.ToString().c_str(), d.tpot_us / 1e3, d.batch);
  EXPECT_LE(p.ttft.ttft_us, 300e3);
  EXPECT_LE(d.tpot_us, 20e3);
  EXPECT_GT(p.Machines(), 2);
  EXPECT_GT(d.Machines(), 2);
  EXPECT_EQ(plan->machines, p.Machines() + d.Machines());
  // Every pool of the search with fewer machines misses its SLO.
  int checked = 0;
  for (int ep : s.ep_values) {
    for (int tp : s.tp_values) {
      StatusOr<Deployment> dep = MakeDeployment(model_, ep, tp, 8);
      if (!dep.ok()) continue;
      for (int n = 1; n * dep->num_machines < p.Machines(); ++n) {
        StatusOr<PrefillPool> smaller = EvaluatePrefillPool(
            problem, {.hw = &h800_, .routing = &Routing(ep), .deployment = *dep, .replicas = n});
        ASSERT_TRUE(smaller.ok());
        EXPECT_FALSE(smaller->meets) << n << " x " << dep->ToString();
        ++checked;
      }
      for (int n = 1; n * dep->num_machines < d.Machines(); ++n) {
        StatusOr<DecodePool> smaller = EvaluateDecodePool(
            problem, {.hw = &h800_, .routing = &Routing(ep), .deployment = *dep, .replicas = n});
        ASSERT_TRUE(smaller.ok());
        EXPECT_FALSE(smaller->meets) << n << " x " << dep->ToString();
        ++checked;
      }
    }
  }
  std::printf("%d smaller pools checked\n", checked);
  EXPECT_GT(checked, 0);
}

TEST_F(DisaggTest, TtftIsQueuePlusPrefillPlusKvTransfer) {
  const ServingTarget t{
      .prompt_len = 4096, .output_len = 512, .rate = 10, .ttft_slo_ms = 1000, .tpot_slo_ms = 50};
  const DisaggProblem problem = Problem(t);
  StatusOr<Deployment> dep = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(dep.ok());
  StatusOr<PrefillPool> pool = EvaluatePrefillPool(
      problem, {.hw = &h800_, .routing = &Routing(32), .deployment = *dep, .replicas = 1});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  // 4096 tokens x 71,424 B (61 layers + the MTP layer, 576 BF16 values each) over one 50 GB/s
  // NIC at the kv_transfer factors (a copy of dispatch's: 0.48, 20 us) plus the IB latency.
  const double bytes = 4096.0 * 62 * 576 * 2;
  EXPECT_NEAR(KvBytesPerRequest(model_, t, problem.decode), bytes, 1e-6);
  const double transfer = eff_.kv_transfer.overhead_us + h800_.infiniband_latency_us +
                          bytes / (eff_.kv_transfer.infiniband * 50e9) * 1e6;
  EXPECT_NEAR(pool->kv_transfer_us, transfer, 1e-6);
  const double rho = 10.0 / 32 * pool->ttft.service_us * 1e-6;
  EXPECT_NEAR(pool->ttft.utilization, rho, 1e-12);
  EXPECT_NEAR(pool->ttft.ttft_us,
              rho * pool->ttft.service_us / (2 * (1 - rho)) + pool->ttft.service_us + transfer,
              1e-6);
  EXPECT_NEAR(pool->kv_link_utilization, 10.0 / 32 * transfer * 1e-6, 1e-12);
}

TEST_F(DisaggTest, DecodeBatchIsTheSmallestLittlesLawAllows) {
  const ServingTarget t{
      .prompt_len = 2048, .output_len = 512, .rate = 20, .ttft_slo_ms = 1000, .tpot_slo_ms = 50};
  StatusOr<Deployment> dep = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(dep.ok());
  StatusOr<DecodePool> pool = EvaluateDecodePool(
      Problem(t), {.hw = &h800_, .routing = &Routing(32), .deployment = *dep, .replicas = 1});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE(pool->fits);
  // Requests decoding at once per group = rate per group x output tokens x time per token.
  const double in_flight = 20.0 / 32 * 512 * pool->tpot_us * 1e-6;
  EXPECT_GE(pool->batch, in_flight);
  EXPECT_LT(pool->batch - 1, in_flight);
  EXPECT_NEAR(pool->tpot_us, pool->step.step_us / 1.6, 1e-6);
  EXPECT_EQ(pool->step.memory.max_batch >= pool->batch, true);
}

TEST_F(DisaggTest, AChunkInAnyGroupSlowsEveryGroupsStep) {
  const ServingTarget t{
      .prompt_len = 4096, .output_len = 512, .rate = 10, .ttft_slo_ms = 1000, .tpot_slo_ms = 50};
  StatusOr<Deployment> dep = MakeDeployment(model_, 32, 1, 8);
  ASSERT_TRUE(dep.ok());
  const DisaggProblem problem = Problem(t);
  StatusOr<ColocatedPool> c = EvaluateColocated(problem, {.hw = &h800_,
                                                          .routing = &Routing(32),
                                                          .deployment = *dep,
                                                          .replicas = 1,
                                                          .chunk_tokens = 1024});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->stable);
  std::printf(
      "co-located EP32: decode step %.1f ms, mixed %.1f ms, P(mixed) %.3f, TPOT %.2f ms, "
      "TTFT %.1f ms, batch %d, busy %d\n",
      c->decode_step_us / 1e3, c->mixed_step_us / 1e3, c->mixed_fraction, c->tpot_us / 1e3,
      c->ttft_us / 1e3, c->batch, c->busy_groups);
  EXPECT_GT(c->mixed_step_us, c->decode_step_us);
  EXPECT_NEAR(c->mixed_fraction, 1 - std::pow(1 - c->utilization, 32), 1e-12);
  EXPECT_NEAR(
      c->tpot_us,
      ((1 - c->mixed_fraction) * c->decode_step_us + c->mixed_fraction * c->mixed_step_us) / 1.6,
      1e-6);
  // The prompt's 4 chunks each take a mixed step.
  const double service = 4 * c->mixed_step_us;
  EXPECT_NEAR(c->utilization, 10.0 / 32 * service * 1e-6, 1e-9);
  EXPECT_NEAR(c->ttft_us, c->utilization * service / (2 * (1 - c->utilization)) + service, 1e-3);
  // The same machines decoding only (the disaggregated decode pool at this batch) step faster.
  StatusOr<DecodePool> alone = EvaluateDecodePool(
      problem, {.hw = &h800_, .routing = &Routing(32), .deployment = *dep, .replicas = 1});
  ASSERT_TRUE(alone.ok());
  EXPECT_LT(alone->tpot_us, c->tpot_us);
}

// docs/planner.md's worked example: 4096-token prompts, 512 output tokens, 10 requests/s on
// H800, TTFT <= 1 s, TPOT <= 50 ms.
TEST_F(DisaggTest, DocumentedExample) {
  const ServingTarget t{
      .prompt_len = 4096, .output_len = 512, .rate = 10, .ttft_slo_ms = 1000, .tpot_slo_ms = 50};
  StatusOr<DisaggPlan> plan = PlanDisagg(Problem(t), Search(h800_));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::printf("disagg: %d machines (prefill %d x %s, decode %d x %s)\n", plan->machines,
              plan->prefill.replicas, plan->prefill.deployment.ToString().c_str(),
              plan->decode.replicas, plan->decode.deployment.ToString().c_str());
  EXPECT_EQ(plan->machines, 4);
  ASSERT_TRUE(plan->colocated_same_size.has_value());
  EXPECT_FALSE(plan->colocated_same_size->meets);  // its TPOT misses: prefill in most steps
  EXPECT_GT(plan->colocated_same_size->tpot_us, 50e3);
  ASSERT_TRUE(plan->colocated_smallest.has_value());
  EXPECT_GT(plan->colocated_smallest->Machines(), plan->machines);
}

}  // namespace
}  // namespace epserve::planner
