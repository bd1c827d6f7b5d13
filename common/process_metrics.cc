#include "common/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/version.h"

namespace ps {
namespace {

bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

// Seconds since the epoch at boot ("btime" in /proc/stat), or 0.
double BootTime() {
  std::string stat;
  if (!ReadFile("/proc/stat", &stat)) return 0;
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      double t = 0;
      return absl::SimpleAtod(line, &t) ? t : 0;
    }
  }
  return 0;
}

// Entries of /proc/self/fd, without the one opendir itself holds; -1 if unreadable.
int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;
}

}  // namespace

const char* BuildVersion() { return VersionString(); }

absl::StatusOr<std::unique_ptr<ProcessMetrics>> ProcessMetrics::Start(
    prometheus::Registry& registry, const std::string& role, absl::Duration refresh) {
  std::unique_ptr<ProcessMetrics> m(new ProcessMetrics);
  const prometheus::Labels labels = {{"role", role}};
  // The one place prometheus-cpp's exceptions (a name taken by another type) are converted.
  try {
    m->resident_ = &prometheus::BuildGauge()
                        .Name("ps_process_resident_memory_bytes")
                        .Help("Resident memory of the process, bytes")
                        .Register(registry)
                        .Add(labels);
    m->virtual_ = &prometheus::BuildGauge()
                       .Name("ps_process_virtual_memory_bytes")
                       .Help("Virtual memory of the process, bytes")
                       .Register(registry)
                       .Add(labels);
    m->open_fds_ = &prometheus::BuildGauge()
                        .Name("ps_process_open_fds")
                        .Help("Open file descriptors of the process")
                        .Register(registry)
                        .Add(labels);
    m->start_time_ = &prometheus::BuildGauge()
                          .Name("ps_process_start_time_seconds")
                          .Help("Start time of the process, seconds since the Unix epoch")
                          .Register(registry)
                          .Add(labels);
    m->cpu_ = &prometheus::BuildCounter()
                   .Name("ps_process_cpu_seconds_total")
                   .Help("User and system CPU time of the process, seconds")
                   .Register(registry)
                   .Add(labels);
    prometheus::BuildGauge()
        .Name("ps_build_info")
        .Help("Always 1; labels name the daemon's role and build version")
        .Register(registry)
        .Add({{"role", role}, {"version", BuildVersion()}})
        .Set(1);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("registering process metrics: ", e.what()));
  }
  // Where /proc is missing the series stay at 0; the daemon serves regardless.
  (void)m->Update();
  if (refresh > absl::ZeroDuration()) {
    ProcessMetrics* self = m.get();
    m->thread_ = std::thread([self, refresh] { self->Loop(refresh); });
  }
  return m;
}

ProcessMetrics::~ProcessMetrics() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ProcessMetrics::Loop(absl::Duration refresh) {
  while (!stop_.WaitForNotificationWithTimeout(refresh)) (void)Update();
}

absl::Status ProcessMetrics::Update() {
  // /proc/self/stat: "pid (comm) state ppid ...": fields after the comm, which may hold spaces.
  std::string stat;
  if (!ReadFile("/proc/self/stat", &stat)) return absl::UnavailableError("cannot read /proc");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return absl::UnavailableError("bad /proc/self/stat");
  const std::vector<absl::string_view> f =
      absl::StrSplit(absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24.
  constexpr int kUtime = 14 - 3, kStime = 15 - 3, kStartTime = 22 - 3, kVsize = 23 - 3,
                kRss = 24 - 3;
  double utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  if (f.size() <= kRss || !absl::SimpleAtod(f[kUtime], &utime) ||
      !absl::SimpleAtod(f[kStime], &stime) || !absl::SimpleAtod(f[kStartTime], &start_ticks) ||
      !absl::SimpleAtod(f[kVsize], &vsize) || !absl::SimpleAtod(f[kRss], &rss_pages)) {
    return absl::UnavailableError("cannot parse /proc/self/stat");
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  resident_->Set(rss_pages * page);
  virtual_->Set(vsize);
  if (const int fds = CountOpenFds(); fds >= 0) open_fds_->Set(fds);
  if (const double boot = BootTime(); boot > 0) start_time_->Set(boot + start_ticks / ticks);
  absl::MutexLock l(&mu_);
  const double cpu = (utime + stime) / ticks;
  if (cpu > cpu_seen_) {
    cpu_->Increment(cpu - cpu_seen_);
    cpu_seen_ = cpu;
  }
  return absl::OkStatus();
}

}  // namespace ps
