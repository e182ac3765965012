// What the benchmark reads about its processes from /proc (CPU time, resident memory), and where
// it places them on the CPUs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace sidelock::bench {

/// utime + stime of a process (all its threads) in seconds, from /proc/PID/stat; -1 if unreadable.
double cpuSeconds(pid_t pid);
/// VmRSS from /proc/PID/status in KiB; -1 if unreadable.
int64_t rssKiB(pid_t pid);
/// Number of CPUs this process may run on now.
int usableCpus();
/// Restricts every thread of `pid` (0 = this process) to `cpus`; an empty list allows every
/// CPU of the machine. Threads created later inherit the mask of their creator.
void pinProcess(pid_t pid, const std::vector<int>& cpus);

}  // namespace sidelock::bench
