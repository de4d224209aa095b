#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace epserve::comm {

namespace {

// "rank N" from the launcher's environment: usable before MPI_Init has returned.
std::string LauncherRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var)) return std::string("rank ") + v;
  return "rank ?";
}

// MPI calls with no non-blocking form (start-up, MPI_Comm_split, MPI_Finalize) cannot be polled
// against the deadline like the others. While one runs, a watchdog thread waits for it; if it
// outlasts the timeout the process prints one line naming the rank and the call and exits 1
// (mpirun then ends the other ranks), so a peer that died or never started is an error, not a
// hang. timeout <= 0: no watchdog.
class BlockingCallDeadline {
 public:
  BlockingCallDeadline(double timeout, std::string what) {
    if (!(timeout > 0)) return;
    watchdog_ = std::thread([this, timeout, what = std::move(what)] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(timeout), [this] { return done_; }))
        return;
      std::fprintf(stderr,
                   "epserve: %s: timed out after %d s in %s (a peer rank died, is stuck or never "
                   "started)\n",
                   LauncherRank().c_str(), static_cast<int>(timeout), what.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~BlockingCallDeadline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  BlockingCallDeadline(const BlockingCallDeadline&) = delete;
  BlockingCallDeadline& operator=(const BlockingCallDeadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watchdog_;
};

Status MpiError(int code, const char* what, int rank) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  return Status::Unavailable("rank " + std::to_string(rank) + ": " + what +
                             " failed: " + std::string(msg, len));
}

#define MPI_RETURN_IF_ERROR(call, what)                        \
  do {                                                         \
    int _rc = (call);                                          \
    if (_rc != MPI_SUCCESS) return MpiError(_rc, what, rank_); \
  } while (0)

class MpiRequest : public Request {
 public:
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> counts[4];  // keep int arrays alive until completion
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, double timeout) : comm_(comm), timeout_(timeout) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllToAll(const int64_t* send, int64_t* recv) override {
    MPI_Request req;
    MPI_RETURN_IF_ERROR(MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comm_, &req),
                        "all-to-all of counts");
    return WaitReq(&req, "all-to-all of counts");
  }

  StatusOr<std::unique_ptr<Request>> StartAllToAllV(const uint8_t* send, const int64_t* sc,
                                                    const int64_t* sd, uint8_t* recv,
                                                    const int64_t* rc, const int64_t* rd) override {
    auto r = std::make_unique<MpiRequest>();
    const int64_t* src[4] = {sc, sd, rc, rd};
    for (int a = 0; a < 4; ++a) {
      r->counts[a].resize(size_);
      for (int p = 0; p < size_; ++p) {
        if (src[a][p] > INT32_MAX) return Status::InvalidArgument("all-to-all message over 2 GiB");
        r->counts[a][p] = static_cast<int>(src[a][p]);
      }
    }
    MPI_RETURN_IF_ERROR(
        MPI_Ialltoallv(send, r->counts[0].data(), r->counts[1].data(), MPI_BYTE, recv,
                       r->counts[2].data(), r->counts[3].data(), MPI_BYTE, comm_, &r->req),
        "all-to-all-v");
    return std::unique_ptr<Request>(std::move(r));
  }

  Status Wait(std::unique_ptr<Request> request, const char* what) override {
    auto* r = static_cast<MpiRequest*>(request.get());
    return WaitReq(&r->req, what);
  }

  StatusOr<bool> Test(Request& request, const char* what) override {
    auto& r = static_cast<MpiRequest&>(request);
    int done = 0;
    MPI_RETURN_IF_ERROR(MPI_Test(&r.req, &done, MPI_STATUS_IGNORE), what);
    return done != 0;
  }

  Status AllReduceSum(float* data, int64_t n) override {
    MPI_Request req;
    MPI_RETURN_IF_ERROR(
        MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req),
        "all-reduce");
    return WaitReq(&req, "all-reduce");
  }

  Status AllReduceMax(int64_t* data, int64_t n) override {
    MPI_Request req;
    MPI_RETURN_IF_ERROR(
        MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_INT64_T, MPI_MAX, comm_, &req),
        "all-reduce");
    return WaitReq(&req, "all-reduce");
  }

  Status AllGather(const void* send, int64_t bytes, void* recv) override {
    MPI_Request req;
    MPI_RETURN_IF_ERROR(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                                       static_cast<int>(bytes), MPI_BYTE, comm_, &req),
                        "all-gather");
    return WaitReq(&req, "all-gather");
  }

  Status GatherBlobs(const std::string& mine, int root, std::vector<std::string>* out) override {
    int64_t len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lens(size_);
    RETURN_IF_ERROR(AllGather(&len, sizeof(len), lens.data()));
    std::vector<int> counts(size_), displs(size_);
    int64_t total = 0;
    for (int p = 0; p < size_; ++p) {
      counts[p] = static_cast<int>(lens[p]);
      displs[p] = static_cast<int>(total);
      total += lens[p];
    }
    std::string all(rank_ == root ? total : 0, '\0');
    MPI_Request req;
    MPI_RETURN_IF_ERROR(MPI_Igatherv(mine.data(), static_cast<int>(len), MPI_BYTE, all.data(),
                                     counts.data(), displs.data(), MPI_BYTE, root, comm_, &req),
                        "gather");
    RETURN_IF_ERROR(WaitReq(&req, "gather"));
    if (rank_ == root) {
      out->clear();
      for (int p = 0; p < size_; ++p) out->push_back(all.substr(displs[p], counts[p]));
    }
    return Status::Ok();
  }

  Status Broadcast(std::string* blob, int root) override {
    int64_t len = static_cast<int64_t>(blob->size());
    MPI_Request req;
    MPI_RETURN_IF_ERROR(MPI_Ibcast(&len, 1, MPI_INT64_T, root, comm_, &req), "broadcast");
    RETURN_IF_ERROR(WaitReq(&req, "broadcast"));
    if (rank_ != root) blob->assign(len, '\0');
    if (len == 0) return Status::Ok();
    MPI_RETURN_IF_ERROR(
        MPI_Ibcast(blob->data(), static_cast<int>(len), MPI_BYTE, root, comm_, &req), "broadcast");
    return WaitReq(&req, "broadcast");
  }

  Status Barrier() override {
    MPI_Request req;
    MPI_RETURN_IF_ERROR(MPI_Ibarrier(comm_, &req), "barrier");
    return WaitReq(&req, "barrier");
  }

  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    MPI_Comm c;
    BlockingCallDeadline deadline(timeout_, "a communicator split (MPI_Comm_split)");
    MPI_RETURN_IF_ERROR(MPI_Comm_split(comm_, color, key, &c), "communicator split");
    return std::unique_ptr<Communicator>(new MpiCommunicator(c, timeout_));
  }

 private:
  // Polls so a dead peer turns into a timeout error rather than a hang; yields between polls
  // because oversubscribed ranks share cores.
  Status WaitReq(MPI_Request* req, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    int spins = 0;
    for (;;) {
      int done = 0;
      MPI_RETURN_IF_ERROR(MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
      if (done) return Status::Ok();
      if (++spins > 64) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (timeout_ > 0 && waited > timeout_) {
          return Status::Unavailable("rank " + std::to_string(rank_) + ": timed out after " +
                                     std::to_string(static_cast<int>(timeout_)) +
                                     " s waiting for " + what + " (a peer rank died or is stuck)");
        }
      } else {
        std::this_thread::yield();
      }
    }
  }

  MPI_Comm comm_;
  double timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool LaunchedByMpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

StatusOr<std::unique_ptr<MpiWorld>> MpiWorld::Init(int* argc, char*** argv,
                                                   const MpiOptions& options) {
  // Start-up waits for every rank of the job (MPI_Init's exchange, the machine discovery below).
  BlockingCallDeadline deadline(options.timeout_seconds, "MPI start-up (waiting for every rank)");
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return Status::Unavailable("MPI_Init_thread failed");
  std::unique_ptr<MpiWorld> w(new MpiWorld());
  w->timeout_seconds_ = options.timeout_seconds;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  w->world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, options.timeout_seconds);
  // Machines: ranks sharing memory form one node; its id is the lowest world rank on it.
  MPI_Comm shared;
  int rank = w->world_->rank();
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared) !=
      MPI_SUCCESS)
    return Status::Unavailable("MPI_Comm_split_type(SHARED) failed");
  MPI_Comm_size(shared, &w->local_ranks_);
  int leader = rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_free(&shared);
  std::vector<int> leaders(w->world_->size());
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> distinct;
  for (int l : leaders)
    if (std::find(distinct.begin(), distinct.end(), l) == distinct.end()) distinct.push_back(l);
  std::sort(distinct.begin(), distinct.end());
  w->num_nodes_ = static_cast<int>(distinct.size());
  w->node_index_ =
      static_cast<int>(std::find(distinct.begin(), distinct.end(), leader) - distinct.begin());
  return w;
}

MpiWorld::~MpiWorld() {
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  BlockingCallDeadline deadline(timeout_seconds_, "MPI shutdown (MPI_Finalize)");
  MPI_Finalize();
}

void MpiWorld::Abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace epserve::comm
