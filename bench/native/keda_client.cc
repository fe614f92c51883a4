// A native gRPC client for kvpilot's KEDA external scaler, as KEDA's own (grpc-go) client sees the server: compiled,
// one channel, no interpreter between the socket and the clock. Built on demand by bench/_native.py (protoc +
// grpc_cpp_plugin + g++ against Debian's libgrpc++-dev); driven by bench/keda.py and bench/fleet_scale.py.
//
// Two modes:
//
//   keda_client --port P rounds --objects N --interval S --seconds S --rounds R [--seed K]
//     bench/keda.py's workload: N ScaledObjects share ONE channel; each polls at a random phase once per
//     `interval` (paced phase, `seconds` long: latency per call), then all N call back to back (saturated phase,
//     seconds/2: calls/s); for kvpilot's GetMetrics and grpc's Health.Check alternately, `rounds` times. One thread
//     drives everything through one completion queue (the async API), so the client costs little CPU of its own.
//     One line per round and method:
//       round R method M p50_ms X p99_ms Y saturated_calls_s Z calls N errors E paced_cpu_s C
//     (C: this client's CPU seconds, all threads, during that paced phase)
//
//   keda_client --port P schedule --period S --namespace NS --name NAME --out FILE
//     bench/fleet_scale.py's probe: blocking calls on one channel on a fixed schedule (slots half a period apart:
//     GetMetrics, Health.Check, GetMetrics, nothing), until stdin closes; then writes `method sent done code` lines
//     (CLOCK_MONOTONIC seconds, as Python's time.monotonic) to FILE.
//
// Latencies are measured here with std::chrono::steady_clock, from just before the call starts to when its
// completion is seen.

#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "externalscaler.grpc.pb.h"
#include "health.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using externalscaler::ExternalScaler;
using externalscaler::GetMetricsRequest;
using externalscaler::GetMetricsResponse;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr int kGetMetrics = 0;
constexpr int kHealth = 1;
const char* const kMethodNames[] = {"GetMetrics", "Health.Check"};
constexpr auto kCallTimeout = std::chrono::seconds(30);

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "keda_client: %s\n"
               "usage: keda_client --port P rounds --objects N --interval S --seconds S --rounds R [--seed K]\n"
               "       keda_client --port P schedule --period S --namespace NS --name NAME --out FILE\n",
               why.c_str());
  std::exit(2);
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU seconds (user + system) this process has used, all its threads (grpc's own included).
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(usage.ru_utime) + s(usage.ru_stime);
}

// bench/keda.py's quantile: the value at index min(n - 1, int(q * n)) of the sorted values.
double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  size_t i = std::min(values.size() - 1, static_cast<size_t>(q * static_cast<double>(values.size())));
  return values[i];
}

// The ScaledObjectRef bench/keda.py sends for ScaledObject i (its server publishes decisions for these).
GetMetricsRequest MetricsRequest(const std::string& ns, const std::string& name) {
  GetMetricsRequest request;
  auto* ref = request.mutable_scaledobjectref();
  ref->set_name(name);
  ref->set_namespace_(ns);
  (*ref->mutable_scalermetadata())["scalerAddress"] = "kvpilot:9090";
  request.set_metricname("kvpilot-replicas");
  return request;
}

struct Call {
  grpc::ClientContext ctx;
  grpc::Status status;
  GetMetricsResponse metrics;
  HealthCheckResponse health;
  std::unique_ptr<grpc::ClientAsyncResponseReader<GetMetricsResponse>> metrics_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<HealthCheckResponse>> health_reader;
  int object = 0;
  Clock::time_point planned;  // when the poll was due (paced: the next one is due one interval later)
  Clock::time_point start;
};

class AsyncClient {
 public:
  AsyncClient(const std::shared_ptr<grpc::Channel>& channel, int objects)
      : scaler_(ExternalScaler::NewStub(channel)), health_(Health::NewStub(channel)) {
    requests_.reserve(objects);
    for (int i = 0; i < objects; ++i) {
      requests_.push_back(MetricsRequest("team-" + std::to_string(i % 20), "model-" + std::to_string(i)));
    }
  }
  ~AsyncClient() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  }

  void Start(int method, int object, Clock::time_point planned) {
    auto* call = new Call;
    call->object = object;
    call->planned = planned;
    call->ctx.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    call->start = Clock::now();
    if (method == kGetMetrics) {
      call->metrics_reader = scaler_->AsyncGetMetrics(&call->ctx, requests_[object], &cq_);
      call->metrics_reader->Finish(&call->metrics, &call->status, call);
    } else {
      call->health_reader = health_->AsyncCheck(&call->ctx, check_, &cq_);
      call->health_reader->Finish(&call->health, &call->status, call);
    }
  }

  // The next finished call, or nullptr if none finished by `until`.
  std::unique_ptr<Call> Next(Clock::time_point until) {
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now()).count();
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(std::max<int64_t>(0, wait), GPR_TIMESPAN));
    void* tag = nullptr;
    bool ok = false;
    if (cq_.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return nullptr;
    return std::unique_ptr<Call>(static_cast<Call*>(tag));
  }

  // Every ScaledObject polls once per `interval` at a random phase for `seconds`; latency per call, in seconds.
  std::vector<double> Paced(int method, int objects, double interval, double seconds, std::mt19937_64& rng,
                            int& errors) {
    using Due = std::pair<Clock::time_point, int>;
    std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due;
    auto t0 = Clock::now();
    auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    auto step = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
    std::uniform_real_distribution<double> phase(0.0, interval);
    for (int i = 0; i < objects; ++i) {
      due.emplace(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(phase(rng))), i);
    }
    std::vector<double> latencies;
    latencies.reserve(static_cast<size_t>(objects * (seconds / interval + 1)));
    int in_flight = 0;
    while (!due.empty() || in_flight > 0) {
      auto now = Clock::now();
      while (!due.empty() && due.top().first <= now) {
        auto [planned, i] = due.top();
        due.pop();
        Start(method, i, planned);
        ++in_flight;
      }
      auto call = Next(due.empty() ? now + std::chrono::seconds(60) : due.top().first);
      if (!call) continue;
      auto done = Clock::now();
      --in_flight;
      latencies.push_back(Seconds(done - call->start));
      if (!call->status.ok()) ++errors;
      auto next = call->planned + step;  // one poller never overlaps itself: the next poll waits for this answer
      if (next < deadline) due.emplace(next, call->object);
    }
    return latencies;
  }

  // All ScaledObjects call back to back for `seconds`: calls/s (finished calls over the time until the last).
  double Saturated(int method, int objects, double seconds, int& errors) {
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    for (int i = 0; i < objects; ++i) Start(method, i, start);
    int in_flight = objects;
    long done = 0;
    while (in_flight > 0) {
      auto call = Next(Clock::now() + std::chrono::seconds(60));
      if (!call) continue;
      --in_flight;
      ++done;
      if (!call->status.ok()) ++errors;
      if (Clock::now() < deadline) {
        Start(method, call->object, start);
        ++in_flight;
      }
    }
    return static_cast<double>(done) / Seconds(Clock::now() - start);
  }

  // One call per ScaledObject, all at once: the connection up and the server's caches warm.
  void WarmUp(int method, int objects, int& errors) {
    for (int i = 0; i < objects; ++i) Start(method, i, Clock::now());
    for (int left = objects; left > 0;) {
      auto call = Next(Clock::now() + std::chrono::seconds(60));
      if (!call) continue;
      --left;
      if (!call->status.ok()) ++errors;
    }
  }

 private:
  std::unique_ptr<ExternalScaler::Stub> scaler_;
  std::unique_ptr<Health::Stub> health_;
  std::vector<GetMetricsRequest> requests_;
  HealthCheckRequest check_;
  grpc::CompletionQueue cq_;
};

int Rounds(const std::shared_ptr<grpc::Channel>& channel, int objects, double interval, double seconds, int rounds,
           uint64_t seed) {
  std::mt19937_64 rng(seed);
  AsyncClient client(channel, objects);
  int warm_errors = 0;
  for (int method : {kGetMetrics, kHealth}) client.WarmUp(method, objects, warm_errors);
  if (warm_errors > 0) std::fprintf(stderr, "keda_client: %d errors while warming up\n", warm_errors);
  for (int r = 1; r <= rounds; ++r) {
    for (int method : {kGetMetrics, kHealth}) {
      int errors = 0;
      double cpu0 = CpuSeconds();
      auto latencies = client.Paced(method, objects, interval, seconds, rng, errors);
      double paced_cpu = CpuSeconds() - cpu0;
      double rate = client.Saturated(method, objects, seconds / 2, errors);
      std::printf(
          "round %d method %s p50_ms %.4f p99_ms %.4f saturated_calls_s %.1f calls %zu errors %d paced_cpu_s %.4f\n", r,
          kMethodNames[method], Quantile(latencies, 0.50) * 1e3, Quantile(latencies, 0.99) * 1e3, rate,
          latencies.size(), errors, paced_cpu);
      std::fflush(stdout);
    }
  }
  return 0;
}

int Schedule(const std::shared_ptr<grpc::Channel>& channel, double period, const std::string& ns,
             const std::string& name, const std::string& out) {
  std::atomic<bool> closed{false};
  std::thread eof([&closed] {
    char buf[4096];
    while (std::fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    closed = true;
  });
  auto scaler = ExternalScaler::NewStub(channel);
  auto health = Health::NewStub(channel);
  const GetMetricsRequest metrics_request = MetricsRequest(ns, name);
  const HealthCheckRequest health_request;
  struct Record {
    int method;
    double sent, done;
    const char* code;
  };
  std::vector<Record> records;
  records.reserve(1 << 16);
  const int schedule[] = {kGetMetrics, kHealth, kGetMetrics, -1};  // slots half a period apart
  auto half = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(period / 2));
  auto next_at = Clock::now();
  for (long slot = 0; !closed; ++slot) {
    int method = schedule[slot % 4];
    if (method >= 0) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
      grpc::Status status;
      auto sent = Clock::now();
      if (method == kGetMetrics) {
        GetMetricsResponse response;
        status = scaler->GetMetrics(&ctx, metrics_request, &response);
      } else {
        HealthCheckResponse response;
        status = health->Check(&ctx, health_request, &response);
      }
      auto done = Clock::now();
      records.push_back({method, Seconds(sent.time_since_epoch()), Seconds(done.time_since_epoch()),
                         CodeName(status.error_code())});
    }
    next_at = std::max(next_at + half, Clock::now());  // behind: skip, never burst
    std::this_thread::sleep_until(next_at);
  }
  eof.join();
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) {
    std::perror(out.c_str());
    return 1;
  }
  for (const auto& r : records) std::fprintf(f, "%s %.9f %.9f %s\n", kMethodNames[r.method], r.sent, r.done, r.code);
  return std::fclose(f) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opts;
  std::string mode;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) {
      if (i + 1 >= argc) Usage("no value for " + arg);
      opts[arg.substr(2)] = argv[++i];
    } else if (mode.empty()) {
      mode = arg;
    } else {
      Usage("unexpected argument " + arg);
    }
  }
  auto need = [&opts](const std::string& key) -> std::string {
    auto it = opts.find(key);
    if (it == opts.end()) Usage("--" + key + " is required");
    return it->second;
  };
  std::string target = (opts.count("host") ? opts["host"] : "127.0.0.1") + ":" + need("port");
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60))) {
    std::fprintf(stderr, "keda_client: no connection to %s within 60 s\n", target.c_str());
    return 1;
  }
  if (mode == "rounds") {
    return Rounds(channel, std::stoi(need("objects")), std::stod(need("interval")), std::stod(need("seconds")),
                  std::stoi(need("rounds")), opts.count("seed") ? std::stoull(opts["seed"]) : std::random_device{}());
  }
  if (mode == "schedule") {
    return Schedule(channel, std::stod(need("period")), need("namespace"), need("name"), need("out"));
  }
  Usage(mode.empty() ? "no mode" : "unknown mode " + mode);
}
