// What the tests of this folder share (sdk_test.mjs, grpc_api_test.mjs): checks that count and
// collect failures, free ports, polling, stopping a child process, a redis-server on a free port.
import { spawn } from "node:child_process";
import net from "node:net";

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

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
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
