// The HTTP load generator behind `epserve bench serve` (serve/load_generator.h): plans every
// request up front from the seed (lengths, prompts, arrival times), runs them on a fixed set of
// threads with cpp-httplib's client, parses each server-sent-event stream and summarizes.
#include "serve/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "base/guarded_thread.h"

namespace epserve::serve {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Random prompt token ids come from [kMinTokenId, kMaxTokenId): above the special tokens most
// vocabularies put first (BOS, EOS, padding) and below every vocabulary size we serve (the tiny
// presets have 1024). The server reports no vocabulary size, so this range is fixed.
constexpr int kMinTokenId = 100, kMaxTokenId = 1000;
constexpr int kMaxErrors = 5;            // failure messages kept in the result
constexpr double kConnectTimeoutS = 10;  // a connect that takes longer is a dead server

// Chat prompts are these words in random order (one word is roughly one or two tokens).
constexpr const char* kWords[] = {
    "time",     "year",     "people",   "way",     "day",    "man",     "thing",   "woman",
    "life",     "child",    "world",    "school",  "state",  "family",  "student", "group",
    "country",  "problem",  "hand",     "part",    "place",  "case",    "week",    "company",
    "system",   "program",  "question", "work",    "number", "night",   "point",   "home",
    "water",    "room",     "mother",   "area",    "money",  "story",   "fact",    "month",
    "lot",      "right",    "study",    "book",    "eye",    "job",     "word",    "business",
    "issue",    "side",     "kind",     "head",    "house",  "service", "friend",  "father",
    "power",    "hour",     "game",     "line",    "end",    "member",  "law",     "car",
    "city",     "name",     "team",     "minute",  "idea",   "kid",     "body",    "information",
    "back",     "parent",   "face",     "others",  "level",  "office",  "door",    "health",
    "person",   "art",      "war",      "history", "party",  "result",  "change",  "morning",
    "reason",   "research", "girl",     "guy",     "moment", "air",     "teacher", "force",
    "education"};

struct ServerUrl {
  std::string origin;  // scheme://host:port
  std::string prefix;  // path before /v1 ("" or "/something")
};

StatusOr<ServerUrl> ParseUrl(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    return Status::InvalidArgument("--url must look like http://HOST:PORT, got \"" + url + "\"");
  const std::string rest = url.substr(scheme_end + 3);
  const size_t slash = rest.find('/');
  ServerUrl out{.origin = scheme + "://" + rest.substr(0, slash)};
  if (slash == 0 || rest.empty())
    return Status::InvalidArgument("--url has no host: \"" + url + "\"");
  out.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  // OpenAI clients take base URLs ending in /v1; accept those too.
  if (out.prefix.size() >= 3 && out.prefix.compare(out.prefix.size() - 3, 3, "/v1") == 0)
    out.prefix.resize(out.prefix.size() - 3);
  return out;
}

void SetTimeout(double seconds, const std::function<void(time_t, time_t)>& set) {
  const auto sec = static_cast<time_t>(seconds);
  set(sec, static_cast<time_t>((seconds - static_cast<double>(sec)) * 1e6));
}

std::unique_ptr<httplib::Client> MakeClient(const ServerUrl& url, const LoadGeneratorOptions& o) {
  auto client = std::make_unique<httplib::Client>(url.origin);
  httplib::Client* c = client.get();
  SetTimeout(std::min(o.timeout_s, kConnectTimeoutS),
             [c](time_t s, time_t us) { c->set_connection_timeout(s, us); });
  SetTimeout(o.timeout_s, [c](time_t s, time_t us) { c->set_read_timeout(s, us); });
  SetTimeout(o.timeout_s, [c](time_t s, time_t us) { c->set_write_timeout(s, us); });
  if (!o.api_key.empty()) c->set_bearer_token_auth(o.api_key);
  return client;
}

// cpp-httplib's own names of its errors are single words ("Connection"); these say more.
std::string ClientErrorText(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect (connection refused or host unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connecting timed out";
    case httplib::Error::Read:
      return "reading the response failed or timed out";
    case httplib::Error::Write:
      return "sending the request failed";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLServerVerification:
    case httplib::Error::SSLLoadingCerts:
      return "TLS failed (" + httplib::to_string(e) + ")";
    default:
      return httplib::to_string(e);
  }
}

// The message of an OpenAI-style error body ({"error": {"message": ...}}), else the body.
std::string ErrorBodyMessage(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  if (j.is_object() && j.contains("message") && j["message"].is_string())
    return j["message"].get<std::string>();
  if (body.empty()) return "(empty body)";
  return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

struct ServedModel {
  std::string id;
  int64_t max_model_len = 0;  // 0: not reported
};

StatusOr<ServedModel> FetchModel(httplib::Client& client, const ServerUrl& url,
                                 const std::string& full_url, const std::string& wanted) {
  const std::string route = url.prefix + "/v1/models";
  httplib::Result res = client.Get(route);
  if (!res)
    return Status::Unavailable("cannot reach " + full_url + " (GET " + route +
                               "): " + ClientErrorText(res.error()) +
                               "; is the server running there? (--url)");
  if (res->status != 200)
    return Status::Unavailable("GET " + url.origin + route + " answered HTTP " +
                               std::to_string(res->status) + ": " + ErrorBodyMessage(res->body));
  const Json j = Json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
    return Status::Unavailable("GET " + route +
                               " did not list any model: " + ErrorBodyMessage(res->body));
  std::string ids;
  for (const Json& m : j["data"]) {
    if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
    const std::string id = m["id"].get<std::string>();
    if (!wanted.empty() && id != wanted) {
      ids += (ids.empty() ? "" : ", ") + id;
      continue;
    }
    ServedModel out{.id = id};
    if (m.contains("max_model_len") && m["max_model_len"].is_number_integer())
      out.max_model_len = m["max_model_len"].get<int64_t>();
    return out;
  }
  return Status::NotFound("--model " + wanted + " is not served at " + full_url +
                          " (it serves: " + ids + ")");
}

// One request, decided before the run starts.
struct PlannedRequest {
  std::string body;  // the JSON body
  double arrival_s = 0;
  int64_t prompt_len = 0;  // tokens (completions) or words (chat), the prefix included
};

int MaxLength(int len, double ratio) {
  return std::max(1, static_cast<int>(std::floor(len * (1 + ratio))));
}

int DrawLength(int len, double ratio, std::mt19937_64& rng) {
  const int hi = MaxLength(len, ratio);
  const int lo = std::min(hi, std::max(1, static_cast<int>(std::floor(len * (1 - ratio)))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<PlannedRequest> PlanRequests(const LoadGeneratorOptions& o, const std::string& model) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> token(kMinTokenId, kMaxTokenId - 1);
  std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
  const bool chat = o.endpoint == BenchEndpoint::kChat;
  // A prompt piece: token ids, or words for chat (kept as ids into kWords).
  auto piece = [&](int len) {
    std::vector<int> out(len);
    for (int& x : out) x = chat ? static_cast<int>(word(rng)) : token(rng);
    return out;
  };
  std::vector<std::vector<int>> prefixes;
  for (int k = 0; k < o.num_prefixes && o.shared_prefix_share > 0; ++k)
    prefixes.push_back(piece(o.shared_prefix_len));
  // Exactly round(share * n) requests get a prefix, at random positions.
  std::vector<bool> prefixed(o.num_requests, false);
  const int num_prefixed =
      static_cast<int>(std::lround(o.shared_prefix_share * static_cast<double>(o.num_requests)));
  std::fill(prefixed.begin(), prefixed.begin() + num_prefixed, true);
  std::shuffle(prefixed.begin(), prefixed.end(), rng);

  std::exponential_distribution<double> gap(std::isinf(o.request_rate) ? 1.0 : o.request_rate);
  std::vector<PlannedRequest> out(o.num_requests);
  double arrival = 0;
  int next_prefix = 0;
  for (int i = 0; i < o.num_requests; ++i) {
    std::vector<int> prompt;
    if (prefixed[i]) prompt = prefixes[next_prefix++ % o.num_prefixes];
    const std::vector<int> own = piece(DrawLength(o.input_len, o.range_ratio, rng));
    prompt.insert(prompt.end(), own.begin(), own.end());
    Json body = {{"model", model},     {"max_tokens", DrawLength(o.output_len, o.range_ratio, rng)},
                 {"ignore_eos", true}, {"temperature", 0},
                 {"stream", true},     {"stream_options", {{"include_usage", true}}}};
    if (chat) {
      std::string text;
      for (int w : prompt) text += (text.empty() ? "" : " ") + std::string(kWords[w]);
      body["messages"] = Json::array({{{"role", "user"}, {"content", text}}});
    } else {
      body["prompt"] = prompt;
    }
    if (i > 0 && !std::isinf(o.request_rate)) arrival += gap(rng);
    out[i] = {.body = body.dump(),
              .arrival_s = arrival,
              .prompt_len = static_cast<int64_t>(prompt.size())};
  }
  return out;
}

// What one request measured; times in seconds since its send.
struct RequestRecord {
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// Folds one server-sent event's data into the record. Returns false on an error (the stream is
// then abandoned); after [DONE] the rest of the body is still read, so the server sees a client
// that stayed to the end.
bool OnEvent(const std::string& data, double now_s, double* last_text_s, bool* done,
             RequestRecord* r) {
  if (data == "[DONE]") {
    *done = true;
    return true;
  }
  const Json j = Json::parse(data, nullptr, false);
  if (!j.is_object()) {
    r->error = "a stream chunk is not JSON: " + data.substr(0, 200);
    return false;
  }
  if (j.contains("error")) {
    r->error = "error event: " + ErrorBodyMessage(data);
    return false;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const Json& c = j["choices"][0];
    const Json* text = nullptr;
    if (c.contains("text")) text = &c["text"];
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content"))
      text = &c["delta"]["content"];
    if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      if (*last_text_s < 0) {
        r->ttft_s = now_s;
      } else {
        r->itl_s.push_back(now_s - *last_text_s);
      }
      *last_text_s = now_s;
      // Without usage (a server that ignores include_usage) each text chunk counts as a token.
      ++r->completion_tokens;
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const Json& u = j["usage"];
    r->prompt_tokens = u.value("prompt_tokens", int64_t{0});
    r->completion_tokens = u.value("completion_tokens", int64_t{0});
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      r->cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t{0});
  }
  return true;
}

RequestRecord SendOne(httplib::Client& client, const std::string& route, const PlannedRequest& plan,
                      double timeout_s) {
  RequestRecord r;
  r.prompt_tokens = plan.prompt_len;
  const Clock::time_point start = Clock::now();
  auto since_start = [start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  int status = 0;
  std::string pending, error_body;
  double last_text_s = -1, done_s = -1;
  bool done = false, timed_out = false, stop = false;
  httplib::Request req;
  req.method = "POST";
  req.path = route;
  req.body = plan.body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = since_start();
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min(n, 4096 - error_body.size()));
      return true;
    }
    for (size_t i = 0; i < n; ++i)
      if (data[i] != '\r') pending += data[i];
    for (size_t end; !stop && (end = pending.find("\n\n")) != std::string::npos;) {
      // An event's data lines, joined by newlines; other fields (event:, id:) are ignored.
      std::string event = pending.substr(0, end), payload;
      pending.erase(0, end + 2);
      for (size_t pos = 0; pos <= event.size();) {
        size_t eol = event.find('\n', pos);
        if (eol == std::string::npos) eol = event.size();
        const std::string line = event.substr(pos, eol - pos);
        if (line.rfind("data:", 0) == 0) {
          const size_t skip = line.size() > 5 && line[5] == ' ' ? 6 : 5;
          if (!payload.empty()) payload += '\n';
          payload.append(line, skip, std::string::npos);
        }
        pos = eol + 1;
      }
      if (!payload.empty()) stop = !OnEvent(payload, now, &last_text_s, &done, &r);
      if (done && done_s < 0) done_s = now;  // the end, though the body's last bytes follow
    }
    if (now > timeout_s) timed_out = true;
    return !stop && !timed_out;
  };
  httplib::Result res = client.send(req);
  r.e2e_s = done ? done_s : since_start();
  if (!r.error.empty()) return r;
  if (timed_out || (!res && r.e2e_s >= timeout_s)) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "timed out after %g s (--timeout)", timeout_s);
    r.error = buf;
  } else if (!res && !done) {
    r.error = ClientErrorText(res.error());
  } else if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + ErrorBodyMessage(error_body);
  } else if (!done) {
    r.error = "the stream ended without data: [DONE]";
  } else {
    r.ok = true;
    if (last_text_s < 0) r.ttft_s = r.e2e_s;  // no text at all: the first token is the end
  }
  return r;
}

// The longest prompt + output (tokens) a completions request of these options can have.
int64_t LongestRequest(const LoadGeneratorOptions& o) {
  return (o.shared_prefix_share > 0 ? o.shared_prefix_len : 0) +
         MaxLength(o.input_len, o.range_ratio) + MaxLength(o.output_len, o.range_ratio);
}

std::string Center(const std::string& title, char fill) {
  const size_t width = 50, left = (width - std::min(width, title.size())) / 2;
  std::string out(left, fill);
  out += title;
  if (out.size() < width) out.append(width - out.size(), fill);
  return out + "\n";
}

std::string Row(std::string name, const std::string& value) {
  name.resize(std::max<size_t>(name.size(), 40), ' ');
  return name + " " + value + "\n";
}

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

Json ToJson(const LatencyStats& s) {
  return {{"mean", s.mean_ms}, {"median", s.median_ms}, {"p90", s.p90_ms},
          {"p99", s.p99_ms},   {"max", s.max_ms},       {"count", s.count}};
}

const char* EndpointName(BenchEndpoint e) {
  return e == BenchEndpoint::kChat ? "chat" : "completions";
}

}  // namespace

Status LoadGeneratorOptions::Validate() const {
  RETURN_IF_ERROR(ParseUrl(url).status());
  auto bad = [](const std::string& what) { return Status::InvalidArgument(what); };
  if (num_requests < 1 || num_requests > 1000000)
    return bad("--num-requests must be in [1, 1000000]");
  if (!(request_rate > 0)) return bad("--request-rate must be > 0 (inf: all at once)");
  if (max_concurrency < 0 || max_concurrency > 1024)
    return bad("--max-concurrency must be in [0, 1024] (0: no limit)");
  if (input_len < 1) return bad("--input-len must be >= 1");
  if (output_len < 1) return bad("--output-len must be >= 1");
  if (!(range_ratio >= 0 && range_ratio < 1)) return bad("--range-ratio must be in [0, 1)");
  if (!(shared_prefix_share >= 0 && shared_prefix_share <= 1))
    return bad("--shared-prefix-share must be in [0, 1]");
  if (shared_prefix_len < 1) return bad("--shared-prefix-len must be >= 1");
  if (num_prefixes < 1) return bad("--num-prefixes must be >= 1");
  if (!(timeout_s > 0 && timeout_s <= 86400)) return bad("--timeout must be in (0, 86400] seconds");
  return Status::Ok();
}

LatencyStats SummarizeLatencies(std::vector<double> seconds) {
  LatencyStats s;
  s.count = static_cast<int64_t>(seconds.size());
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  auto at = [&](double q) {
    const double pos = q / 100 * static_cast<double>(seconds.size() - 1);
    const size_t lo = static_cast<size_t>(pos), hi = std::min(lo + 1, seconds.size() - 1);
    return 1e3 * (seconds[lo] + (pos - static_cast<double>(lo)) * (seconds[hi] - seconds[lo]));
  };
  double sum = 0;
  for (double v : seconds) sum += v;
  s.mean_ms = 1e3 * sum / static_cast<double>(seconds.size());
  s.median_ms = at(50);
  s.p90_ms = at(90);
  s.p99_ms = at(99);
  s.max_ms = 1e3 * seconds.back();
  return s;
}

StatusOr<LoadGeneratorResult> RunLoadGenerator(const LoadGeneratorOptions& o) {
  RETURN_IF_ERROR(o.Validate());
  ASSIGN_OR_RETURN(const ServerUrl url, ParseUrl(o.url));
  const std::unique_ptr<httplib::Client> probe = MakeClient(url, o);
  ASSIGN_OR_RETURN(const ServedModel model, FetchModel(*probe, url, o.url, o.model));
  if (o.endpoint == BenchEndpoint::kCompletions && model.max_model_len > 0 &&
      LongestRequest(o) > model.max_model_len)
    return Status::InvalidArgument(
        "the longest request (" + std::to_string(LongestRequest(o)) +
        " prompt + output tokens) exceeds the server's max_model_len " +
        std::to_string(model.max_model_len) +
        "; lower --input-len, --output-len, --range-ratio or --shared-prefix-len");

  const std::vector<PlannedRequest> plan = PlanRequests(o, model.id);
  const std::string route =
      url.prefix +
      (o.endpoint == BenchEndpoint::kChat ? "/v1/chat/completions" : "/v1/completions");
  const int num_threads =
      std::min(o.num_requests, o.max_concurrency > 0 ? o.max_concurrency : kMaxLoadThreads);
  std::vector<RequestRecord> records(o.num_requests);
  std::atomic<int> next{0};
  std::mutex progress_mu;
  int finished = 0, in_flight = 0, peak_in_flight = 0;  // guarded by progress_mu
  const Clock::time_point t0 = Clock::now();
  // Each thread takes the next request in arrival order, waits for its arrival time and runs it
  // to its end: at most num_threads are in flight, and a request whose time came while all were
  // busy starts as soon as one is free (like vLLM's semaphore).
  auto work = [&] {
    const std::unique_ptr<httplib::Client> client = MakeClient(url, o);
    for (int i; (i = next.fetch_add(1)) < o.num_requests;) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(plan[i].arrival_s)));
      {
        std::lock_guard<std::mutex> lock(progress_mu);
        peak_in_flight = std::max(peak_in_flight, ++in_flight);
      }
      records[i] = SendOne(*client, route, plan[i], o.timeout_s);
      std::lock_guard<std::mutex> lock(progress_mu);
      --in_flight;
      ++finished;
      if (o.progress) o.progress(finished, o.num_requests);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t)
    threads.push_back(GuardedThread("a load generator client", work));
  for (std::thread& t : threads) t.join();

  LoadGeneratorResult r{.url = o.url,
                        .model = model.id,
                        .endpoint = o.endpoint,
                        .request_rate = o.request_rate,
                        .max_concurrency = o.max_concurrency,
                        .num_requests = o.num_requests,
                        .peak_in_flight = peak_in_flight,
                        .duration_s = std::chrono::duration<double>(Clock::now() - t0).count()};
  std::vector<double> ttft, itl, tpot, e2e;
  for (int i = 0; i < o.num_requests; ++i) {
    const RequestRecord& x = records[i];
    if (!x.ok) {
      ++r.failed;
      if (static_cast<int>(r.errors.size()) < kMaxErrors)
        r.errors.push_back("request " + std::to_string(i) + ": " + x.error);
      continue;
    }
    ++r.completed;
    r.input_tokens += x.prompt_tokens;
    r.output_tokens += x.completion_tokens;
    r.cached_tokens += x.cached_tokens;
    ttft.push_back(x.ttft_s);
    e2e.push_back(x.e2e_s);
    itl.insert(itl.end(), x.itl_s.begin(), x.itl_s.end());
    if (x.completion_tokens >= 2)
      tpot.push_back((x.e2e_s - x.ttft_s) / static_cast<double>(x.completion_tokens - 1));
  }
  const double d = std::max(r.duration_s, 1e-9);
  r.request_throughput = r.completed / d;
  r.output_throughput = static_cast<double>(r.output_tokens) / d;
  r.total_throughput = static_cast<double>(r.input_tokens + r.output_tokens) / d;
  r.prefix_cache_share =
      r.input_tokens > 0 ? static_cast<double>(r.cached_tokens) / r.input_tokens : 0;
  r.ttft = SummarizeLatencies(std::move(ttft));
  r.itl = SummarizeLatencies(std::move(itl));
  r.tpot = SummarizeLatencies(std::move(tpot));
  r.e2e = SummarizeLatencies(std::move(e2e));
  return r;
}

std::string FormatTable(const LoadGeneratorResult& r) {
  std::string out = Center(" Serving Benchmark Result ", '=');
  out += Row("Endpoint:", r.url + " (" + EndpointName(r.endpoint) + ")");
  out += Row("Model:", r.model);
  out += Row("Request rate (req/s):", std::isinf(r.request_rate) ? "inf" : Fixed(r.request_rate));
  out +=
      Row("Max concurrency:", r.max_concurrency > 0 ? std::to_string(r.max_concurrency) : "none");
  out += Row("Peak requests in flight:", std::to_string(r.peak_in_flight));
  out += Row("Successful requests:", std::to_string(r.completed));
  out += Row("Failed requests:", std::to_string(r.failed));
  out += Row("Benchmark duration (s):", Fixed(r.duration_s));
  out += Row("Total input tokens:", std::to_string(r.input_tokens));
  out += Row("Total generated tokens:", std::to_string(r.output_tokens));
  out += Row("Prefix-cached input tokens:",
             std::to_string(r.cached_tokens) + " (" + Fixed(100 * r.prefix_cache_share, 1) + "%)");
  out += Row("Request throughput (req/s):", Fixed(r.request_throughput));
  out += Row("Output token throughput (tok/s):", Fixed(r.output_throughput));
  out += Row("Total token throughput (tok/s):", Fixed(r.total_throughput));
  const struct {
    const char *title, *name;
    const LatencyStats& s;
  } sections[] = {{"Time to First Token", "TTFT", r.ttft},
                  {"Time per Output Token (excl. 1st token)", "TPOT", r.tpot},
                  {"Inter-token Latency", "ITL", r.itl},
                  {"End-to-end Latency", "E2EL", r.e2e}};
  for (const auto& sec : sections) {
    out += Center(sec.title, '-');
    const std::string n = sec.name;
    out += Row("Mean " + n + " (ms):", Fixed(sec.s.mean_ms));
    out += Row("Median " + n + " (ms):", Fixed(sec.s.median_ms));
    out += Row("P90 " + n + " (ms):", Fixed(sec.s.p90_ms));
    out += Row("P99 " + n + " (ms):", Fixed(sec.s.p99_ms));
  }
  out += std::string(50, '=') + "\n";
  for (const std::string& e : r.errors) out += "error: " + e + "\n";
  return out;
}

Json ToJson(const LoadGeneratorResult& r) {
  return {{"url", r.url},
          {"model", r.model},
          {"endpoint", EndpointName(r.endpoint)},
          // JSON has no infinity: null means all requests were sent at once.
          {"request_rate", std::isinf(r.request_rate) ? Json(nullptr) : Json(r.request_rate)},
          {"max_concurrency", r.max_concurrency > 0 ? Json(r.max_concurrency) : Json(nullptr)},
          {"peak_in_flight", r.peak_in_flight},
          {"num_requests", r.num_requests},
          {"duration_s", r.duration_s},
          {"completed", r.completed},
          {"failed", r.failed},
          {"errors", r.errors},
          {"total_input_tokens", r.input_tokens},
          {"total_output_tokens", r.output_tokens},
          {"total_cached_tokens", r.cached_tokens},
          {"prefix_cache_share", r.prefix_cache_share},
          {"request_throughput", r.request_throughput},
          {"output_throughput", r.output_throughput},
          {"total_token_throughput", r.total_throughput},
          {"ttft_ms", ToJson(r.ttft)},
          {"tpot_ms", ToJson(r.tpot)},
          {"itl_ms", ToJson(r.itl)},
          {"e2e_ms", ToJson(r.e2e)}};
}

}  // namespace epserve::serve
