#include "job/trace_gather.h"

#include "core/error.h"
#include "runtime/shm_region.h"

namespace pt::job {

namespace {

// Below the loss lists' tags (worker_runner.cpp: -2^28 down to -(2^28 + 2^20 - 1)) and the
// evaluation's (from -1 down), inside the gloo transport's range (|tag| < 2^29).
constexpr int64_t kBootTag = -(int64_t{1} << 28) - (int64_t{1} << 20) - 1;
constexpr int64_t kEventsTag = kBootTag - 1, kPausesTag = kBootTag - 2;
constexpr int64_t kFields = 8;  // kind, stage, microbatch, chunk, peer, start, end, bytes

torch::Tensor bytes_of(const std::string& s) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(s.size())}, torch::kUInt8);
  std::copy(s.begin(), s.end(), t.data_ptr<uint8_t>());
  return t;
}

std::string text_of(const torch::Tensor& t) {
  const auto* p = t.contiguous().data_ptr<uint8_t>();
  return std::string(p, p + t.numel());
}

torch::Tensor events_of(const std::vector<schedule::TraceEvent>& events) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(events.size()), kFields}, torch::kDouble);
  double* row = t.data_ptr<double>();
  for (const auto& e : events) {
    const schedule::Action& a = e.action;
    for (double v : {static_cast<double>(a.kind), double(a.stage), double(a.microbatch), double(a.chunk),
                     double(a.peer), e.start_ms, e.end_ms, static_cast<double>(e.bytes)})
      *row++ = v;
  }
  return t;
}

std::vector<schedule::TraceEvent> events_from(const torch::Tensor& t, int worker) {
  PT_CHECK(t.dim() == 2 && t.size(1) == kFields && t.scalar_type() == torch::kDouble, "worker ", worker,
           "'s trace arrived as a tensor of ", t.sizes(), " ", t.scalar_type());
  std::vector<schedule::TraceEvent> out(static_cast<size_t>(t.size(0)));
  const double* row = t.contiguous().data_ptr<double>();
  for (auto& e : out) {
    schedule::Action& a = e.action;
    a.worker = worker;
    a.kind = static_cast<schedule::ActionKind>(static_cast<int>(row[0]));
    a.stage = static_cast<int>(row[1]), a.microbatch = static_cast<int>(row[2]);
    a.chunk = static_cast<int>(row[3]), a.peer = static_cast<int>(row[4]);
    e.start_ms = row[5], e.end_ms = row[6], e.bytes = static_cast<int64_t>(row[7]);
    row += kFields;
  }
  return out;
}

}  // namespace

int gather_traces(runtime::Transport& transport, int reporting, schedule::Trace& trace) {
  const int rank = transport.rank();
  const std::string boot = runtime::SharedRegion::boot_id();
  if (rank != reporting) {
    auto& pauses = trace.pauses;
    torch::Tensor p = torch::empty({static_cast<int64_t>(pauses.size()), 2}, torch::kDouble);
    for (size_t i = 0; i < pauses.size(); ++i) p[i][0] = pauses[i].first, p[i][1] = pauses[i].second;
    // Sent whole, each waited for: the reporter takes them in the order of the workers.
    transport.isend(bytes_of(boot), reporting, kBootTag)->wait();
    transport.isend(events_of(trace.workers[rank]), reporting, kEventsTag)->wait();
    transport.isend(p, reporting, kPausesTag)->wait();
    return 1;
  }
  int held = 1;
  for (int w = 0; w < transport.world_size(); ++w) {
    if (w == rank) continue;
    std::string theirs = text_of(transport.irecv(w, kBootTag)->wait());
    torch::Tensor events = transport.irecv(w, kEventsTag)->wait();
    torch::Tensor p = transport.irecv(w, kPausesTag)->wait().contiguous();
    if (boot.empty() || theirs != boot) continue;
    trace.workers[w] = events_from(events, w);
    std::vector<std::pair<double, double>> pauses;
    for (int64_t i = 0; i < p.size(0); ++i) pauses.emplace_back(p[i][0].item<double>(), p[i][1].item<double>());
    trace.pauses = schedule::common_pauses(trace.pauses, pauses);
    ++held;
  }
  return held;
}

}  // namespace pt::job
