// GroupRouter over fake groups: routing, retries on an unavailable group, health checks that
// mark groups down and up again, and "no group up".
#include "serve/group_router.h"

#include <gtest/gtest.h>

#include <thread>

namespace epserve::serve {
namespace {

class FakeGroup : public EngineGroup {
 public:
  explicit FakeGroup(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  StatusOr<RequestId> Submit(EngineRequest, std::shared_ptr<RequestStream>,
                             std::chrono::milliseconds) override {
    ++submits;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (!accepting) return Status::Unavailable(name_ + " refuses");
    return next_id++;
  }
  void Cancel(RequestId, FinishReason) override { ++cancels; }
  StatusOr<WorkerMetrics> Load(std::chrono::milliseconds) override {
    ++loads;
    if (hold_load) {  // answers as things stood when asked, once released (a slow round trip)
      const bool was_healthy = healthy;
      load_held = true;
      while (hold_load) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      load_held = false;
      if (was_healthy) return WorkerMetrics{};
    }
    if (!healthy) return Status::Unavailable(name_ + " does not answer");
    WorkerMetrics m;
    m.num_running = 7;
    m.stalled_ms = stalled_ms;
    return m;
  }
  void Abort(const std::string&) override { ++aborts; }

  std::atomic<bool> healthy{true}, accepting{true};
  std::atomic<bool> hold_load{false}, load_held{false};
  std::atomic<int> loads{0};
  std::atomic<int64_t> stalled_ms{0};  // what Load reports
  std::atomic<int> submits{0}, cancels{0}, aborts{0};
  std::atomic<RequestId> next_id{1};
  std::chrono::milliseconds delay{0};  // how long a Submit takes (a remote group's round trip)

 private:
  std::string name_;
};

struct Fixture {
  explicit Fixture(int n, RoutingPolicyKind policy = RoutingPolicyKind::kRoundRobin,
                   std::chrono::milliseconds stall_timeout = std::chrono::milliseconds(0)) {
    std::vector<std::unique_ptr<EngineGroup>> groups;
    for (int g = 0; g < n; ++g) {
      auto f = std::make_unique<FakeGroup>("group " + std::to_string(g));
      fakes.push_back(f.get());
      groups.push_back(std::move(f));
    }
    router =
        GroupRouter::Create(std::move(groups), {.routing = {.policy = policy},
                                                .health_interval = std::chrono::milliseconds(20),
                                                .health_timeout = std::chrono::milliseconds(20),
                                                .stall_timeout = stall_timeout})
            .value();
    EXPECT_TRUE(router->WaitUntilUp(std::chrono::seconds(5)).ok());
  }
  bool WaitFor(int up, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (router->num_up() == up) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  std::vector<FakeGroup*> fakes;
  std::unique_ptr<GroupRouter> router;
};

EngineRequest Prompt(int32_t first) { return {.prompt = {first, 2, 3, 4}}; }

TEST(GroupRouter, RoundRobinsAndCountsInFlight) {
  Fixture f(2);
  auto a = f.router->Submit(Prompt(1), std::make_shared<RequestStream>());
  auto b = f.router->Submit(Prompt(2), std::make_shared<RequestStream>());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->group, b->group);
  RouterMetrics m = f.router->Metrics();
  EXPECT_EQ(m.groups[0].in_flight + m.groups[1].in_flight, 2);
  EXPECT_EQ(m.decisions["round_robin"], 2);
  EXPECT_EQ(m.groups[0].load.num_running, 7);
  f.router->Finished(*a, FinishReason::kStop);
  f.router->Cancel(*b, FinishReason::kCancelled);
  f.router->Finished(*b, FinishReason::kCancelled);
  m = f.router->Metrics();
  EXPECT_EQ(m.groups[0].in_flight + m.groups[1].in_flight, 0);
  EXPECT_EQ(f.fakes[b->group]->cancels, 1);
  // Counted by the reason each client was given, whatever the engines counted.
  EXPECT_EQ(m.groups[a->group].finished["stop"], 1);
  EXPECT_EQ(m.groups[b->group].finished["cancelled"], 1);
  EXPECT_EQ(m.groups[a->group].finished.count("cancelled"), 0u);
}

TEST(GroupRouter, RetriesARefusedSubmissionOnAnotherGroupAndMarksTheFirstDown) {
  Fixture f(3);
  f.fakes[0]->accepting = false;
  auto r = f.router->Submit(Prompt(1), std::make_shared<RequestStream>());  // round robin: 0 first
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->group, 0);
  EXPECT_EQ(f.fakes[0]->submits, 1);
  EXPECT_EQ(f.fakes[0]->aborts, 1);  // marked down: its open requests ended
  EXPECT_EQ(f.router->Metrics().retries, 1);
  // Healthy again at the next health check.
  f.fakes[0]->accepting = true;
  EXPECT_TRUE(f.WaitFor(3));
}

// A health check that began before a group failed answers "up" after the failure: that stale
// answer must not mark the group up again (requests would be routed to a dead group until the
// next check).
TEST(GroupRouter, AHealthCheckBegunBeforeAFailureDoesNotMarkTheGroupUp) {
  Fixture f(2);
  FakeGroup& g0 = *f.fakes[0];
  g0.hold_load = true;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!g0.load_held && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(g0.load_held) << "no health check of group 0 began";
  // Group 0 dies while its check is in flight: a refused submission marks it down.
  g0.accepting = false;
  g0.healthy = false;
  auto r = f.router->Submit(Prompt(1), std::make_shared<RequestStream>());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->group, 1);
  EXPECT_EQ(g0.aborts, 1);
  // The check answers "up" now; two more checks (failing) follow.
  const int loads = g0.loads;
  g0.hold_load = false;
  while (g0.loads < loads + 2 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(g0.loads, loads + 2);
  EXPECT_EQ(f.router->num_up(), 1);
  EXPECT_EQ(g0.aborts, 1) << "group 0 was marked up by the stale answer, then down again";
  // A check begun after the failure counts: group 0 comes back.
  g0.healthy = true;
  g0.accepting = true;
  EXPECT_TRUE(f.WaitFor(2));
}

// A group whose leader answers but whose steps stopped (a stopped rank elsewhere in its world)
// is down once it has made no progress for stall_timeout, and stays down until it moves.
TEST(GroupRouter, AGroupThatAnswersButMakesNoProgressIsDownAfterTheStallTimeout) {
  Fixture f(2, RoutingPolicyKind::kRoundRobin, std::chrono::milliseconds(1000));
  f.fakes[1]->stalled_ms = 900;  // within the bound: waited for
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(f.router->num_up(), 2);
  EXPECT_EQ(f.fakes[1]->aborts, 0);
  f.fakes[1]->stalled_ms = 1500;
  ASSERT_TRUE(f.WaitFor(1));
  // Its streams are ended (sessions resume them elsewhere), just after it is marked down.
  for (int i = 0; i < 500 && f.fakes[1]->aborts == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(f.fakes[1]->aborts, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(f.router->num_up(), 1);  // answering is not enough
  EXPECT_EQ(f.fakes[1]->aborts, 1);
  f.fakes[1]->stalled_ms = 0;  // it moved again
  EXPECT_TRUE(f.WaitFor(2));
}

TEST(GroupRouter, AGroupThatStopsAnsweringIsDownWithinAHealthIntervalAndComesBack) {
  Fixture f(2);
  f.fakes[1]->healthy = false;
  ASSERT_TRUE(f.WaitFor(1));
  // The router marks the group down before it aborts its streams (on the health thread), so
  // the abort may land just after num_up() drops.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (f.fakes[1]->aborts == 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(f.fakes[1]->aborts, 1);
  for (int i = 0; i < 4; ++i) {
    auto r = f.router->Submit(Prompt(i), std::make_shared<RequestStream>());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->group, 0);
  }
  EXPECT_EQ(f.fakes[1]->submits, 0);
  f.fakes[1]->healthy = true;
  EXPECT_TRUE(f.WaitFor(2));
}

TEST(GroupRouter, NoGroupUpIsUnavailableAndABadRequestIsNotRetried) {
  Fixture f(2);
  f.fakes[0]->accepting = false;
  f.fakes[1]->accepting = false;
  auto r = f.router->Submit(Prompt(1), std::make_shared<RequestStream>());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("refuses"), std::string::npos) << r.status().message();
  f.fakes[0]->healthy = f.fakes[1]->healthy = false;
  ASSERT_TRUE(f.WaitFor(0));
  r = f.router->Submit(Prompt(1), std::make_shared<RequestStream>());
  EXPECT_EQ(r.status().message(), "no engine group is up");
}

TEST(GroupRouter, WaitUntilUpNamesTheGroupsStillDown) {
  std::vector<std::unique_ptr<EngineGroup>> groups;
  auto dead = std::make_unique<FakeGroup>("group 1 (10.0.0.2:5000)");
  dead->healthy = false;
  groups.push_back(std::make_unique<FakeGroup>("group 0"));
  groups.push_back(std::move(dead));
  auto router =
      GroupRouter::Create(std::move(groups), {.health_interval = std::chrono::milliseconds(10)})
          .value();
  Status st = router->WaitUntilUp(std::chrono::milliseconds(200));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("group 1 (10.0.0.2:5000)"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("group 0"), std::string::npos) << st.message();
}

// A burst of requests arriving together (150 at once) spreads over the groups: each choice is
// counted as in flight when it is made, not once its group has accepted (when every request of
// the burst saw the same empty loads and went to group 0).
TEST(GroupRouterTest, ABurstSpreadsOverTheGroups) {
  for (RoutingPolicyKind policy : {RoutingPolicyKind::kCacheAware, RoutingPolicyKind::kLeastLoad}) {
    Fixture f(2, policy);
    for (FakeGroup* g : f.fakes) g->delay = std::chrono::milliseconds(300);
    std::vector<std::thread> clients;
    std::atomic<int> ok{0}, ready{0};
    std::atomic<bool> go{false};
    for (int i = 0; i < 150; ++i)
      clients.emplace_back([&, i] {
        ++ready;
        while (!go) std::this_thread::yield();  // all 150 arrive together
        if (f.router->Submit(Prompt(1000 + 7 * i), std::make_shared<RequestStream>()).ok()) ++ok;
      });
    while (ready < 150) std::this_thread::yield();
    go = true;
    for (auto& t : clients) t.join();
    EXPECT_EQ(ok, 150);
    const int a = f.fakes[0]->submits, b = f.fakes[1]->submits;
    EXPECT_EQ(a + b, 150);
    EXPECT_GE(std::min(a, b), 50) << RoutingPolicyName(policy) << ": " << a << " / " << b;
  }
}

}  // namespace
}  // namespace epserve::serve
