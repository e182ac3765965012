// sidelock's gRPC services through a client nobody here wrote (issue 21): @grpc/grpc-js with
// @grpc/proto-loader, which builds the client at run time from sidelock's published protos
// (src/api/proto), against a real sidecar (listen.grpc) on a real redis-server. Every sidelock.v1
// method, the Hold stream released by cancelling the call, deadlines (grpc-timeout) honoured, HTTP
// errors mapped to gRPC statuses, tokens from authorization and dapr-api-token metadata, one lock
// whatever protocol took it, grpc.health.v1 Check and Watch, and the protocol="grpc" metrics.
// Usage: node grpc_api_test.mjs SIDELOCK_BINARY REPO_ROOT (run.sh installs the packages first).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { check, checkCount, failures, finish, sleep, stop, until, withSidecar } from "./harness.mjs";

const require = createRequire(import.meta.url);
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const sidelock = process.argv[2];
const protoDir = path.join(process.argv[3], "src/api/proto");
const TOKEN = "grpcTestTokenAAAAAAAAAAAAAAAAAAA";   // every lock name
const SCOPED = "grpcTestTokenBBBBBBBBBBBBBBBBBBB";  // names starting with orders~ only
function metadataOf(headers) {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(headers)) md.set(k, v);
  return md;
}
const bearer = (token) => metadataOf({ authorization: `Bearer ${token}` });

/// The value of the series `name` (exact, labels included) in a /metrics text; 0 if absent.
function metricValue(text, name) {
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

/// A unary call as a promise: {value} or {error} (a grpc ServiceError).
function unary(client, method, request, md = bearer(TOKEN), options = {}) {
  return new Promise((resolve) => {
    client[method](request, md, options, (error, value) => resolve(error ? { error } : { value }));
  });
}

/// The HTTP error body the status message carries (README, "gRPC status codes").
function errorBodyOf(error) {
  try {
    return JSON.parse(error.details);
  } catch {
    return {};
  }
}

function expectStatus(result, code, what, errorCode = undefined) {
  if (!result.error) {
    check(false, what, `expected ${grpc.status[code]}, got ${JSON.stringify(result.value)}`);
    return {};
  }
  check(result.error.code === code, what,
        `expected ${grpc.status[code]}, got ${grpc.status[result.error.code]}: ${result.error.details}`);
  const body = errorBodyOf(result.error);
  if (errorCode !== undefined) {
    check(body.error === errorCode, `${what}: error ${errorCode}`, result.error.details);
  }
  return body;
}

function expectOk(result, what) {
  check(!result.error, what, result.error ? `${grpc.status[result.error.code]}: ${result.error.details}` : "");
  return result.value || {};
}

/// The first message of a server stream (or its error), the call left open.
function firstMessage(call) {
  return new Promise((resolve) => {
    call.once("data", (value) => resolve({ value }));
    call.once("error", (error) => resolve({ error }));
    call.once("end", () => resolve({ error: { code: -1, details: "stream ended" } }));
  });
}

async function exercise(ports, sidecarLog, sidecar) {
  const definition = protoLoader.loadSync(
      ["sidelock/v1/locks.proto", "grpc/health/v1/health.proto", "dapr/proto/runtime/v1/dapr.proto"],
      { includeDirs: [protoDir], keepCase: true, longs: Number, enums: String, defaults: false });
  const pkg = grpc.loadPackageDefinition(definition);
  const target = `127.0.0.1:${ports.grpc}`;
  const creds = grpc.credentials.createInsecure();
  const locks = new pkg.sidelock.v1.Locks(target, creds);
  const elections = new pkg.sidelock.v1.Elections(target, creds);
  const health = new pkg.grpc.health.v1.Health(target, creds);
  const daprSvc = new pkg.dapr.proto.runtime.v1.Dapr(target, creds);
  const http = (method, p, body, token = TOKEN) =>
    fetch(`http://127.0.0.1:${ports.http}${p}`, {
      method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const S = grpc.status;

  // grpc.health.v1: no token needed, as /readyz.
  let r = await unary(health, "Check", {}, new grpc.Metadata());
  check(expectOk(r, "Health/Check").status === "SERVING", "Health/Check SERVING", JSON.stringify(r.value));
  r = await unary(health, "Check", { service: "sidelock.v1.Locks" }, new grpc.Metadata());
  check(expectOk(r, "Health/Check sidelock.v1.Locks").status === "SERVING", "Check of Locks SERVING");
  r = await unary(health, "Check", { service: "no.such.Service" }, new grpc.Metadata());
  expectStatus(r, S.NOT_FOUND, "Health/Check of an unknown service: NOT_FOUND");
  const watch = health.Watch({}, new grpc.Metadata());
  watch.on("error", () => {});
  const w = await firstMessage(watch);
  check(w.value && w.value.status === "SERVING", "Health/Watch sends SERVING first", JSON.stringify(w));

  // An :authority whose port is not digits is refused, as a Host of the HTTP listener is (400).
  const badAuthority = new pkg.sidelock.v1.Locks(target, creds,
                                                 { "grpc.default_authority": "localhost:abc" });
  r = await unary(badAuthority, "Acquire", { name: "g-authority", ttl_ms: 10000 });
  const authorityBody = expectStatus(r, S.INVALID_ARGUMENT, "an :authority with a bad port: INVALID_ARGUMENT",
                                     "bad_request");
  check(authorityBody.message === "the :authority is not host[:port]",
        "the transport's own refusals carry a JSON error body too", r.error ? r.error.details : "");
  badAuthority.close();
  // So does a message over listen.grpc_limits.max_message_bytes (4 MiB); and such a refusal is
  // counted before any route, as HTTP counts a body over its limit (413 under "unmatched").
  const tooLarge = 'sidelock_http_requests_total{code="413",protocol="grpc",route="unmatched"}';
  const refusedBefore = metricValue(await (await http("GET", "/metrics")).text(), tooLarge);
  r = await unary(locks, "Acquire", { name: "g-big", holder: "x".repeat(5 * 1024 * 1024) }, bearer(TOKEN));
  expectStatus(r, S.RESOURCE_EXHAUSTED, "a request message over the limit: RESOURCE_EXHAUSTED",
               "payload_too_large");
  const refusedAfter = metricValue(await (await http("GET", "/metrics")).text(), tooLarge);
  check(refusedAfter === refusedBefore + 1,
        "a call the gRPC transport refuses is counted under route unmatched with its HTTP status",
        `${refusedBefore} -> ${refusedAfter}`);

  // Acquire, exclusion across protocols, Inspect, Extend, Release.
  let t0 = Date.now();
  r = await unary(locks, "Acquire", { name: "g1", ttl_ms: 10000 });
  const grant = expectOk(r, "Acquire");
  check(typeof grant.owner === "string" && grant.owner.length > 0 && grant.token > 0 &&
            grant.ttl_ms > 0 && grant.name === "g1", "Acquire answers a Grant", JSON.stringify(grant));
  console.log(`first gRPC acquire in ${Date.now() - t0} ms`);
  let h = await http("POST", "/v1/locks/g1/acquire", { ttl_ms: 5000 });
  check(h.status === 409, "a lock taken through gRPC excludes an HTTP client", String(h.status));
  r = await unary(locks, "Acquire", { name: "g1", ttl_ms: 5000 });
  const busy = expectStatus(r, S.ABORTED, "Acquire of a held lock: ABORTED", "locked");
  check(typeof busy.retry_after_ms === "number", "ABORTED carries retry_after_ms", JSON.stringify(busy));
  r = await unary(locks, "Inspect", { name: "g1" });
  const state = expectOk(r, "Inspect");
  check(state.held === true && state.token === grant.token, "Inspect sees the lease", JSON.stringify(state));
  r = await unary(locks, "Extend", { name: "g1", owner: grant.owner, ttl_ms: 20000 });
  check(expectOk(r, "Extend").ttl_ms > 10000, "Extend answers the new TTL", JSON.stringify(r.value));
  r = await unary(locks, "Release", { name: "g1", owner: "someone-else" });
  check(r.error && [S.FAILED_PRECONDITION, S.NOT_FOUND].includes(r.error.code),
        "Release by another owner is refused", r.error ? r.error.details : JSON.stringify(r.value));
  r = await unary(locks, "Release", { name: "g1", owner: grant.owner });
  check(expectOk(r, "Release").released === true, "Release answers released");
  h = await http("POST", "/v1/locks/h1/acquire", { ttl_ms: 10000 });
  const httpGrant = await h.json();
  check(h.status === 200, "HTTP acquire");
  r = await unary(locks, "Acquire", { name: "h1" });
  expectStatus(r, S.ABORTED, "a lock taken through HTTP excludes a gRPC client", "locked");
  r = await unary(locks, "Release", { name: "h1", owner: httpGrant.owner });
  expectOk(r, "gRPC releases a lock HTTP took (same owner)");

  // Release's request_id (a retry answers as the first release did, not not_held) and mode (the
  // lease released is the one the mode names: a reader's lease is not a writer's).
  r = await unary(locks, "Acquire", { name: "rid1", ttl_ms: 10000 });
  const ridGrant = expectOk(r, "Acquire rid1");
  r = await unary(locks, "Release", { name: "rid1", owner: ridGrant.owner, request_id: "rel-rid1" });
  check(expectOk(r, "Release with request_id").released === true, "Release with request_id");
  r = await unary(locks, "Release", { name: "rid1", owner: ridGrant.owner, request_id: "rel-rid1" });
  check(expectOk(r, "Release retried").released === true,
        "a retried Release (same request_id) answers as the first", JSON.stringify(r.value));
  r = await unary(locks, "Acquire", { name: "rd1", ttl_ms: 10000, mode: "shared" });
  const reader = expectOk(r, "Acquire shared");
  r = await unary(locks, "Release", { name: "rd1", owner: reader.owner, mode: "exclusive" });
  check(r.error && r.error.code === S.FAILED_PRECONDITION,
        "Release with mode exclusive does not release a reader's lease",
        r.error ? r.error.details : JSON.stringify(r.value));
  r = await unary(locks, "Release", { name: "rd1", owner: reader.owner, mode: "shared" });
  check(expectOk(r, "Release shared").released === true, "Release with mode shared");

  // Fields the HTTP JSON gained: lock_delay_ms (an expired lease blocks the lock: ABORTED with
  // reason lock_delay), holders of a shared lock, and the Events stream of HTTP's acquire/release.
  r = await unary(locks, "Acquire", { name: "ld1", ttl_ms: 200, lock_delay_ms: 3000 });
  expectOk(r, "Acquire with lock_delay_ms");
  await sleep(400);
  r = await unary(locks, "Acquire", { name: "ld1", ttl_ms: 5000 });
  const delayed = expectStatus(r, S.ABORTED, "Acquire during the lock-delay: ABORTED", "locked");
  check(delayed.reason === "lock_delay", "the lock-delay's ABORTED says reason lock_delay", JSON.stringify(delayed));
  for (const holder of ["reader-a", "reader-b"]) {
    r = await unary(locks, "Acquire", { name: "rw1", mode: "shared", holder, ttl_ms: 10000 });
    expectOk(r, `shared Acquire by ${holder}`);
  }
  r = await unary(locks, "Inspect", { name: "rw1" });
  const shared = expectOk(r, "Inspect of a shared lock");
  const labels = (shared.holders || []).map((x) => x.holder).sort();
  check(shared.mode === "shared" && labels.join() === "reader-a,reader-b" &&
            shared.holders.every((x) => x.ttl_ms > 0 && x.since_ms > 0),
        "Inspect of a shared lock lists its holders", JSON.stringify(shared));
  const events = locks.Events({ name: "ev1" }, bearer(TOKEN));
  const eventLines = [];
  events.on("data", (value) => eventLines.push(value));
  events.on("error", () => {});
  await until(async () => eventLines.length >= 1, 3000);
  h = await http("POST", "/v1/locks/ev1/acquire", { ttl_ms: 10000, holder: "ev-worker" });
  const evGrant = await h.json();
  await until(async () => eventLines.length >= 2, 3000);
  await http("POST", "/v1/locks/ev1/release", { owner: evGrant.owner });
  await until(async () => eventLines.length >= 3, 3000);
  events.cancel();
  const kinds = eventLines.map((x) => x.event).join();
  check(kinds === "state,acquired,released", "Events: state, then HTTP's acquire and release", JSON.stringify(eventLines));
  check(eventLines[1] && eventLines[1].token === evGrant.token && eventLines[1].holder === "ev-worker" &&
            eventLines[1].held === true, "Events' acquired carries token and holder", JSON.stringify(eventLines[1]));
  expectStatus(await firstMessage(locks.Events({ name: "bad name" }, bearer(TOKEN))), S.INVALID_ARGUMENT,
               "Events of an invalid name: INVALID_ARGUMENT");
  // extended: true is ?extended=true: an Extend is seen when the sidecar re-reads the lease (after
  // the 300 ms it last saw).
  const extEvents = locks.Events({ name: "ev2", extended: true }, bearer(TOKEN));
  const extLines = [];
  extEvents.on("data", (value) => extLines.push(value));
  extEvents.on("error", () => {});
  await until(async () => extLines.length >= 1, 3000);
  const evGrant2 = expectOk(await unary(locks, "Acquire", { name: "ev2", ttl_ms: 300 }), "Acquire ev2");
  await until(async () => extLines.length >= 2, 3000);  // acquired read before the Extend
  expectOk(await unary(locks, "Extend", { name: "ev2", owner: evGrant2.owner, ttl_ms: 5000 }), "Extend ev2");
  await until(async () => extLines.some((x) => x.event === "extended"), 3000);
  extEvents.cancel();
  check(extLines.some((x) => x.event === "extended"), "Events with extended: true sees an Extend",
        JSON.stringify(extLines));
  await unary(locks, "Release", { name: "ev2", owner: evGrant2.owner });

  // The deadline bounds the wait: wait_ms 30 s, deadlines of 150 ms to 1 s. A lock still held
  // when the wait ends is `locked` (ABORTED), every time: the wait ends a few ms before the
  // sidecar's deadline (it used to end the same millisecond, and DEADLINE_EXCEEDED came about
  // half the time).
  await http("POST", "/v1/locks/d1/acquire", { ttl_ms: 30000, owner: "d1-holder" });
  const deadlineCodes = [];
  let took = 0;
  for (const ms of [150, 300, 500, 600, 1000, 150, 300, 500, 600, 1000]) {
    t0 = Date.now();
    r = await unary(locks, "Acquire", { name: "d1", wait_ms: 30000 }, bearer(TOKEN),
                    { deadline: Date.now() + ms });
    took = Math.max(took, Date.now() - t0 - ms);
    deadlineCodes.push(r.error ? grpc.status[r.error.code] : "OK");
  }
  check(deadlineCodes.every((c) => c === "ABORTED"),
        "a wait cut by the call's deadline ends `locked` (ABORTED), never DEADLINE_EXCEEDED",
        deadlineCodes.join(","));
  check(took < 1500, "the deadline is honoured", `${took} ms past it`);
  await http("POST", "/v1/locks/d1/release", { owner: "d1-holder" });
  await sleep(200);
  h = await http("GET", "/v1/locks/d1");
  check((await h.json()).held === false, "the timed-out gRPC waiter took nothing");

  // Hold: the stream hold, released by cancelling the call.
  const inFlight = async () => metricValue(await (await http("GET", "/metrics")).text(),
                                           "sidelock_http_in_flight_requests");
  const inFlightBefore = await inFlight();
  const grpcCalls = async () =>
    metricValue(await (await http("GET", "/metrics")).text(), "sidelock_grpc_calls");
  const callsBefore = await grpcCalls();
  const hold = locks.Hold({ name: "s1", ttl_ms: 3000 }, bearer(TOKEN));
  hold.on("error", () => {});
  const first = await firstMessage(hold);
  check(await inFlight() === inFlightBefore + 1,
        "an open Hold counts in sidelock_http_in_flight_requests", `${inFlightBefore} before`);
  check(await grpcCalls() === callsBefore + 1,
        "and in sidelock_grpc_calls", `${await grpcCalls()} vs ${callsBefore} before`);
  check(first.value && first.value.event === "acquired" && first.value.token > 0,
        "Hold's first message is the acquired event", JSON.stringify(first));
  h = await http("POST", "/v1/locks/s1/acquire", {});
  check(h.status === 409, "the held stream excludes others", String(h.status));
  const renewed = await firstMessage(hold);  // after ttl x renew_fraction (1 s)
  check(renewed.value && renewed.value.event === "renewed" && renewed.value.ttl_ms > 0 &&
        renewed.value.ttl_ms <= 3000,
        "Hold's renewed message carries the validity left (ttl_ms)", JSON.stringify(renewed));
  t0 = Date.now();
  hold.cancel();
  const released = await until(async () => (await (await http("GET", "/v1/locks/s1")).json()).held === false, 5000);
  check(released, "cancelling the Hold call releases the lock", `${Date.now() - t0} ms`);
  check(await until(async () => await inFlight() === inFlightBefore, 5000),
        "and leaves it once it ends", `${await inFlight()} vs ${inFlightBefore}`);
  check(await until(async () => await grpcCalls() === callsBefore, 5000),
        "sidelock_grpc_calls too", `${await grpcCalls()} vs ${callsBefore}`);

  // Semaphores.
  const p1 = expectOk(await unary(locks, "AcquirePermit", { name: "sem", limit: 2, ttl_ms: 10000 }), "AcquirePermit 1");
  const p2 = expectOk(await unary(locks, "AcquirePermit", { name: "sem", limit: 2, ttl_ms: 10000 }), "AcquirePermit 2");
  check(p1.permit && p2.permit && p1.permit !== p2.permit, "two permits", JSON.stringify([p1, p2]));
  expectStatus(await unary(locks, "AcquirePermit", { name: "sem", limit: 2 }), S.ABORTED,
               "a third permit: ABORTED", "no_permits");
  expectStatus(await unary(locks, "AcquirePermit", { name: "sem", limit: 3 }), S.FAILED_PRECONDITION,
               "another limit: FAILED_PRECONDITION", "limit_mismatch");
  r = await unary(locks, "ExtendPermit", { name: "sem", permit: p1.permit, ttl_ms: 20000 });
  check(expectOk(r, "ExtendPermit").ttl_ms > 10000, "ExtendPermit answers the TTL");
  r = await unary(locks, "InspectSemaphore", { name: "sem" });
  check(expectOk(r, "InspectSemaphore").used === 2 && r.value.limit === 2, "InspectSemaphore", JSON.stringify(r.value));
  expectOk(await unary(locks, "ReleasePermit", { name: "sem", permit: p1.permit }), "ReleasePermit");
  expectOk(await unary(locks, "ReleasePermit", { name: "sem", permit: p2.permit }), "ReleasePermit 2");
  const ph = locks.HoldPermit({ name: "semh", limit: 1 }, bearer(TOKEN));
  ph.on("error", () => {});
  const phFirst = await firstMessage(ph);
  check(phFirst.value && phFirst.value.event === "acquired" && phFirst.value.permit, "HoldPermit", JSON.stringify(phFirst));
  ph.cancel();

  // Multi-locks.
  r = await unary(locks, "AcquireMulti", { names: ["m2", "m1"], ttl_ms: 10000 });
  const multi = expectOk(r, "AcquireMulti");
  check(JSON.stringify(multi.names) === '["m1","m2"]' && multi.leases && multi.leases.length === 2,
        "AcquireMulti answers the sorted names and leases", JSON.stringify(multi));
  expectStatus(await unary(locks, "Acquire", { name: "m1" }), S.ABORTED, "a multi-lock's name is held");
  expectOk(await unary(locks, "ReleaseMulti", { names: ["m1", "m2"], owner: multi.owner }), "ReleaseMulti");

  // Elections.
  const campaign = elections.Campaign({ name: "e1", candidate: "c1", value: "v1", ttl_ms: 5000 }, bearer(TOKEN));
  campaign.on("error", () => {});
  const elected = await firstMessage(campaign);
  check(elected.value && elected.value.event === "elected" && elected.value.term > 0,
        "Campaign's first message: elected", JSON.stringify(elected));
  r = await unary(elections, "Leader", { name: "e1" });
  check(expectOk(r, "Leader").leader && r.value.leader.candidate === "c1", "Leader", JSON.stringify(r.value));
  const observe = elections.Observe({ name: "e1" }, bearer(TOKEN));
  observe.on("error", () => {});
  const seen = await firstMessage(observe);
  check(seen.value && seen.value.event === "leader" && seen.value.candidate === "c1", "Observe", JSON.stringify(seen));
  observe.cancel();
  if (elected.value) {
    r = await unary(elections, "Proclaim", { name: "e1", owner: elected.value.owner, value: "v2" });
    check(expectOk(r, "Proclaim").term > 0, "Proclaim", JSON.stringify(r.value));
    r = await unary(elections, "Resign", { name: "e1", owner: elected.value.owner });
    check(expectOk(r, "Resign").resigned === true, "Resign", JSON.stringify(r.value));
  }
  campaign.cancel();

  // Errors mapped, and methods sidelock does not serve.
  expectStatus(await unary(locks, "Acquire", { name: "bad name" }), S.INVALID_ARGUMENT,
               "an invalid name: INVALID_ARGUMENT", "invalid_name");
  expectStatus(await unary(locks, "Acquire", {}), S.INVALID_ARGUMENT, "no name: INVALID_ARGUMENT");
  expectStatus(await unary(locks, "Acquire", { name: "x", ttl_ms: 1e12 }), S.INVALID_ARGUMENT,
               "a TTL past the maximum: INVALID_ARGUMENT", "bad_request");
  // A wait_ms past locks.max_wait_ms is refused with a deadline too (the deadline does not cut it
  // into range first).
  expectStatus(await unary(locks, "Acquire", { name: "x", wait_ms: 1e12 }, bearer(TOKEN),
                           { deadline: Date.now() + 5000 }),
               S.INVALID_ARGUMENT, "a wait_ms past the maximum, with a deadline: INVALID_ARGUMENT", "bad_request");
  const raw = new grpc.Client(target, creds);
  const rawCall = (method) => new Promise((resolve) =>
      raw.makeUnaryRequest(method, (x) => x, (x) => x, Buffer.alloc(0), bearer(TOKEN),
                           (error, value) => resolve(error ? { error } : { value })));
  let e = expectStatus(await rawCall("/dapr.proto.runtime.v1.Dapr/GetState"), S.UNIMPLEMENTED,
                       "another Dapr method: UNIMPLEMENTED");
  check(String(e.message).includes("sidelock"), "the UNIMPLEMENTED message names sidelock", JSON.stringify(e));
  expectStatus(await rawCall("/sidelock.v1.Locks/Nope"), S.UNIMPLEMENTED, "an unknown method: UNIMPLEMENTED");
  // A method name that is not UTF-8: grpc-js sends "é" as the one byte 0xE9 (latin1). The
  // UNIMPLEMENTED message quotes it, which once threw in the JSON printer and ended the process.
  e = expectStatus(await rawCall("/x/\u00e9"), S.UNIMPLEMENTED, "a method name of bad UTF-8: UNIMPLEMENTED");
  check(String(e.message).includes("\ufffd"), "its message shows U+FFFD for the bad byte", JSON.stringify(e));
  r = await unary(health, "Check", {}, new grpc.Metadata());
  check(r.value && r.value.status === "SERVING", "the sidecar answers after it", JSON.stringify(r));

  // Tokens: authorization or dapr-api-token metadata; none or a wrong one refused.
  expectStatus(await unary(locks, "Inspect", { name: "t1" }, new grpc.Metadata()), S.UNAUTHENTICATED,
               "no token: UNAUTHENTICATED", "token_required");
  expectStatus(await unary(locks, "Acquire", { name: "t1" }, bearer("grpcTestTokenWRONGWRONGWRONGWRONG")),
               S.UNAUTHENTICATED, "a wrong token: UNAUTHENTICATED", "invalid_token");
  expectStatus(await unary(locks, "Acquire", { name: "t1" }, metadataOf({ "dapr-api-token": "nope-nope-nope-nope" })),
               S.UNAUTHENTICATED, "a wrong dapr-api-token: UNAUTHENTICATED", "invalid_token");
  r = await unary(locks, "Acquire", { name: "orders~t1" }, metadataOf({ "dapr-api-token": SCOPED }));
  const scopedGrant = expectOk(r, "dapr-api-token metadata is a token");
  expectStatus(await unary(locks, "Acquire", { name: "invoices~t1" }, bearer(SCOPED)), S.PERMISSION_DENIED,
               "a scoped token outside its prefix: PERMISSION_DENIED", "lock_not_allowed");
  h = await http("GET", "/v1/locks/t1");
  check((await h.json()).held === false, "the refused calls took nothing");
  await unary(locks, "Release", { name: "orders~t1", owner: scopedGrant.owner }, bearer(SCOPED));

  // Dapr's lock methods through the generated client too (the SDK test covers the sequence).
  r = await unary(daprSvc, "TryLockAlpha1", { store_name: "lockstore", resource_id: "orders/9",
                                              lock_owner: "o", expiry_in_seconds: 30 });
  check(expectOk(r, "TryLockAlpha1").success === true, "TryLockAlpha1", JSON.stringify(r.value));
  r = await unary(daprSvc, "UnlockAlpha1", { store_name: "lockstore", resource_id: "orders/9", lock_owner: "o" });
  check(!r.error && (r.value.status === undefined || r.value.status === "SUCCESS"), "UnlockAlpha1 SUCCESS", JSON.stringify(r));
  expectStatus(await unary(daprSvc, "TryLockAlpha1", { store_name: "nostore", resource_id: "a", lock_owner: "o",
                                                      expiry_in_seconds: 1 }),
               S.INVALID_ARGUMENT, "an unknown Dapr store: INVALID_ARGUMENT");

  // Calls that never reach their route are counted too: an unknown method as HTTP counts a path
  // no route has (404, "unmatched"); a request the gateway cannot map under its route (400).
  const scrape = async () => (await (await http("GET", "/metrics")).text());
  const unmatched = 'sidelock_http_requests_total{code="404",protocol="grpc",route="unmatched"}';
  const daprBad = 'sidelock_http_requests_total{code="400",protocol="grpc",route="/v1.0-alpha1/lock/{store}"}';
  let before = await scrape();
  expectStatus(await rawCall("/sidelock.v1.Locks/Nope"), S.UNIMPLEMENTED, "an unknown method, again");
  const noStore = expectStatus(await unary(daprSvc, "TryLockAlpha1", { resource_id: "a", lock_owner: "o",
                                                                      expiry_in_seconds: 1 }),
                               S.INVALID_ARGUMENT, "TryLockAlpha1 without a store: INVALID_ARGUMENT");
  check(noStore.errorCode === "ERR_LOCK_STORE_NOT_FOUND", "in Dapr's error shape", JSON.stringify(noStore));
  let after = await scrape();
  check(metricValue(after, unmatched) === metricValue(before, unmatched) + 1,
        "an unknown method is counted under route unmatched, 404", `${metricValue(after, unmatched)}`);
  check(metricValue(after, daprBad) === metricValue(before, daprBad) + 1,
        "a request missing its path field is counted under its route, 400", `${metricValue(after, daprBad)}`);

  // Metrics: gRPC calls counted under their routes with protocol="grpc".
  const metrics = await (await http("GET", "/metrics")).text();
  check(metricValue(metrics, "sidelock_grpc_connections") >= 1,
        "the open gRPC connection counts in sidelock_grpc_connections",
        `${metricValue(metrics, "sidelock_grpc_connections")}`);
  check(/sidelock_http_requests_total\{code="200",protocol="grpc",route="\/v1\/locks\/\{name\}\/acquire"\} \d+/.test(metrics),
        "gRPC calls are counted with protocol=\"grpc\"");
  check(/sidelock_http_requests_total\{code="200",protocol="http",route="\/v1\/locks\/\{name\}\/acquire"\} \d+/.test(metrics),
        "HTTP requests with protocol=\"http\"");
  // SIGTERM: the Health/Watch still open hears NOT_SERVING at once (the drain), before the
  // sidecar closes its servers; then the sidecar exits 0.
  // An open Hold steps down: stepping_down with release_in_ms, then (the client not cancelling)
  // released at that deadline.
  const statuses = [];
  watch.on("data", (v) => statuses.push(v.status));
  const openHold = locks.Hold({ name: "sd1", ttl_ms: 3000 }, bearer(TOKEN));
  openHold.on("error", () => {});
  const holdEvents = [];
  check((await firstMessage(openHold)).value?.event === "acquired", "the Hold kept open through SIGTERM");
  openHold.on("data", (v) => holdEvents.push(v));
  const code = await stop(sidecar);
  check(code === 0, "the sidecar exits 0", String(code));
  check(statuses.includes("NOT_SERVING"), "SIGTERM: an open Health/Watch hears NOT_SERVING",
        JSON.stringify(statuses));
  const sd = holdEvents.find((v) => v.event === "stepping_down");
  check(sd && sd.release_in_ms > 0, "SIGTERM: an open Hold hears stepping_down with release_in_ms",
        JSON.stringify(holdEvents));
  check(holdEvents.length > 0 && holdEvents[holdEvents.length - 1].event === "released",
        "then released at that deadline", JSON.stringify(holdEvents));
  watch.cancel();
  for (const c of [locks, elections, health, daprSvc, raw]) c.close();
  if (failures.length) console.error(fs.readFileSync(sidecarLog, "utf8"));
}

async function main() {
  const started = Date.now();
  await withSidecar({ binary: sidelock, name: "grpc", appId: "grpc-app",
                      tokens: `${TOKEN}\n${SCOPED} prefixes=orders~\n` },
                    async ({ ports, sidecar, sidecarLog }) => {
    await exercise(ports, sidecarLog, sidecar);  // ends with the sidecar's SIGTERM
  });
  finish(`grpc-api: ${checkCount()} checks passed with @grpc/grpc-js in ${Date.now() - started} ms`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
