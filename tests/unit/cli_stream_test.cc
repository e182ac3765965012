#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "cli/acquire_stream.h"
#include "cli/lease_deadline.h"

namespace sidelock::cli {
namespace {

std::string chunk(const std::string& data) {
  char size[32];
  snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const std::string kStreamHead =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: application/x-ndjson\r\n"
    "Transfer-Encoding: chunked\r\n"
    "\r\n";

const std::string kAcquired =
    R"({"event":"acquired","name":"job","owner":"o-123","token":42,"ttl_ms":3000})"
    "\n";

// A stream as a sidecar sends it: events split across chunks in awkward places.
std::string sampleStream() {
  std::string renewed = R"({"event":"renewed","ttl_ms":3000})"
                        "\n";
  std::string lost = R"({"event":"lost","reason":"lease_lost"})"
                     "\n";
  return kStreamHead + chunk(kAcquired) + chunk(renewed.substr(0, 7)) +
         chunk(renewed.substr(7) + lost.substr(0, 3)) + chunk(lost.substr(3)) + "0\r\n\r\n";
}

std::vector<StreamEvent> drain(AcquireResponseParser& p) {
  std::vector<StreamEvent> out;
  while (auto ev = p.nextEvent()) out.push_back(*ev);
  return out;
}

void expectSampleEvents(const std::vector<StreamEvent>& evs) {
  ASSERT_EQ(evs.size(), 3u);
  EXPECT_EQ(evs[0].type, StreamEvent::Type::kAcquired);
  EXPECT_EQ(evs[0].name, "job");
  EXPECT_EQ(evs[0].owner, "o-123");
  EXPECT_EQ(evs[0].token, 42u);
  EXPECT_EQ(evs[0].ttl_ms, 3000);
  EXPECT_EQ(evs[1].type, StreamEvent::Type::kRenewed);
  EXPECT_EQ(evs[1].ttl_ms, 3000);
  EXPECT_EQ(evs[2].type, StreamEvent::Type::kLost);
  EXPECT_EQ(evs[2].reason, "lease_lost");
}

TEST(AcquireStreamTest, WholeStreamAtOnce) {
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(sampleStream()).isOk());
  EXPECT_TRUE(p.headComplete());
  EXPECT_EQ(p.status(), 200);
  EXPECT_TRUE(p.isStream());
  EXPECT_TRUE(p.messageComplete());
  expectSampleEvents(drain(p));
}

TEST(AcquireStreamTest, ByteByByte) {
  AcquireResponseParser p;
  std::string s = sampleStream();
  std::vector<StreamEvent> evs;
  for (size_t i = 0; i < s.size(); ++i) {
    ASSERT_TRUE(p.feed(s.substr(i, 1)).isOk()) << i;
    for (auto& e : drain(p)) evs.push_back(e);
    if (i < kStreamHead.size() - 1) {
      EXPECT_FALSE(p.headComplete()) << i;
    }
  }
  EXPECT_TRUE(p.messageComplete());
  expectSampleEvents(evs);
}

TEST(AcquireStreamTest, RandomSplits) {
  std::mt19937 rng(12345);
  std::string s = sampleStream();
  for (int round = 0; round < 200; ++round) {
    AcquireResponseParser p;
    std::vector<StreamEvent> evs;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t n = std::uniform_int_distribution<size_t>(1, 40)(rng);
      ASSERT_TRUE(p.feed(s.substr(pos, n)).isOk());
      for (auto& e : drain(p)) evs.push_back(e);
      pos += n;
    }
    expectSampleEvents(evs);
  }
}

TEST(AcquireStreamTest, FirstEventBeforeStreamEnds) {
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(kStreamHead + chunk(kAcquired)).isOk());
  EXPECT_TRUE(p.isStream());
  EXPECT_FALSE(p.messageComplete());
  auto ev = p.nextEvent();
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->type, StreamEvent::Type::kAcquired);
  EXPECT_FALSE(p.nextEvent());
  // The sidecar hanging up mid-stream is an error (the caller treats it as a loss).
  Status st = p.finish();
  EXPECT_FALSE(st.isOk());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
}

TEST(AcquireStreamTest, BlankLinesAndCrlfAreTolerated) {
  AcquireResponseParser p;
  ASSERT_TRUE(
      p.feed(kStreamHead + chunk("\n\r\n" + kAcquired.substr(0, kAcquired.size() - 1) + "\r\n\n"))
          .isOk());
  auto evs = drain(p);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].owner, "o-123");
}

TEST(AcquireStreamTest, UnknownEventsPassThroughAsUnknown) {
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(kStreamHead + chunk(kAcquired) + chunk("{\"event\":\"renewed\"}\n") +
                     chunk("{\"event\":\"hello\",\"x\":1}\n") + chunk("{\"event\":\"capped\"}\n"))
                  .isOk());
  auto evs = drain(p);
  ASSERT_EQ(evs.size(), 4u);
  EXPECT_EQ(evs[1].type, StreamEvent::Type::kRenewed);  // ttl_ms is optional on renewals
  EXPECT_EQ(evs[1].ttl_ms, -1);
  EXPECT_EQ(evs[2].type, StreamEvent::Type::kUnknown);
  EXPECT_EQ(evs[2].event, "hello");
  EXPECT_EQ(evs[3].type, StreamEvent::Type::kCapped);
}

TEST(AcquireStreamTest, ALostEventAtTheCapSaysSo) {
  auto at_cap =
      parseStreamEvent(R"({"event":"lost","reason":"max_hold_ms reached","cap_reached":true})");
  ASSERT_TRUE(at_cap.isOk());
  EXPECT_EQ(at_cap->type, StreamEvent::Type::kLost);
  EXPECT_TRUE(at_cap->cap_reached);
  auto lost = parseStreamEvent(R"({"event":"lost","reason":"the lease expired"})");
  ASSERT_TRUE(lost.isOk());
  EXPECT_FALSE(lost->cap_reached);
}

TEST(AcquireStreamTest, RefusalIsNotAStream) {
  std::string body = R"({"error":"locked","message":"held by another owner","retry_after_ms":250})";
  std::string resp = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t split = 0; split <= resp.size(); ++split) {
    AcquireResponseParser p;
    ASSERT_TRUE(p.feed(resp.substr(0, split)).isOk());
    ASSERT_TRUE(p.feed(resp.substr(split)).isOk());
    ASSERT_TRUE(p.messageComplete());
    EXPECT_EQ(p.status(), 409);
    EXPECT_FALSE(p.isStream());
    EXPECT_FALSE(p.nextEvent());
    ErrorBody err = parseErrorBody(p.body());
    EXPECT_EQ(err.error, "locked");
    EXPECT_EQ(err.message, "held by another owner");
    EXPECT_EQ(err.retry_after_ms, 250);
  }
}

TEST(AcquireStreamTest, ChunkedRefusalAndBytesAfterTheResponseAreIgnored) {
  std::string resp = "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     chunk(R"({"error":"unavailable",)") + chunk(R"("message":"redis down"})") +
                     "0\r\n\r\nHTTP/1.1 200 OK\r\ngarbage";
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(resp).isOk());
  EXPECT_TRUE(p.messageComplete());
  EXPECT_EQ(p.status(), 503);
  EXPECT_EQ(parseErrorBody(p.body()).error, "unavailable");
  EXPECT_TRUE(p.finish().isOk());
}

TEST(AcquireStreamTest, BodyEndingAtEofCompletesOnFinish) {
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed("HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\noops").isOk());
  EXPECT_FALSE(p.messageComplete());
  EXPECT_TRUE(p.finish().isOk());
  EXPECT_TRUE(p.messageComplete());
  ErrorBody err = parseErrorBody(p.body());
  EXPECT_TRUE(err.error.empty());
  EXPECT_EQ(err.message, "oops");
}

TEST(AcquireStreamTest, EofBeforeAnythingIsUnavailable) {
  AcquireResponseParser p;
  Status st = p.finish();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  AcquireResponseParser q;
  ASSERT_TRUE(q.feed("HTTP/1.1 20").isOk());
  EXPECT_EQ(q.finish().code(), StatusCode::kUnavailable);
}

TEST(AcquireStreamTest, MalformedInputIsAnErrorNotACrash) {
  const std::string bad[] = {
      "NOT HTTP\r\n\r\n",
      kStreamHead + chunk("{not json}\n"),
      kStreamHead + chunk("[1,2]\n"),
      kStreamHead + chunk("{\"no_event\":1}\n"),
      kStreamHead + chunk("{\"event\":\"acquired\",\"token\":1}\n"),      // no owner
      kStreamHead + chunk("{\"event\":\"acquired\",\"owner\":\"o\"}\n"),  // no token
      kStreamHead + chunk("{\"event\":\"acquired\",\"owner\":\"o\",\"token\":-1}\n"),
      kStreamHead + chunk("{\"event\":\"renewed\",\"ttl_ms\":\"5\"}\n"),
      kStreamHead + "zz\r\n",  // bad chunk size
  };
  for (const std::string& input : bad) {
    AcquireResponseParser p;
    Status st = p.feed(input);
    EXPECT_FALSE(st.isOk()) << input;
    // Errors are sticky.
    EXPECT_FALSE(p.feed("more").isOk());
  }
}

TEST(AcquireStreamTest, LimitsAreEnforced) {
  AcquireResponseParser p;
  std::string huge_header = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(20'000, 'a') + "\r\n\r\n";
  EXPECT_EQ(p.feed(huge_header).code(), StatusCode::kResourceExhausted);

  AcquireResponseParser q;
  ASSERT_TRUE(q.feed(kStreamHead).isOk());
  Status st;
  for (int i = 0; i < 100 && st.isOk(); ++i) st = q.feed(chunk(std::string(1000, 'x')));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);

  AcquireResponseParser r;
  std::string body(70'000, 'x');
  EXPECT_EQ(r.feed("HTTP/1.1 500 X\r\nContent-Length: 70000\r\n\r\n" + body).code(),
            StatusCode::kResourceExhausted);
}

TEST(AcquireStreamTest, OkWithoutNdjsonIsNotAStream) {
  AcquireResponseParser p;
  std::string body = R"({"owner":"o","token":1})";
  ASSERT_TRUE(p.feed("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body)
                  .isOk());
  EXPECT_EQ(p.status(), 200);
  EXPECT_FALSE(p.isStream());
  EXPECT_TRUE(p.messageComplete());
}

TEST(AcquireRequestTest, BuildsStreamAcquire) {
  std::string req =
      buildAcquireRequest({"nightly report/1", 5000, 0, std::nullopt, "", std::nullopt});
  ASSERT_EQ(req.rfind("POST /v1/locks/nightly%20report%2F1/acquire HTTP/1.1\r\n", 0), 0u) << req;
  // ':' and '@' stay readable in the path (common/percent_encoding.h, kPathSegment).
  EXPECT_EQ(buildAcquireRequest({"svc:job@eu", 5000, 0, std::nullopt, "", std::nullopt})
                .rfind("POST /v1/locks/svc:job@eu/acquire HTTP/1.1\r\n", 0),
            0u);
  size_t body_at = req.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos);
  std::string body = req.substr(body_at + 4);
  EXPECT_NE(req.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["hold"], "stream");
  EXPECT_EQ(j["ttl_ms"], 5000);
  EXPECT_EQ(j["wait_ms"], 0);
  EXPECT_FALSE(j.contains("max_hold_ms"));

  EXPECT_NE(req.find("\r\nHost: localhost\r\n"), std::string::npos) << "a loopback Host name";
  EXPECT_EQ(req.find("Authorization"), std::string::npos);

  req = buildAcquireRequest({"a", std::nullopt, std::nullopt, 60000, "", std::nullopt});
  j = nlohmann::json::parse(req.substr(req.find("\r\n\r\n") + 4));
  EXPECT_FALSE(j.contains("ttl_ms"));
  EXPECT_FALSE(j.contains("wait_ms"));
  EXPECT_EQ(j["max_hold_ms"], 60000);

  req = buildAcquireRequest(
      {"a", std::nullopt, std::nullopt, std::nullopt, "t0ken-from-env", std::nullopt});
  EXPECT_NE(req.find("\r\nAuthorization: Bearer t0ken-from-env\r\n"), std::string::npos) << req;

  req = buildAcquireRequest(
      {"a", std::nullopt, std::nullopt, std::nullopt, "", "http://127.0.0.1:8080/healthz", 30000});
  j = nlohmann::json::parse(req.substr(req.find("\r\n\r\n") + 4));
  EXPECT_EQ(j["health"],
            nlohmann::json({{"url", "http://127.0.0.1:8080/healthz"}, {"grace_ms", 30000}}));
}

TEST(AcquireStreamTest, ACampaignStream) {
  const std::string stream =
      kStreamHead +
      chunk(R"({"event":"elected","candidate":"pod-a","name":"s","owner":"o-9",)"
            R"("term":1795585391224577,"ttl_ms":10000})"
            "\n") +
      chunk(R"({"event":"renewed","name":"s","term":1795585391224577,"ttl_ms":9998})"
            "\n") +
      chunk(R"({"event":"resigned","name":"s","term":1795585391224577})"
            "\n") +
      "0\r\n\r\n";
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(stream).isOk());
  std::vector<StreamEvent> events = drain(p);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, StreamEvent::Type::kElected);
  EXPECT_EQ(events[0].owner, "o-9");
  EXPECT_EQ(events[0].token, 1795585391224577u);  // the term is the fencing token
  EXPECT_EQ(events[0].ttl_ms, 10000);
  EXPECT_EQ(events[1].type, StreamEvent::Type::kRenewed);
  EXPECT_EQ(events[1].ttl_ms, 9998);
  EXPECT_EQ(events[2].type, StreamEvent::Type::kResigned);

  // An elected event must say who owns the term.
  EXPECT_FALSE(parseStreamEvent(R"({"event":"elected","term":5,"ttl_ms":1})").isOk());
  EXPECT_FALSE(parseStreamEvent(R"({"event":"elected","owner":"o","ttl_ms":1})").isOk());
  EXPECT_FALSE(parseStreamEvent(R"({"event":"elected","owner":"o","term":-1})").isOk());
  auto lost = parseStreamEvent(R"({"event":"lost","reason":"gone","term":7})");
  ASSERT_TRUE(lost.isOk());
  EXPECT_EQ(lost->type, StreamEvent::Type::kLost);
  EXPECT_EQ(lost->reason, "gone");
}

// The sidecar's SIGTERM step-down (README "Leader election"): the event and its resign_in_ms,
// then the SIGKILL time sidelock run --elect keeps from it (before the sidecar resigns).
TEST(AcquireStreamTest, ASteppingDownEventGivesTheKillDeadline) {
  const std::string stream =
      kStreamHead +
      chunk(R"({"event":"elected","candidate":"pod-a","name":"s","owner":"o-9","term":3,)"
            R"("ttl_ms":10000})"
            "\n") +
      chunk(R"({"event":"stepping_down","name":"s","candidate":"pod-a","term":3,)"
            R"("reason":"shutting_down","resign_in_ms":5000})"
            "\n");
  AcquireResponseParser p;
  ASSERT_TRUE(p.feed(stream).isOk());
  std::vector<StreamEvent> events = drain(p);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type, StreamEvent::Type::kSteppingDown);
  EXPECT_EQ(events[1].resign_in_ms, 5000);
  EXPECT_FALSE(p.messageComplete()) << "the stream stays open until we close it";

  // Received at t=1000 while CMD is running with --grace 10000: SIGKILL by the resignation
  // (1000 + 5000) less its margin (500), not after the grace.
  LeaseDeadline deadline(10'000);
  deadline.confirmed(0, 10'000);
  const int64_t kill_at = deadline.sigkillAt(1'000);
  EXPECT_EQ(kill_at, 9'000);  // the lease's own kill deadline
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, kill_at, events[1].resign_in_ms), 5'500);
  // A short grace stays as it was.
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 2'000, events[1].resign_in_ms), 2'000);

  // Without resign_in_ms nothing moves; a bad one is an error, not a deadline.
  auto bare = parseStreamEvent(R"({"event":"stepping_down","name":"s","term":3})");
  ASSERT_TRUE(bare.isOk());
  EXPECT_EQ(bare->type, StreamEvent::Type::kSteppingDown);
  EXPECT_EQ(bare->resign_in_ms, -1);
  EXPECT_EQ(LeaseDeadline::killBeforeResign(1'000, 9'000, bare->resign_in_ms), 9'000);
  EXPECT_FALSE(parseStreamEvent(R"({"event":"stepping_down","resign_in_ms":-1})").isOk());
  EXPECT_FALSE(parseStreamEvent(R"({"event":"stepping_down","resign_in_ms":"5s"})").isOk());
}

TEST(AcquireRequestTest, BuildsCampaign) {
  std::string req = buildCampaignRequest(
      {"sched/1", "pod a", "10.0.0.7:8080", 10000, "tk", std::nullopt, 0});
  ASSERT_EQ(req.rfind("POST /v1/elections/sched%2F1/campaign HTTP/1.1\r\n", 0), 0u) << req;
  std::string body = req.substr(req.find("\r\n\r\n") + 4);
  EXPECT_NE(req.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  EXPECT_NE(req.find("\r\nAuthorization: Bearer tk\r\n"), std::string::npos) << req;
  auto j = nlohmann::json::parse(body);
  EXPECT_EQ(
      j, (nlohmann::json{{"candidate", "pod a"}, {"value", "10.0.0.7:8080"}, {"ttl_ms", 10000}}));
  // Unset: the sidecar's defaults (no value, locks.default_ttl_ms).
  req = buildCampaignRequest({"s", "c", std::nullopt, std::nullopt, "", std::nullopt, 0});
  EXPECT_EQ(nlohmann::json::parse(req.substr(req.find("\r\n\r\n") + 4)),
            (nlohmann::json{{"candidate", "c"}}));
  EXPECT_EQ(req.find("Authorization"), std::string::npos);
  // --elect --health: the leader resigns when the app fails (health with its grace).
  req = buildCampaignRequest(
      {"s", "c", std::nullopt, std::nullopt, "", "http://127.0.0.1:8080/healthz", 30000});
  EXPECT_EQ(nlohmann::json::parse(req.substr(req.find("\r\n\r\n") + 4))["health"],
            nlohmann::json({{"url", "http://127.0.0.1:8080/healthz"}, {"grace_ms", 30000}}));
}

}  // namespace
}  // namespace sidelock::cli
