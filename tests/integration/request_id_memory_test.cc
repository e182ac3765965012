// The request_id answers are bounded by bytes (issue 22): a client sending many acquires with the
// longest names, owner ids and request ids must not grow the sidecar past the chart's memory
// limit (helm/sidelock/values.yaml: 128Mi), and the memory comes back once the window is over.
// The real binary on the memory backend (the cache is the API layer's; any backend would do).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/proc_stats.h"
#include "support/http_client.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

// Under ASan the sidecar's RSS is ASan's (shadow memory, a quarantine that keeps freed blocks):
// against the sanitizer build's own sidecar it checks the load and the byte bound only. The test
// command runs it against the shipped binary only (label "shipped": tests/run.sh).
bool rssIsMeaningful() { return !sidecarIsSanitized(); }
constexpr int64_t kChartMemoryLimitKiB = 128 * 1024;
constexpr int64_t kMarginKiB = 16 * 1024;
constexpr int kConnections = 4;
constexpr int kPipelineDepth = 250;  // acquire + release pairs sent before reading their answers

/// `text` padded with `fill` to exactly `bytes` characters.
std::string padded(const std::string& text, size_t bytes, char fill) {
  return text + std::string(bytes - text.size(), fill);
}

/// Remembered answer bytes as /metrics reports them (asked on a new connection: an idle one may
/// have been closed by the sidecar during the load).
int64_t rememberedBytes(const SidecarProcess& sidecar) {
  HttpClient c = HttpClient::tcp(sidecar.port());
  return metricValue(c.get("/metrics").body, "sidelock_request_id_bytes");
}

/// Runs `pairs` acquires (200-byte name, 128-byte owner and request id, each request id new)
/// each followed by the release of its lease (no request id: only acquires are remembered), over
/// kConnections pipelined connections; returns the largest VmRSS seen, in KiB.
int64_t acquireMany(const SidecarProcess& sidecar, int pairs) {
  std::vector<HttpClient> clients;
  for (int i = 0; i < kConnections; ++i) clients.push_back(HttpClient::tcp(sidecar.port()));
  int64_t peak_kib = bench::rssKiB(sidecar.pid());
  int sent = 0;
  while (sent < pairs) {
    std::vector<int> batch(kConnections, 0);
    for (int k = 0; k < kConnections && sent < pairs; ++k) {
      // Each connection has its own lock, so its pairs never contend with another's.
      const std::string name = padded("lock-" + std::to_string(k) + "-", 200, 'n');
      for (; batch[k] < kPipelineDepth && sent < pairs; ++batch[k], ++sent) {
        const std::string owner = padded("owner-" + std::to_string(sent) + "-", 128, 'o');
        const std::string request_id = padded("req-" + std::to_string(sent) + "-", 128, 'r');
        clients[k].sendRequest(
            "POST", "/v1/locks/" + name + "/acquire",
            R"({"ttl_ms":60000,"owner":")" + owner + R"(","request_id":")" + request_id + "\"}");
        clients[k].sendRequest("POST", "/v1/locks/" + name + "/release",
                               R"({"owner":")" + owner + "\"}");
      }
    }
    for (int k = 0; k < kConnections; ++k) {
      for (int i = 0; i < 2 * batch[k]; ++i) {
        auto answer = clients[k].readResponse(30'000);
        if (!answer || answer->status != 200) {
          ADD_FAILURE() << "request " << i << " on connection " << k << ": "
                        << (answer ? answer->body : "no answer");
          return peak_kib;
        }
      }
    }
    peak_kib = std::max(peak_kib, bench::rssKiB(sidecar.pid()));
  }
  return peak_kib;
}

TEST(RequestIdMemoryTest, ManyLongRequestIdsStayWithinTheChartsMemoryLimit) {
  // The chart's locks defaults are the binary's defaults (max_request_ids 100000, window 10 min,
  // max_request_id_bytes 16 MiB).
  SidecarProcess sidecar({"backend:\n  type: memory\n", {}, false});
  const int64_t idle_kib = bench::rssKiB(sidecar.pid());
  // The issue's 110k acquires where RSS is checked; under ASan (several times slower, RSS not
  // checked) 30k, still twice what fills the byte bound.
  const int64_t peak_kib = acquireMany(sidecar, rssIsMeaningful() ? 110'000 : 30'000);
  const int64_t bytes = rememberedBytes(sidecar);
  std::printf("RSS idle %lld KiB, peak %lld KiB; remembered %lld bytes\n",
              static_cast<long long>(idle_kib), static_cast<long long>(peak_kib),
              static_cast<long long>(bytes));
  if (rssIsMeaningful()) {
    EXPECT_LT(peak_kib, kChartMemoryLimitKiB - kMarginKiB);
  }
  EXPECT_LE(bytes, 16 << 20) << "locks.max_request_id_bytes";
  EXPECT_GT(bytes, 12 << 20) << "the bound is reached: the oldest answers made room";
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(RequestIdMemoryTest, MemoryComesBackWhenTheWindowIsOver) {
  // The window must outlast the burst, or its first answers are gone before it ends: 20k pairs
  // take about a second in the build we ship, up to 20 s under ASan on two CI cores (where 2 s
  // left only the last 4 MiB remembered), so ASan gets fewer pairs and a longer window.
  const int pairs = rssIsMeaningful() ? 20'000 : 10'000;
  const int64_t window_ms = rssIsMeaningful() ? 3'000 : 25'000;
  SidecarProcess sidecar({"backend:\n  type: memory\nlocks:\n  request_id_window_ms: " +
                              std::to_string(window_ms) + "\n",
                          {},
                          false});
  const int64_t peak_kib = acquireMany(sidecar, pairs);
  // About 1.1 KB per remembered acquire (name, owner, request id, the answer).
  ASSERT_GT(rememberedBytes(sidecar), int64_t{pairs} * 800) << "the burst is remembered";
  // No request comes: the sweep timer drops the answers at the end of their window.
  EXPECT_TRUE(pollUntil([&] { return rememberedBytes(sidecar) == 0; }, window_ms + 10'000));
  const int64_t after_kib = bench::rssKiB(sidecar.pid());
  std::printf("RSS peak %lld KiB, after the window %lld KiB\n", static_cast<long long>(peak_kib),
              static_cast<long long>(after_kib));
  if (rssIsMeaningful()) {
    EXPECT_LT(after_kib, peak_kib - 8 * 1024) << "the remembered answers' memory is given back";
  }
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

}  // namespace
}  // namespace sidelock::testing
