#include "bench/proc_stats.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sidelock::bench {

double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  // The command name (field 2) may hold spaces: the fixed fields start after its ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 2));
  std::string skip;
  // Fields 3..13 (state .. cmajflt), then 14 utime and 15 stime, in clock ticks.
  for (int i = 3; i <= 13; ++i) fields >> skip;
  unsigned long long utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t rssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

void pinProcess(pid_t pid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpus.empty()) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < online; ++c) CPU_SET(static_cast<int>(c), &set);
  } else {
    for (int c : cpus) CPU_SET(c, &set);
  }
  const std::string tasks =
      "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    sched_setaffinity(tid, sizeof set, &set);  // a thread that just exited is no error
  }
}

}  // namespace sidelock::bench
