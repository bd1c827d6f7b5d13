// Where the scheduler sends the jobs that ended, so that their servers free the jobs' memory.
#ifndef PS_SCHEDULER_JOB_DROPPER_H_
#define PS_SCHEDULER_JOB_DROPPER_H_

#include <string>
#include <vector>

namespace ps {

// A job that ended, and the data-plane addresses (host:port) of its servers still alive.
struct DropOrder {
  std::string job_id;
  std::vector<std::string> servers;
};

// The scheduler calls Drop() with its lock held: an implementation queues the order and sends
// it later (GrpcJobDropper), never blocks.
class JobDropper {
 public:
  virtual ~JobDropper() = default;
  virtual void Drop(DropOrder order) = 0;
};

}  // namespace ps

#endif  // PS_SCHEDULER_JOB_DROPPER_H_
