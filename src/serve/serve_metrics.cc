#include "serve/serve_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdio>

#include "grammar/grammar.h"

namespace epserve::serve {

namespace {

// vLLM's bucket bounds for the same histograms (vllm/engine/metrics.py), in seconds.
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries kItlBuckets = {
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const prometheus::Histogram::BucketBoundaries kE2eBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

ServeMetrics::ServeMetrics(std::string model_name)
    : model_name_(std::move(model_name)), registry_(std::make_shared<prometheus::Registry>()) {
  const prometheus::Labels labels = {{"model_name", model_name_}};
  ttft_ = &prometheus::BuildHistogram()
               .Name("epserve:time_to_first_token_seconds")
               .Help("Time from a request's submission (after tokenization) to its first token.")
               .Register(*registry_)
               .Add(labels, kTtftBuckets);
  itl_ = &prometheus::BuildHistogram()
              .Name("epserve:inter_token_latency_seconds")
              .Help("Time between a request's successive tokens.")
              .Register(*registry_)
              .Add(labels, kItlBuckets);
  e2e_ = &prometheus::BuildHistogram()
              .Name("epserve:e2e_request_latency_seconds")
              .Help("Time from a request's submission (after tokenization) to its last token.")
              .Register(*registry_)
              .Add(labels, kE2eBuckets);
  resume_pause_ =
      &prometheus::BuildHistogram()
           .Name("epserve:resume_pause_seconds")
           .Help(
               "Requests resumed after their group failed: time from the failure to the next "
               "token.")
           .Register(*registry_)
           .Add(labels, kItlBuckets);
  restarts_ = &prometheus::BuildCounter()
                   .Name("epserve:engine_world_restarts_total")
                   .Help("Times serve --np restarted its engine world (a rank died or stalled).")
                   .Register(*registry_)
                   .Add(labels);
  connections_ = &prometheus::BuildGauge()
                      .Name("epserve:http_connections")
                      .Help("HTTP connections open now, each on its own thread.")
                      .Register(*registry_)
                      .Add(labels);
  connection_bound_ =
      &prometheus::BuildGauge()
           .Name("epserve:http_connections_bound")
           .Help(
               "Open connections beyond which requests get 503 (--http-threads); at twice it, "
               "new connections wait in the kernel's backlog.")
           .Register(*registry_)
           .Add(labels);
  requests_ = &prometheus::BuildCounter()
                   .Name("epserve:http_requests_total")
                   .Help("Completion requests answered, by outcome (ok or the HTTP status).")
                   .Register(*registry_);
}

ServeMetrics::~ServeMetrics() = default;

void ServeMetrics::ObserveTimeToFirstToken(double s) { ttft_->Observe(s); }
void ServeMetrics::ObserveInterTokenLatency(double s) { itl_->Observe(s); }
void ServeMetrics::ObserveEndToEnd(double s) { e2e_->Observe(s); }

void ServeMetrics::ObserveResume(double s) { resume_pause_->Observe(s); }
void ServeMetrics::CountWorldRestart() { restarts_->Increment(); }
void ServeMetrics::SetHttpConnections(int open, int bound) {
  connections_->Set(open);
  connection_bound_->Set(bound);
}

void ServeMetrics::CountRequest(const std::string& status) {
  requests_->Add({{"model_name", model_name_}, {"status", status}}).Increment();
}

std::string ServeMetrics::Render(const RouterMetrics& r) const {
  std::string out = prometheus::TextSerializer().Serialize(registry_->Collect());
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    return std::string(buf);
  };
  const std::string model = "model_name=\"" + model_name_ + "\"";
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (size_t g = 0; g < r.groups.size(); ++g)
      out += std::string(name) + "{" + model + ",group=\"" + std::to_string(g) + "\"} " +
             num(value(r.groups[g])) + "\n";
  };
  using G = RouterMetrics::Group;
  family("epserve:group_up", "gauge", "1 while the DP group answers health checks.",
         [](const G& g) { return g.up ? 1.0 : 0.0; });
  family("epserve:num_requests_running", "gauge", "Requests holding cache blocks.",
         [](const G& g) { return double(g.load.num_running); });
  family("epserve:num_requests_waiting", "gauge", "Requests queued for admission.",
         [](const G& g) { return double(g.load.num_waiting); });
  family("epserve:router_requests_in_flight", "gauge",
         "Requests this scheduler has routed to the group and not yet finished.",
         [](const G& g) { return double(g.in_flight); });
  family("epserve:kv_cache_usage_perc", "gauge",
         "Share of KV cache blocks referenced by requests (1 = all).",
         [](const G& g) { return g.load.kv_cache_usage(); });
  family("epserve:prompt_tokens_total", "counter", "Prompt tokens submitted.",
         [](const G& g) { return double(g.load.prompt_tokens); });
  family("epserve:generation_tokens_total", "counter", "Tokens generated.",
         [](const G& g) { return double(g.load.generation_tokens); });
  family("epserve:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.",
         [](const G& g) { return double(g.load.prefix_cache_queries); });
  family("epserve:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         [](const G& g) { return double(g.load.prefix_cache_hits); });
  family("epserve:prefix_cache_hit_rate", "gauge",
         "prefix_cache_hits_total / prefix_cache_queries_total (0 before any query).",
         [](const G& g) {
           return g.load.prefix_cache_queries > 0
                      ? double(g.load.prefix_cache_hits) / g.load.prefix_cache_queries
                      : 0.0;
         });
  family("epserve:spec_decode_num_draft_tokens_total", "counter",
         "MTP draft tokens the main model verified (serve --mtp on).",
         [](const G& g) { return double(g.load.spec_draft_tokens); });
  family("epserve:spec_decode_num_accepted_tokens_total", "counter",
         "MTP draft tokens the main model kept; each adds a token to its decode step.",
         [](const G& g) { return double(g.load.spec_accepted_tokens); });
  family("epserve:expert_replacements_total", "counter",
         "Online re-placements of the experts (engine --replace-every; counted by the group "
         "holding the world's rank 0).",
         [](const G& g) { return double(g.load.replacements); });
  family("epserve:expert_replacement_bytes_total", "counter",
         "Bytes of expert weights loaded by online re-placements, all ranks.",
         [](const G& g) { return double(g.load.replacement_bytes); });
  family("epserve:expert_replacement_pause_seconds_total", "counter",
         "Time re-placements held the world at step boundaries (the slowest rank, summed).",
         [](const G& g) { return g.load.replacement_pause_seconds; });
  // Measured only where the world re-places: groups without a measurement are left out.
  auto measured = [&](const char* name, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
    for (size_t g = 0; g < r.groups.size(); ++g)
      if (value(r.groups[g]) >= 0)
        out += std::string(name) + "{" + model + ",group=\"" + std::to_string(g) + "\"} " +
               num(value(r.groups[g])) + "\n";
  };
  measured("epserve:expert_cross_machine_copies_per_token",
           "Token copies sent to other machines per token (all MoE layers), measured on live "
           "traffic since the last re-placement (as of the last gather or switch).",
           [](const G& g) { return g.load.cross_copies_since; });
  measured("epserve:expert_cross_machine_copies_per_token_before",
           "The same, measured over the window before the last re-placement.",
           [](const G& g) { return g.load.cross_copies_before; });
  family("epserve:grammar_cache_bytes", "gauge",
         "Bytes of compiled structured-output grammars (mask caches included) the group's "
         "engine process keeps (bounded by --grammar-cache-mb).",
         [](const G& g) { return double(g.load.grammar_cache_bytes); });
  family("epserve:grammar_cache_grammars", "gauge",
         "Compiled grammars the group's engine process keeps.",
         [](const G& g) { return double(g.load.grammar_cache_entries); });
  family("epserve:grammar_compile_seconds_total", "counter",
         "Time the group's engine process spent compiling request constraints (off the "
         "engine loop, in its compile slots).",
         [](const G& g) { return g.load.grammar_compile_seconds; });
  family("epserve:router_tree_tokens", "gauge",
         "Prompt tokens the router's prefix tree attributes to the group.",
         [](const G& g) { return double(g.tree_tokens); });
  out +=
      "# HELP epserve:request_success_total Requests finished, by the finish reason their client "
      "was given.\n"
      "# TYPE epserve:request_success_total counter\n";
  for (size_t g = 0; g < r.groups.size(); ++g)
    for (const char* reason : {"stop", "length", "cancelled", "error"}) {
      auto it = r.groups[g].finished.find(reason);
      out += "epserve:request_success_total{" + model + ",group=\"" + std::to_string(g) +
             "\",finished_reason=\"" + reason + "\"} " +
             std::to_string(it == r.groups[g].finished.end() ? 0 : it->second) + "\n";
    }
  out +=
      "# HELP epserve:router_decisions_total Requests routed, by reason.\n"
      "# TYPE epserve:router_decisions_total counter\n";
  for (const char* reason : {"cache_hit", "cache_miss", "balance", "round_robin", "least_load"}) {
    auto it = r.decisions.find(reason);
    out += "epserve:router_decisions_total{" + model + ",reason=\"" + reason + "\"} " +
           std::to_string(it == r.decisions.end() ? 0 : it->second) + "\n";
  }
  int up = 0;
  for (const G& g : r.groups) up += g.up ? 1 : 0;
  out +=
      "# HELP epserve:router_retries_total Submissions moved to another group after a failure.\n"
      "# TYPE epserve:router_retries_total counter\n"
      "epserve:router_retries_total{" +
      model + "} " + std::to_string(r.retries) + "\n";
  out +=
      "# HELP epserve:groups_up DP groups answering health checks.\n"
      "# TYPE epserve:groups_up gauge\n"
      "epserve:groups_up{" +
      model + "} " + std::to_string(up) + "\n";
  // The scheduler's own cache: it compiles every schema once to validate the request (the same
  // cache as the groups' when they run in this process).
  const grammar::GrammarCacheStats cache = grammar::GrammarCacheStatistics();
  out +=
      "# HELP epserve:scheduler_grammar_cache_bytes Bytes of compiled grammars this scheduler "
      "process keeps (bounded by --grammar-cache-mb).\n"
      "# TYPE epserve:scheduler_grammar_cache_bytes gauge\n"
      "epserve:scheduler_grammar_cache_bytes{" +
      model + "} " + std::to_string(cache.bytes) + "\n";
  return out;
}

}  // namespace epserve::serve
