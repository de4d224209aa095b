// /metrics of `epserve serve` (docs/serving-api.md, "Metrics"), Prometheus text format 0.0.4.
// Two sources: the scheduler's own observations (latency histograms, requests by outcome,
// routing decisions, retries), kept in a prometheus-cpp registry; and each DP group's engine
// counters and gauges (its last Load answer through the GroupRouter), written per group with a
// `group` label at scrape time, as the engines own those values.
// Thread safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "serve/group_router.h"

namespace prometheus {
class Registry;
class Histogram;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace epserve::serve {

class ServeMetrics {
 public:
  explicit ServeMetrics(std::string model_name);
  ~ServeMetrics();
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveEndToEnd(double seconds);
  // An HTTP request's outcome: "ok", or the error's HTTP status ("400", "503", ...).
  void CountRequest(const std::string& status);
  // A choice whose group failed under it was resumed on a group (its new first token came
  // `pause_seconds` after the failure).
  void ObserveResume(double pause_seconds);
  // serve --np restarted its engine world.
  void CountWorldRestart();
  // HTTP connections open now, and the bound beyond which they get 503 (--http-threads).
  void SetHttpConnections(int open, int bound);
  std::string Render(const RouterMetrics& router) const;

 private:
  std::string model_name_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* resume_pause_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter* restarts_;
  prometheus::Gauge* connections_;
  prometheus::Gauge* connection_bound_;
};

}  // namespace epserve::serve
