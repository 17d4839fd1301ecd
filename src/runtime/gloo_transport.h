#pragma once
// The `gloo` transport (docs/design.md, "Runtime"): one process per worker, tensors over TCP through
// LibTorch's c10d ProcessGroupGloo, rendezvous through pipetrain's JobStore served by rank 0
// (job_store.h: the job's address only, the job's secret proven both ways). Three files by
// concern: gloo_environment.cpp (which worker of which job, from the environment),
// gloo_transport.cpp (rendezvous, agreement, point-to-point), gloo_collectives.cpp (groups and
// all-reduces, ring and hierarchical).
//
// Wire format of one transfer: a fixed-size int64 header [dtype, ndim, dims...] under gloo tag
// 2g, then the contiguous data under tag 2g + 1, where g = zigzag(tag) maps the worker's int64
// tags (negative ones are evaluation) one-to-one onto gloo's non-negative 31-bit tag space:
// g = 2t for t >= 0, -2t - 1 for t < 0. The receiver learns shape and dtype from the header.
//
// Overlap: isend posts both messages on gloo's device thread and returns; irecv posts the
// header's receive and queues the rest on the peer's receiving thread (one per peer, receives in
// the order posted, which is the order the worker takes them): it waits for the header,
// allocates and receives the data, so a transfer proceeds while the worker computes. Only a
// channel's first transfers and evaluations take this path (isend_known/irecv_known after).
// Every wait has a deadline (timeout_s) and names the peer and tag.
//
// Ingress order: gloo holds a payload at its sender until the receiver posts its receive, so
// the receiving threads post data receives one at a time, first header first. Left to TCP, fifteen
// replicas sending to one worker at once share its link and all finish at the end of the burst;
// one at a time, the first input arrives after 1/15 of it and compute overlaps the rest (VGG-16
// 15-1 on the emulated 4x4 cluster: 45 ms per minibatch with TCP sharing, as the simulator's
// one-transfer-at-a-time link predicts with the gate).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "core/json_doc.h"
#include "plan/cluster.h"
#include "runtime/comm_thread.h"
#include "runtime/shm_allreduce.h"
#include "runtime/shm_channel.h"
#include "runtime/transport.h"

namespace pt::runtime {

struct GlooConfig {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 30;              // longest wait for a transfer or an all-reduce
  double rendezvous_timeout_s = 300;  // longest wait for every worker to start (loading data)
  std::string secret;                 // the job's (job_store.h); every worker has the same
  plan::Cluster cluster;              // its allreduce_units split an all-reduce; no levels: one ring
  // All-reduces and transfers of workers on one host through shared memory (shm_allreduce.h,
  // shm_channel.h); off for a group or pair where any of its workers' PIPETRAIN_SHARED_MEMORY is 0.
  bool shared_memory = true;
};

// From RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, our launcher) or, when RANK is not set,
// OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (mpirun; MASTER_ADDR defaults to 127.0.0.1 and
// MASTER_PORT to 29500), and the job secret (job_secret_from_env). ConfigError names the
// variable and its value.
GlooConfig gloo_config_from_env();
// True when this process was started as one worker of a gloo job (RANK or OMPI_COMM_WORLD_RANK).
bool gloo_rank_in_env();
// The job's size as WORLD_SIZE (or OMPI_COMM_WORLD_SIZE, or another MPI's PMI_SIZE) says, before
// any other check; 0 when none is set to a number.
int gloo_world_size_in_env();
// The job's workers on this host as LOCAL_WORLD_SIZE (torchrun) or OMPI_COMM_WORLD_LOCAL_SIZE
// (mpirun) says; 0 when neither is set to a number.
int gloo_local_world_size_in_env();

// A worker started apart (torchrun, mpirun, by hand) that fails before it joins the rendezvous
// tells it `what`, so that the others stop at once naming it: they waited out
// --rendezvous-timeout (300 s by default), saying only that it had not joined. Worker 0, which
// serves the rendezvous, serves it until the others have read it (10 s at most); another waits
// up to `wait_s` for worker 0 to serve it. Nothing unless started_apart() (launcher.h): pipetrain's
// own launcher stops the others itself.
void tell_rendezvous_of_failure(const std::string& what, double wait_s);

// This host's address on the route to the master (gloo's devices bind to it, so peers on other
// hosts reach this one); the master's own when the route cannot be found.
std::string local_address_towards(const std::string& master, int port);

// Gloo tag of a worker tag (see the file comment); TransportError when out of range.
int gloo_tag(int64_t tag, bool data);

class GlooTransport : public Transport {
 public:
  explicit GlooTransport(const GlooConfig& config);
  ~GlooTransport() override;  // aborts transfers still in flight and joins the receiving threads

  int rank() const override { return config_.rank; }
  int world_size() const override { return config_.world_size; }
  std::shared_ptr<PendingTransfer> isend(const torch::Tensor& t, int peer, int64_t tag) override;
  std::shared_ptr<PendingTransfer> irecv(int peer, int64_t tag) override;
  // The payload alone, no header, no receiving thread and no ingress gate: the receive is posted for
  // the payload at once, so gloo moves it as soon as it is sent.
  std::shared_ptr<PendingTransfer> isend_known(const torch::Tensor& t, int peer, int64_t tag) override;
  std::shared_ptr<PendingTransfer> irecv_known(int peer, int64_t tag, const Known& k) override;
  void allreduce_sum(std::vector<torch::Tensor>& tensors, const std::vector<int>& group) override;
  // Started on the group's gloo thread (one collective at a time, in the order started). Where
  // the cluster splits the group into units (hierarchical), on the group's collective thread:
  // an all-reduce inside this worker's unit, one of its shard with the members at the same
  // place in the other units, and an all-gather of the shards inside the unit.
  std::shared_ptr<PendingTransfer> allreduce_start(torch::Tensor t, const std::vector<int>& group) override;
  void abort(const std::string& why) override;
  // Through the rendezvous store (gloo_rendezvous.cpp): each worker counts itself in under the
  // pause's number and polls the count, and the workers' progress (a store request each a
  // quarter of the deadline, at most a second apart) moves the deadline on. gloo's own collectives keep the deadline their groups
  // were made with.
  void pause_barrier() override;
  void progress() override;
  std::chrono::steady_clock::duration progress_interval() const;  // progress()'s least between store requests
  // Posts `why` in the store, once, for the other workers' pause_barrier (abort() calls it).
  void tell_store_of_abort(const std::string& why);

  // After a failure: aborts, joins the receiving threads and leaks the process groups, whose
  // destructors would wait for collectives a dead peer never finishes; the process then exits.
  void abandon(const std::string& why);

  // Creates the process groups of these worker groups now (each sorted, containing rank()), and
  // of the units and shard groups a hierarchical all-reduce of each uses;
  // they are otherwise created on first use. Only members take part, so it need not be collective.
  // Every worker publishes `digest` (any JSON the caller builds: the job's, job_digest.h) through
  // the rendezvous store and compares all of them with worker 0's: ConfigError naming each
  // innermost field that differs, both values and the workers, raised on every worker alike,
  // before anything trains.
  void check_agreement(const json& digest);
  // After check_agreement: every worker runs on this host (one kernel, network and pid
  // namespace, as shared memory needs; SharedRegion::host_key), so their computes share its
  // cores. Workers started apart on several hosts do not: a prediction that shared the reporting
  // host's 2 cores among 2 hosts' workers read 1069 samples/s for a run of 1810.
  bool one_host() const { return one_host_; }
  // Every worker announces itself at rendezvous and waits for the others; every 10 s it names
  // the workers still missing, and after the rendezvous timeout fails naming them.
  void join_all();
  // Until every worker r has set key(r) in the store: every 10 s it names the workers still
  // missing (`what` they have not done), and after `limit` fails naming them; `each_look` runs at
  // each look (join_all's check for a worker that failed before joining).
  void await_every_worker(const std::function<std::string(int)>& key, const std::string& what,
                          std::chrono::milliseconds limit, const std::function<void()>& each_look);
  void prepare_groups(const std::vector<std::vector<int>>& groups);
  // Makes a shared-memory channel (shm_channel.h) for each pair (a < b) that holds this worker and
  // shares its host; every worker lists the pairs in one order. Transfers between the workers of
  // a pair without one go through gloo.
  void prepare_channels(const std::vector<std::pair<int, int>>& pairs);
  bool has_channel(int peer) const;
  // Whether this group's all-reduces of float and double tensors go through shared memory
  // (shm_allreduce.h): its workers share this host and none turned it off. Collective on first use.
  bool shares_memory(const std::vector<int>& group) { return shared_memory_for(group) != nullptr; }

  // Shared by the transfers: abort state, in-flight gloo work, the deadline.
  struct State {
    std::mutex mu;
    std::string abort_reason;
    std::set<c10::intrusive_ptr<c10d::Work>> in_flight;
    std::chrono::milliseconds timeout{0};
    int rank = 0;
    // The ingress gate: payloads come in one at a time, in the order their headers arrived
    // (tickets), as the cost engine's full-duplex link carries them (see irecv).
    std::condition_variable gate_cv;
    int64_t next_ticket = 0, serving = 0;
    void check_aborted();                       // throws TransportError when aborted
    void wait_work(const c10::intrusive_ptr<c10d::Work>& w, const std::string& what);
    void wait_collective(const c10::intrusive_ptr<c10d::Work>& w, const std::string& what);
    void enter_gate(int64_t ticket, const std::string& what);  // waits its turn (deadline, abort)
    void leave_gate();
  };

 private:
  c10d::ProcessGroupGloo& group_for(const std::vector<int>& group);
  // The group's shared-memory region, made (collectively, after its gloo group) on first use; null
  // where its workers do not share a host.
  ShmAllreduce* shared_memory_for(const std::vector<int>& group);
  CommThread& collective_thread(const std::vector<int>& group);
  // The groups a hierarchical all-reduce of `group` uses, in the order every member creates
  // them: each unit, then the shard groups (member i of every unit); empty for one ring.
  std::vector<std::vector<int>> subgroups(const std::vector<int>& group) const;
  void hierarchical_allreduce(torch::Tensor t, const std::vector<std::vector<int>>& units);
  void join_collective_threads();
  c10::intrusive_ptr<c10d::ProcessGroupGloo> make_group(const std::vector<int>& group);
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_for_init();
  // The thread that completes receives from `peer` with headers, in the order posted.
  CommThread& receiver_for(int peer);
  void join_receivers();
  // Ends this worker's transfers and waits (abort() also ends its peers' shared-memory waits).
  void abort_here(const std::string& why);

  GlooConfig config_;
  std::chrono::milliseconds rendezvous_timeout_{0};
  int64_t pauses_ = 0;                                    // pause_barrier's calls
  std::chrono::steady_clock::time_point last_progress_;  // progress()'s last store request
  bool one_host_ = false;
  std::shared_ptr<State> state_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> world_;
  std::mutex groups_mu_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupGloo>> groups_;
  std::mutex shared_mu_;  // abort() reads the regions while a group may be joining
  std::map<std::vector<int>, std::unique_ptr<ShmAllreduce>> shared_;  // group -> its region (or null)
  std::mutex receivers_mu_;
  std::map<int, std::unique_ptr<CommThread>> receivers_;  // peer -> its receiving thread
  mutable std::mutex channels_mu_;
  std::map<int, std::unique_ptr<ShmChannel>> channels_;  // peer -> the pair's shared-memory channel
  ShmChannel* channel_to(int peer) const;
  std::mutex collectives_mu_;
  std::map<std::vector<int>, std::unique_ptr<CommThread>> collectives_;  // group -> its hierarchical and shared-memory all-reduces
};

}  // namespace pt::runtime
