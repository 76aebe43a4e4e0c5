// User objects through the runtime: a graph holding references, an instantiation
// holding its own, destructors that run exactly once, after the last reference,
// on a thread that may call CUDA. Prints key=value lines the test checks.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime_check.h"

struct Tracked {
  std::atomic<int> destroyed{0};
  std::atomic<int> other_thread{0};
  std::atomic<int> saw_main_go_on{0};
};

static std::thread::id main_thread;
static std::atomic<int> main_went_on{0};

// CUDA forbids CUDA calls in a destructor; what it must allow is the job going on
// while one runs: it waits (bounded) until the main thread made its next CUDA calls,
// which would deadlock if the client ran it under one of its locks.
static void destroy(void* p) {
  auto* t = static_cast<Tracked*>(p);
  t->other_thread = std::this_thread::get_id() != main_thread;
  for (int i = 0; i < 1000 && !main_went_on.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  t->saw_main_go_on = main_went_on.load();
  t->destroyed.fetch_add(1);
}

// The destructor runs on another thread, soon after the last reference goes.
static int wait_destroyed(const Tracked& t, int at_least) {
  for (int i = 0; i < 2000 && t.destroyed.load() < at_least; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a second run would show up here
  return t.destroyed.load();
}

__global__ void add_one(int* x) { *x += 1; }

int main() {
  main_thread = std::this_thread::get_id();
  int* counter = nullptr;
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMemset(counter, 0, sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  // 1. A graph takes a reference; the job drops its own; destroying the graph destroys the object.
  Tracked a;
  cudaUserObject_t obj_a;
  CHECK(cudaUserObjectCreate(&obj_a, &a, destroy, 1, cudaUserObjectNoDestructorSync));
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  CHECK(cudaGraphRetainUserObject(graph, obj_a, 1, 0));
  CHECK(cudaUserObjectRelease(obj_a, 1));
  printf("a_alive_in_graph=%d\n", a.destroyed.load() == 0);
  CHECK(cudaGraphDestroy(graph));
  // While a's destructor waits: graphs, user objects and memory still work.
  cudaGraph_t other;
  CHECK(cudaGraphCreate(&other, 0));
  CHECK(cudaGraphDestroy(other));
  CHECK(cudaMemset(counter, 0, sizeof(int)));
  main_went_on = 1;
  const int a_destroyed = wait_destroyed(a, 1);
  printf("a_destroyed=%d a_other_thread=%d a_saw_main_go_on=%d\n", a_destroyed, a.other_thread.load(),
         a.saw_main_go_on.load());

  // 2. MOVE: the graph takes the job's reference; the instantiation keeps the object
  //    after the graph is gone, until the exec is destroyed.
  Tracked b;
  cudaUserObject_t obj_b;
  CHECK(cudaUserObjectCreate(&obj_b, &b, destroy, 1, cudaUserObjectNoDestructorSync));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  add_one<<<1, 1, 0, stream>>>(counter);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphRetainUserObject(graph, obj_b, 1, cudaGraphUserObjectMove));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  printf("b_alive_while_exec=%d\n", b.destroyed.load() == 0);
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaGraphExecDestroy(exec));
  printf("b_destroyed=%d\n", wait_destroyed(b, 1));
  int launches = 0;
  CHECK(cudaMemcpy(&launches, counter, sizeof launches, cudaMemcpyDeviceToHost));
  printf("launches=%d\n", launches);

  // 3. Refcounts: retain 2 more, release 3 (in two calls): destroyed once, at the last.
  Tracked c;
  cudaUserObject_t obj_c;
  CHECK(cudaUserObjectCreate(&obj_c, &c, destroy, 1, cudaUserObjectNoDestructorSync));
  CHECK(cudaUserObjectRetain(obj_c, 2));
  CHECK(cudaUserObjectRelease(obj_c, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  printf("c_alive_with_one=%d\n", c.destroyed.load() == 0);
  // A graph releasing references it does not hold is refused.
  CHECK(cudaGraphCreate(&graph, 0));
  printf("release_unheld=%d\n", (int)cudaGraphReleaseUserObject(graph, obj_c, 1));
  CHECK(cudaGraphRetainUserObject(graph, obj_c, 2, 0));
  CHECK(cudaGraphReleaseUserObject(graph, obj_c, 2));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaUserObjectRelease(obj_c, 1));
  printf("c_destroyed=%d\n", wait_destroyed(c, 1));

  // 4. A clone holds its own references, an instantiation of the clone too; updating
  //    the instantiation with a graph without the object lets go of it.
  Tracked u;  // not `e`: CHECK declares its own `e`
  cudaUserObject_t obj_e;
  CHECK(cudaUserObjectCreate(&obj_e, &u, destroy, 1, cudaUserObjectNoDestructorSync));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  add_one<<<1, 1, 0, stream>>>(counter);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphRetainUserObject(graph, obj_e, 1, cudaGraphUserObjectMove));
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, graph));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphInstantiate(&exec, clone, 0));
  CHECK(cudaGraphDestroy(clone));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  printf("e_alive_in_exec_of_clone=%d\n", u.destroyed.load() == 0);
  CHECK(cudaGraphLaunch(exec, stream));
  cudaGraph_t without;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  add_one<<<1, 1, 0, stream>>>(counter);
  CHECK(cudaStreamEndCapture(stream, &without));
  cudaGraphExecUpdateResultInfo info;
  CHECK(cudaGraphExecUpdate(exec, without, &info));
  printf("e_destroyed_by_update=%d\n", wait_destroyed(u, 1));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(without));

  // 5. What the driver refuses: flags other than NoDestructorSync, a count of 0, no destructor.
  Tracked d;
  cudaUserObject_t obj_d;
  printf("bad_flags=%d zero_count=%d no_destructor=%d\n",
         (int)cudaUserObjectCreate(&obj_d, &d, destroy, 1, 0),
         (int)cudaUserObjectCreate(&obj_d, &d, destroy, 0, cudaUserObjectNoDestructorSync),
         (int)cudaUserObjectCreate(&obj_d, &d, nullptr, 1, cudaUserObjectNoDestructorSync));
  cudaGetLastError();

  CHECK(cudaFree(counter));
  CHECK(cudaStreamDestroy(stream));
  printf("done=1\n");
  return 0;
}
