// Communicator: what expert parallelism needs from the process group (SPEC §3–§4), with an
// Open MPI implementation. Every collective must be called by all ranks of the communicator.
// Waits poll with a deadline, so a dead or stuck peer becomes a Status naming the operation
// and the timeout instead of a hang; the few MPI calls that cannot be polled (start-up,
// communicator splits, MPI_Finalize) run under a watchdog that ends the process with one line
// naming the rank and the call when they outlast the same timeout. Errors from MPI are returned,
// never aborted on (MPI_ERRORS_RETURN). Thread safety: one thread per communicator at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::comm {

// A pending non-blocking operation; Wait on it exactly once.
class Request {
 public:
  virtual ~Request() = default;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Blocking all-to-all of one int64 per peer.
  virtual Status AllToAll(const int64_t* send, int64_t* recv) = 0;
  // Non-blocking all-to-all-v of bytes: send_counts[p] bytes from send + send_displs[p] go to
  // peer p; recv_counts[p] bytes from p land at recv + recv_displs[p]. Buffers must stay valid
  // until Wait returns.
  virtual StatusOr<std::unique_ptr<Request>> StartAllToAllV(
      const uint8_t* send, const int64_t* send_counts, const int64_t* send_displs, uint8_t* recv,
      const int64_t* recv_counts, const int64_t* recv_displs) = 0;
  // `what` names the operation in a timeout error.
  virtual Status Wait(std::unique_ptr<Request> request, const char* what) = 0;
  // Advances a pending operation without blocking; true once it has completed (Wait then
  // returns at once). MPI moves non-blocking collectives forward only inside MPI calls, so a
  // caller that computes while a transfer is in flight calls this between pieces of work.
  virtual StatusOr<bool> Test(Request& request, const char* what) = 0;

  virtual Status AllReduceSum(float* data, int64_t n) = 0;    // in place
  virtual Status AllReduceMax(int64_t* data, int64_t n) = 0;  // in place
  virtual Status AllGather(const void* send, int64_t bytes,
                           void* recv) = 0;  // recv: size() * bytes
  // Gathers variable-size byte blobs to `root`; on root, *out receives size() blobs.
  virtual Status GatherBlobs(const std::string& mine, int root, std::vector<std::string>* out) = 0;
  // root's blob to every rank (sizes may differ before the call; after it, all equal root's).
  virtual Status Broadcast(std::string* blob, int root) = 0;
  virtual Status Barrier() = 0;
  // Ranks with the same color form a new communicator, ordered by key.
  virtual StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) = 0;
};

struct MpiOptions {
  double timeout_seconds = 120.0;  // per wait, and per blocking MPI call; 0 = none (tests only)
};

// The MPI world, initialized on first use (MPI_Init_thread, funneled). Finalize on destruction.
class MpiWorld {
 public:
  static StatusOr<std::unique_ptr<MpiWorld>> Init(int* argc, char*** argv,
                                                  const MpiOptions& options);
  ~MpiWorld();
  Communicator& world() { return *world_; }
  // Index of this rank's machine, learned from MPI_Comm_split_type(SHARED), and the number of
  // machines; both identical on every rank.
  int node_index() const { return node_index_; }
  int num_nodes() const { return num_nodes_; }
  int local_ranks() const { return local_ranks_; }  // ranks sharing this machine
  // Ends every rank of the job now (after a fatal error on this rank).
  [[noreturn]] void Abort(int code);

 private:
  MpiWorld() = default;
  std::unique_ptr<Communicator> world_;
  int node_index_ = 0, num_nodes_ = 1, local_ranks_ = 1;
  double timeout_seconds_ = 0;
};

// True when this process was started by mpirun (Open MPI, or a PMI launcher).
bool LaunchedByMpi();

}  // namespace epserve::comm
