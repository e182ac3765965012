// What the tests of this folder share (sdk_test.mjs, grpc_api_test.mjs): checks that count and
// collect failures, free ports, polling, stopping a child process, a redis-server on a free port,
// and a sidecar (HTTP, gRPC, tokens, one Dapr store) on its own redis-server, stopped afterwards.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

export const failures = [];
let count = 0;
export const checkCount = () => count;

export function check(ok, what, detail = "") {
  count++;
  if (!ok) {
    failures.push(what);
    console.error(`FAIL: ${what}${detail ? ": " + detail : ""}`);
  }
}

// A port is handed out once per process (bind(0) may give a just-closed port again, and a test
// picks several before any is bound) and comes from below the kernel's ephemeral range, which
// outgoing connections' local ports come from (as tests/support/redis_server.cc's pickFreePort).
const handedOut = new Set();

function ephemeralLow() {
  try {
    const range = fs.readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8");
    return Number(range.split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

function bindable(port) {
  // Not with net: libuv binds with SO_REUSEADDR, which succeeds over a port another test holds
  // reserved (bound, not listening: PortReservation in tests/support/redis_server.h). A plain
  // bind does not.
  const probe = "import socket, sys; socket.socket().bind(('127.0.0.1', int(sys.argv[1])))";
  return spawnSync("python3", ["-c", probe, String(port)]).status === 0;
}

export async function freePort() {
  const below = ephemeralLow();
  for (let attempt = 0; attempt < 1000 && below - 10000 > 1000; attempt++) {
    const port = 10000 + Math.floor(Math.random() * (below - 10000));
    if (!handedOut.has(port) && bindable(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no free port below the ephemeral range");
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(fn, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      if (await fn()) return true;
    } catch {
      // not yet
    }
    await sleep(50);
  }
  return false;
}

export function stop(proc) {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve(proc.exitCode);
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15000);
    proc.once("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
    proc.kill("SIGTERM");
  });
}

/// A redis-server on `port` with its files in `dir`, once it accepts connections.
export async function startRedis(port, dir) {
  const redis = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no", "--dir", dir],
                      { stdio: "ignore" });
  const up = await until(() => new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1", () => { s.destroy(); resolve(true); });
    s.on("error", () => resolve(false));
  }), 10000);
  if (!up) {
    await stop(redis);
    throw new Error("redis-server did not start");
  }
  return redis;
}

/// Runs `body({ ports: {redis, http, grpc}, redis, sidecar, sidecarLog })` against a sidelock
/// (`binary`) listening on TCP for HTTP and for gRPC, backed by its own redis-server, with the
/// bearer tokens `tokens` (the text of a tokens file) and the Dapr store "lockstore" of `appId`;
/// once it is ready (/readyz). Every process is stopped and the temporary folder removed after,
/// whatever happened (`body` may stop them itself).
export async function withSidecar({ binary, name, tokens, appId }, body) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `sidelock-${name}-`));
  const procs = [];
  try {
    const ports = { redis: await freePort(), http: await freePort(), grpc: await freePort() };
    const redis = await startRedis(ports.redis, tmp);
    procs.push(redis);
    const config = path.join(tmp, "sidelock.yaml");
    fs.writeFileSync(config,
        `listen:\n  tcp: "127.0.0.1:${ports.http}"\n  unix: ""\n  grpc: "127.0.0.1:${ports.grpc}"\n` +
        `backend:\n  type: redis\n  nodes: ["127.0.0.1:${ports.redis}"]\n` +
        `auth:\n  tokens_env: TEST_TOKENS\n` +
        `dapr:\n  stores: ["lockstore"]\n  app_id: ${appId}\n`);
    const sidecarLog = path.join(tmp, "sidecar.log");
    const out = fs.openSync(sidecarLog, "w");
    const sidecar = spawn(binary, ["--config", config], {
      stdio: ["ignore", out, out],
      env: { ...process.env, TEST_TOKENS: tokens,
             SIDELOCK_DAPR_OWNER_SECRET: `${name}-test-secret-0123456789` },
    });
    procs.push(sidecar);
    const ready = await until(async () =>
        (await fetch(`http://127.0.0.1:${ports.http}/readyz`)).status === 200, 20000);
    if (!ready) throw new Error("the sidecar did not become ready:\n" + fs.readFileSync(sidecarLog));
    await body({ ports, redis, sidecar, sidecarLog });
  } finally {
    for (const p of procs.reverse()) await stop(p);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

/// Ends the test: exit 1 naming the count of failed checks, else prints `passed`.
export function finish(passed) {
  if (failures.length) {
    console.error(`${failures.length} of ${checkCount()} checks failed`);
    process.exit(1);
  }
  console.log(passed);
}
