#pragma once
// Cluster: a hierarchy of levels, innermost first, as in PipeDream's optimizer (docs/design.md).
// Worker w's position at level k is (w / prod(fan_out[0..k-1])) % fan_out[k]; two workers
// talk over the innermost level that contains both.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/json_doc.h"
#include "core/units.h"

namespace pt::plan {

struct Level {
  std::string name;
  int fan_out = 1;             // units of the level below grouped at this level
  double bandwidth_gbps = 0;   // between units of the level below (1 Gbps = 1.25e8 B/s)
  // What each message costs besides its bytes (an alpha-beta model: a transfer is one message, a
  // ring step is one): the transport's and the kernel's work per message, as `calibrate`
  // measures it. 0 for a typed cluster unless given.
  double latency_us = 0;
  double bandwidth_bytes_per_s() const { return bandwidth_gbps * kBytesPerSecPerGbps; }
};

// One phase of an all-reduce: `bytes` over every member's link of `level`, each way, in `steps`
// equal steps, in rings that run side by side (each step of a ring waits for the one before).
struct AllreducePhase {
  int level = -1;
  double bytes = 0;
  int steps = 1;
  double reduced_bytes = 0;  // what each member sums into its own in the phase (its reduce-scatter)
  std::vector<std::vector<int>> rings;  // one (the group) for a ring; the units, or the shard groups
};

struct Cluster {
  std::vector<Level> levels;             // innermost first
  int64_t memory_bytes_per_worker = 0;   // 0 = unlimited
  std::string source;                    // where it was given ("'c.json'", "--workers '4,4'"), for messages
  // How a group all-reduces (cluster field "allreduce", flag --allreduce): kRing, one ring over
  // every member; kHierarchical, where a group has k > 1 members in each of m > 1 units of the
  // level below its own and that is faster: an all-reduce inside each unit, then member i of
  // every unit all-reduces the i-th of k shards with its m counterparts, then each unit gathers
  // the shards (the runtime runs exactly these three collectives).
  enum class Allreduce { kRing, kHierarchical };
  Allreduce allreduce = Allreduce::kRing;
  // The host's time to sum received gradient bytes into its own, per MiB (cluster field
  // "reduce_us_per_mib"; `pipetrain calibrate` measures it from its all-reduces): a ring's
  // reduce-scatter adds (n - 1) / n of the bytes on every member, between its messages. 0 for a
  // typed cluster: free, as before.
  double reduce_us_per_mib = 0;
  double reduce_ms(double bytes) const { return bytes / (1 << 20) * reduce_us_per_mib * 1e-3; }
  // What each step of an all-reduce's rings costs the host (cluster field "allreduce_step_us";
  // calibrate measures it with reduce_us_per_mib): with every member sending, receiving and
  // summing at once, a step waits for all of them to be scheduled. The host waits while the
  // step's message is on the wire, so a message at least as long hides it (ring_step_ms): 16 KiB
  // over 16 gloo processes on 2 cores took 72-92 ms where the links give 16-26, while 1 and 16
  // MiB came within 3% of the links alone.
  double allreduce_step_us = 0;
  // The host's time per action a worker runs (a forward, a backward, a step) besides its
  // layers' compute: the runtime's dispatch, its stash and weight-version bookkeeping, the
  // loss's host side (cluster field "action_us"; calibrate measures it on a pipeline of layers
  // that compute nothing). 0 for a typed cluster.
  double action_us = 0;
  double action_ms() const { return action_us * 1e-3; }
  // What a worker process holds besides its tensors, as the OS counts it (cluster field
  // "process_bytes"; calibrate measures it): LibTorch's code and data, the transport's and the
  // runtime's buffers. The memory model adds it to each process (schedule/memory.h), so that a
  // memory cap bounds a worker's peak RSS but for the data it loads and, gloo workers on one
  // host, their transfers' shared memory (train adds both). 0 for a typed cluster: tensors alone.
  int64_t process_bytes = 0;
  // Workers sharing one host's cores (threads, or gloo ranks on one machine): core_rates[n - 1] is
  // the rate of each of n computes running at once, relative to one alone (cluster field
  // "core_rates"; calibrate measures it: n threads each training mnist-cnn's layers on a
  // microbatch of 16). Here 2 computes on the 2 cores ran at 0.87 each, not 1 (the caches and
  // memory they share). Empty: min(1, cores / n), the kernel's even time-slicing alone.
  std::vector<double> core_rates;
  // What one core gives the workers pinned to it together, against one of them alone on it
  // (cluster field "core_share"; calibrate measures it: two of its workers, as its transport runs
  // them, pinned to one core at once): the switching between them. Threads of one process lose
  // little (0.98-1.0 here); two gloo processes on one core ran at 0.446 of one alone each, 0.89
  // in all (the address spaces they switch between). 1: nothing lost. The simulator's cores
  // pinned to (SimOptions::placement) take it where they hold more than one worker.
  double core_share = 1;
  // The workers are threads or processes of one host sharing this many cores (cluster field
  // "host_cores"; calibrate writes it where it ran every worker on this machine): the simulator
  // shares them out as SimOptions::cores says, so plan, simulate and compare weigh the run this
  // host will make. 0 (a typed cluster, or ranks spread over machines): a device per worker.
  int host_cores = 0;
  // The rate of each of `running` computes on `cores` cores: core_rates where measured, on
  // host_cores cores (beyond them, the last one's shared out as min(1, cores / running) shares
  // the cores), else min(1, cores / running).
  double core_rate(int running, int cores) const;
  // How `pipetrain calibrate` measured the levels (link_fit.h: when, over which transport, every
  // point and fit, all-reduces against the model); null for a typed cluster. Carried through the
  // file as written; the cost engine reads only the levels.
  json calibration;
  // The transport calibrate measured over (calibration.transport: "threads" or "gloo"), whose
  // process_bytes, hand-over and all-reduces these are; empty for a typed cluster.
  std::string calibrated_over() const;

  int workers() const;
  // Index of the innermost level that contains both workers (a != b).
  int level_between(int a, int b) const;
  // The cost engine's network rules (docs/design.md, "One cost model"): every worker has, per level,
  // a full-duplex link of that level's bandwidth; a group talks over the innermost level
  // holding all of it. -1 for fewer than two distinct workers (no link used).
  int group_level(const std::vector<int>& group) const;
  int range_level(int lo, int hi) const;  // the group lo..hi (units are ranges of ids)
  // Time of `bytes` over one link of `level` at its rate, latency left out (0 for level -1):
  // what bytes summed over many messages cost.
  double transfer_ms(int level, double bytes) const;
  // One message of `bytes` over one link of `level`: its latency and its bytes (0 for level -1).
  double message_ms(int level, double bytes) const;
  double latency_ms(int level) const { return level < 0 ? 0 : levels[level].latency_us * 1e-3; }
  // The units a hierarchical all-reduce of `group` (sorted) splits it into, each unit's members
  // in order; empty when the group all-reduces as one ring.
  std::vector<std::vector<int>> allreduce_units(const std::vector<int>& group) const;
  // The phases of an all-reduce of `bytes` among `group`: a ring's one, 2 (n - 1) / n x bytes on
  // the group's level in 2 (n - 1) steps; a hierarchical one's three, 2 (k - 1) / k x bytes inside
  // the units, 2 (m - 1) / m x bytes / k on the group's level, (k - 1) / k x bytes inside the
  // units. Empty for fewer than two workers.
  std::vector<AllreducePhase> allreduce_phases(const std::vector<int>& group, double bytes) const;
  // One step of a ring of `unit` (a phase's figures for an all-reduce of one byte) when the
  // all-reduce carries `bytes`: the level's latency, the longer of the host's step and the step's
  // message at the level's rate, and the step's share of the summing (reduce_ms). The simulator
  // books each step so; allreduce_ms sums them.
  double ring_step_ms(const AllreducePhase& unit, double bytes) const;
  // A ring's all-reduce as calibrate measured it, where the model's terms fall short: its steps
  // take the measured time over the modelled one (never below 1, so the model stays a lower
  // bound) at the all-reduce's size, between measured sizes by log(bytes), held beyond them.
  // gloo's 1 MiB all-reduce over 2 processes took 2.9-3.9 ms where a line through 16 KiB's
  // 0.3-0.7 and 16 MiB's 15-22 gives 1.2-1.8, which no latency, rate and host terms bend for.
  // Single rings only (a hierarchical all-reduce's phases are not measured apart), by level and
  // steps; derived from the cluster file's "calibration" record (correct_rings), not written.
  struct RingCorrection {
    int level = 0, steps = 0;
    std::vector<std::pair<double, double>> bytes_factor;  // by bytes
  };
  std::vector<RingCorrection> ring_corrections;
  double ring_correction(const AllreducePhase& unit, double bytes) const;
  // Sets ring_corrections from all-reduces measured as (group, bytes, ms), against `terms`: this
  // cluster's shape with the latency, rate and host terms calibrate wrote beside them (edits to
  // the file's levels or --latency-us later scale the model the factors multiply, not the
  // factors: judged against the edited terms, 500 us more a message made dp 7% faster); any set
  // before are dropped first.
  void correct_rings(const std::vector<std::tuple<std::vector<int>, double, double>>& measured, const Cluster& terms);
  // Phases one after another, `steps` steps each: the all-reduce of `bytes` whose phases for one
  // byte are `unit_phases` (allreduce_phases(group, 1.0), computed once for many sizes).
  double allreduce_ms(const std::vector<AllreducePhase>& unit_phases, double bytes) const;
  double allreduce_ms(const std::vector<int>& group, double bytes) const;
  // Its time per byte at the links' rates and the summing, latency and host steps left out: a
  // lower bound for every size.
  double allreduce_ms_per_byte(const std::vector<int>& group) const;
  double range_allreduce_ms(int lo, int hi, double bytes) const;  // the group lo..hi, latency left out
  // The runtime's gradient all-reduce bucket unless told otherwise (train --bucket-mb): PyTorch
  // DDP's 25 MiB. Each bucket is reduced during the backward once its gradients are final.
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;
  double bandwidth_bytes_per_s(int a, int b) const;
  // Workers in one unit of level k's children (1 for k = 0): PipeDream's `w`.
  int workers_per_unit_below(int level) const;
  std::string describe() const;  // "4x4 (server 96 Gbps, network 10 Gbps)", ", hierarchical all-reduce" when so

  static Cluster flat(int workers, double bandwidth_gbps, int64_t memory_bytes = 0);
};

// Round-robin replication (1F1B-RR, as PipeDream runs it): minibatch k runs on replica
// k % replicas of every stage, so replica a of a stage with m replicas sends to replica b of
// the next stage with n replicas in the minibatches k = a (mod m), k = b (mod n).
inline int replica_for(int64_t minibatch, int replicas) { return static_cast<int>(minibatch % replicas); }

inline constexpr int kClusterVersion = 1;
// The most workers a cluster or a plan may have: bounds every count read from a file before
// it sizes a vector or narrows to int.
inline constexpr int kMaxWorkers = 1000000;
// A link's rate, Gbit/s: 1 kbit/s to 1 Ebit/s. Outside, the figures lose their meaning
// (1e-300 Gbit/s printed data parallelism at 166029052800000007587877496519201856785955101853958846684263294 ms
// per minibatch).
inline constexpr double kMinBandwidthGbps = 1e-6, kMaxBandwidthGbps = 1e9;

json to_json(const Cluster& c);
Cluster cluster_from_json(const json& doc, const std::string& source);
Cluster read_cluster(const std::string& path);
// The CLI shorthand: --workers 4,4 --bandwidth-gbps 80,10 (innermost first).
Cluster cluster_from_shorthand(const std::string& workers, const std::string& bandwidth_gbps,
                               int64_t memory_bytes = 0);

// The cluster as every subcommand's flags give it: --cluster FILE, or the shorthand.
struct ClusterFlags {
  std::string file;            // --cluster FILE
  std::string workers;         // --workers 4 or 4,4
  std::string bandwidth_gbps;  // --bandwidth-gbps 1 or 80,10
  std::string allreduce;       // --allreduce ring|hierarchical (over the file's, when both)
  std::string latency_us;      // --latency-us 5 or 5,20: per message, per level (over the file's, when both)
  std::string action_us;       // --action-us 20: the host's time per action (over the file's, when both)
};
// Throws UsageError naming the flags when neither form, both, or half the shorthand is given.
Cluster cluster_from_flags(const ClusterFlags& f);
// "ring" or "hierarchical"; UsageError/FormatError naming `where` and the value otherwise.
Cluster::Allreduce parse_allreduce(const std::string& name, const std::string& where);
const char* allreduce_name(Cluster::Allreduce a);

}  // namespace pt::plan
