// The official Dapr JS SDK (@dapr/dapr, pinned in package-lock.json) against a real sidelock sidecar on
// a real redis-server (issue 21): DaprClient over HTTP and over gRPC, pointed at the sidecar the way
// a Dapr user points it (DAPR_HTTP_ENDPOINT / DAPR_GRPC_ENDPOINT, DAPR_API_TOKEN), must start (it
// polls GET /v1.0/metadata, or GetMetadata over gRPC, first) and get Dapr's documented answers to
// lock and unlock; a wrong or missing token is refused.
// Usage: node sdk_test.mjs SIDELOCK_BINARY (run.sh installs the SDK first).
import { createRequire } from "node:module";
import fs from "node:fs";
import { check, checkCount, failures, finish, stop, until, withSidecar } from "./harness.mjs";

const require = createRequire(import.meta.url);
const { DaprClient, CommunicationProtocolEnum, LogLevel } = require("@dapr/dapr");
const { LockStatus } = require("@dapr/dapr/types/lock/UnlockResponse");
const { Settings } = require("@dapr/dapr/utils/Settings.util");

const sidelock = process.argv[2];
const TOKEN = "sdkTestTokenAAAAAAAAAAAAAAAAAAAA";  // every lock name
const SCOPED = "sdkTestTokenBBBBBBBBBBBBBBBBBBBB";  // names starting with orders~ only
const STORE = "lockstore";
/// The SDK's error for a refused call: {error, error_msg, status} as JSON in the message.
function refusalOf(err) {
  try {
    return JSON.parse(err.message);
  } catch {
    return { status: undefined, error_msg: String(err && err.message) };
  }
}

async function expectRefused(promise, status, what) {
  try {
    const got = await promise;
    check(false, what, `expected HTTP ${status}, got the answer ${JSON.stringify(got)}`);
  } catch (err) {
    const r = refusalOf(err);
    check(r.status === status, what, `expected HTTP ${status}, got ${err.message}`);
    return r;
  }
  return null;
}

const logger = { level: LogLevel.Error };
function httpClient(token) {
  // Nothing but the protocol and the token: host and port come from DAPR_HTTP_ENDPOINT, as a Dapr
  // app gets them.
  const options = { communicationProtocol: CommunicationProtocolEnum.HTTP, logger };
  if (token !== undefined) options.daprApiToken = token;
  return new DaprClient(options);
}

async function exercise(lockPort, sidecarLog) {
  process.env.DAPR_HTTP_ENDPOINT = `http://127.0.0.1:${lockPort}`;
  process.env.DAPR_API_TOKEN = TOKEN;  // picked up by the SDK, unchanged
  const started = Date.now();
  const client = httpClient(undefined);
  await client.start();  // polls GET /v1.0/metadata until it answers
  console.log(`DaprClient started in ${Date.now() - started} ms`);

  const meta = await client.metadata.get();
  check(meta.id === "orders-app", "metadata id is dapr.app_id", JSON.stringify(meta));
  check(typeof meta.runtimeVersion === "string" && meta.runtimeVersion.length > 0,
        "metadata runtimeVersion", JSON.stringify(meta));
  const c = meta.components;
  check(Array.isArray(c) && c.length === 1 && c[0].name === STORE && c[0].type === "lock.redis" &&
            c[0].version === "v1" && Array.isArray(c[0].capabilities),
        "metadata lists the configured store as lock.redis", JSON.stringify(c));
  check(await client.health.isHealthy(), "health.isHealthy()");

  // Dapr's documented sequence (docs.dapr.io, "Distributed lock API reference").
  const res = "orders/42";
  let r = await client.lock.lock(STORE, res, "owner-a", 60);
  check(r.success === true, "lock", JSON.stringify(r));
  r = await client.lock.lock(STORE, res, "owner-b", 60);
  check(r.success === false, "lock by another owner answers success false", JSON.stringify(r));
  let u = await client.lock.unlock(STORE, res, "owner-b");
  check(u.status === LockStatus.LockBelongsToOthers, "unlock by the wrong owner: LOCK_BELONGS_TO_OTHERS",
        JSON.stringify(u));
  u = await client.lock.unlock(STORE, res, "owner-a");
  check(u.status === LockStatus.Success, "unlock: SUCCESS", JSON.stringify(u));
  u = await client.lock.unlock(STORE, res, "owner-a");
  check(u.status === LockStatus.LockDoesNotExist, "unlock again: LOCK_DOES_NOT_EXIST",
        JSON.stringify(u));

  // The same lock as sidelock's own API: orders/42 is the lock orders~42.
  r = await client.lock.lock(STORE, res, "owner-a", 60);
  check(r.success === true, "lock again after the unlock", JSON.stringify(r));
  const v1 = await fetch(`http://127.0.0.1:${lockPort}/v1/locks/orders~42`,
                         { headers: { authorization: `Bearer ${TOKEN}` } });
  check(v1.status === 200 && (await v1.json()).held === true, "the v1 API sees the Dapr lock held");
  await client.lock.unlock(STORE, res, "owner-a");

  // A token limited to a prefix: the same prefix rules as Authorization: Bearer.
  const scoped = httpClient(SCOPED);
  r = await scoped.lock.lock(STORE, "orders/7", "owner-s", 60);
  check(r.success === true, "a scoped token locks a name under its prefix", JSON.stringify(r));
  const denied = await expectRefused(scoped.lock.lock(STORE, "invoices/7", "owner-s", 60), 403,
                                     "a scoped token is refused a name outside its prefix");
  if (denied) {
    check(JSON.parse(denied.error_msg).errorCode === "ERR_PERMISSION_DENIED",
          "the refusal is Dapr's ERR_PERMISSION_DENIED", denied.error_msg);
  }

  // A wrong token. Like Dapr itself (whose /v1.0/metadata needs the token too), the SDK never
  // sees the sidecar start: it polls 60 times, here 20 ms apart instead of 500 ms.
  const wrong = httpClient("sdkTestTokenWRONGWRONGWRONGWRONG");
  const pollMs = Settings.daprSidecarPollingDelayMs;
  Settings.daprSidecarPollingDelayMs = 20;
  try {
    await wrong.start();
    check(false, "a wrong token: the SDK's start() fails");
  } catch (err) {
    check(String(err.message).includes("DAPR_SIDECAR_COULD_NOT_BE_STARTED"),
          "a wrong token: the SDK's start() fails", err.message);
  } finally {
    Settings.daprSidecarPollingDelayMs = pollMs;
  }
  // Past the start-up wait, the lock call itself is refused and takes nothing.
  wrong.daprClient.setIsInitialized(true);
  const refused = await expectRefused(wrong.lock.lock(STORE, "orders/refused", "intruder", 60), 401,
                                      "a wrong token: lock refused with 401");
  if (refused) {
    check(JSON.parse(refused.error_msg).error === "invalid_token", "401 invalid_token",
          refused.error_msg);
  }
  await expectRefused(wrong.lock.unlock(STORE, "orders/7", "owner-s"), 401,
                      "a wrong token: unlock refused with 401");
  delete process.env.DAPR_API_TOKEN;
  const none = httpClient(undefined);
  none.daprClient.setIsInitialized(true);
  await expectRefused(none.lock.lock(STORE, "orders/refused", "intruder", 60), 401,
                      "no token: lock refused with 401");
  r = await client.lock.lock(STORE, "orders/refused", "owner-a", 60);
  check(r.success === true, "the refused calls took nothing", JSON.stringify(r));
  u = await scoped.lock.unlock(STORE, "orders/7", "owner-s");
  check(u.status === LockStatus.Success, "the wrong token's unlock released nothing",
        JSON.stringify(u));

  // Dapr's health probes: 204 when ready, no token needed.
  for (const probe of ["/v1.0/healthz", "/v1.0/healthz/outbound"]) {
    const h = await fetch(`http://127.0.0.1:${lockPort}${probe}`);
    check(h.status === 204 && (await h.text()) === "", `${probe} answers 204 without a token`);
  }
  await client.stop();  // the SDK's keep-alive agents (shared by every client)
  if (failures.length) console.error(fs.readFileSync(sidecarLog, "utf8"));
}

function grpcClient(token) {
  // As a Dapr app gets it: the endpoint from DAPR_GRPC_ENDPOINT, the token from DAPR_API_TOKEN
  // unless given.
  const options = { communicationProtocol: CommunicationProtocolEnum.GRPC, logger };
  if (token !== undefined) options.daprApiToken = token;
  return new DaprClient(options);
}

/// A refused gRPC call: the SDK's ConnectRPC error carries the gRPC status code.
async function expectGrpcRefused(promise, code, what) {
  try {
    const got = await promise;
    check(false, what, `expected gRPC status ${code}, got the answer ${JSON.stringify(got)}`);
  } catch (err) {
    check(err.code === code, what, `expected gRPC status ${code}, got ${err.code}: ${err.message}`);
  }
}

async function exerciseGrpc(grpcPort, sidecarLog) {
  process.env.DAPR_GRPC_ENDPOINT = `127.0.0.1:${grpcPort}`;
  process.env.DAPR_API_TOKEN = TOKEN;
  const started = Date.now();
  const client = grpcClient(undefined);
  await client.start();  // calls GetMetadata until it answers
  console.log(`DaprClient (gRPC) started in ${Date.now() - started} ms`);
  const meta = await client.metadata.get();
  check(meta.id === "orders-app", "gRPC: metadata id is dapr.app_id", JSON.stringify(meta));
  check(Array.isArray(meta.components) && meta.components.length === 1 &&
            meta.components[0].name === STORE && meta.components[0].type === "lock.redis",
        "gRPC: metadata lists the store", JSON.stringify(meta.components));

  const res = "orders/43";
  let r = await client.lock.lock(STORE, res, "owner-a", 60);
  check(r.success === true, "gRPC: lock", JSON.stringify(r));
  r = await client.lock.lock(STORE, res, "owner-b", 60);
  check(r.success === false, "gRPC: lock by another owner answers success false", JSON.stringify(r));
  let u = await client.lock.unlock(STORE, res, "owner-b");
  check(u.status === LockStatus.LockBelongsToOthers,
        "gRPC: unlock by the wrong owner: LOCK_BELONGS_TO_OTHERS", JSON.stringify(u));
  // The lock the gRPC call took is the HTTP routes' lock: the HTTP SDK sees it held.
  const httpSide = httpClient(undefined);
  httpSide.daprClient.setIsInitialized(true);
  r = await httpSide.lock.lock(STORE, res, "owner-b", 60);
  check(r.success === false, "gRPC and HTTP share the lock", JSON.stringify(r));
  u = await client.lock.unlock(STORE, res, "owner-a");
  check(u.status === LockStatus.Success, "gRPC: unlock: SUCCESS", JSON.stringify(u));
  u = await client.lock.unlock(STORE, res, "owner-a");
  check(u.status === LockStatus.LockDoesNotExist, "gRPC: unlock again: LOCK_DOES_NOT_EXIST",
        JSON.stringify(u));

  // A wrong token: start() never sees the sidecar, and the calls are refused UNAUTHENTICATED (16).
  const wrong = grpcClient("sdkTestTokenWRONGWRONGWRONGWRONG");
  const pollMs = Settings.daprSidecarPollingDelayMs;
  Settings.daprSidecarPollingDelayMs = 20;
  try {
    await wrong.start();
    check(false, "gRPC, a wrong token: the SDK's start() fails");
  } catch (err) {
    check(String(err.message).includes("DAPR_SIDECAR_COULD_NOT_BE_STARTED"),
          "gRPC, a wrong token: the SDK's start() fails", err.message);
  } finally {
    Settings.daprSidecarPollingDelayMs = pollMs;
  }
  wrong.daprClient.setIsInitialized(true);
  await expectGrpcRefused(wrong.lock.lock(STORE, "orders/refused-grpc", "intruder", 60), 16,
                          "gRPC, a wrong token: lock refused UNAUTHENTICATED");
  await expectGrpcRefused(wrong.lock.unlock(STORE, res, "owner-a"), 16,
                          "gRPC, a wrong token: unlock refused UNAUTHENTICATED");
  r = await client.lock.lock(STORE, "orders/refused-grpc", "owner-a", 60);
  check(r.success === true, "gRPC: the refused calls took nothing", JSON.stringify(r));
  await client.lock.unlock(STORE, "orders/refused-grpc", "owner-a");
  await client.stop();
  if (failures.length) console.error(fs.readFileSync(sidecarLog, "utf8"));
}

async function main() {
  await withSidecar({ binary: sidelock, name: "dapr-sdk", appId: "orders-app",
                      tokens: `${TOKEN}\n${SCOPED} prefixes=orders~\n` },
                    async ({ ports, redis, sidecar, sidecarLog }) => {
    await exercise(ports.http, sidecarLog);
    process.env.DAPR_API_TOKEN = TOKEN;  // exercise() ends without one
    await exerciseGrpc(ports.grpc, sidecarLog);

    // Not ready: Redis gone, the probes answer 500 as /readyz answers 503.
    await stop(redis);
    const down = await until(async () =>
        (await fetch(`http://127.0.0.1:${ports.http}/v1.0/healthz`)).status === 500, 20000);
    check(down, "/v1.0/healthz answers 500 while Redis is down");
    const outbound = await fetch(`http://127.0.0.1:${ports.http}/v1.0/healthz/outbound`);
    check(outbound.status === 500 &&
              (await outbound.json()).errorCode === "ERR_OUTBOUND_HEALTH_NOT_READY",
          "/v1.0/healthz/outbound answers 500 ERR_OUTBOUND_HEALTH_NOT_READY");
    const code = await stop(sidecar);
    check(code === 0, "the sidecar exits 0", String(code));
  });
  finish(`dapr-sdk: ${checkCount()} checks passed with @dapr/dapr over HTTP and gRPC`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
