// sidelock from Node.js (18 or later), no packages: the built-in fetch.
//
//   node sidelock_example.mjs acquire [NAME]   wait for a lock (retrying safely with a request_id),
//                                              pass its fencing token on, release it
//   node sidelock_example.mjs stream [NAME]    hold a lock for as long as a connection stays open,
//                                              and stop working the moment the sidecar says "lost"
//
// Environment: SIDELOCK_URL (default http://127.0.0.1:7411), SIDELOCK_AUTH_TOKEN (when the sidecar
// has bearer tokens), SIDELOCK_WORK_MS (how long the stream example works, default 3000).
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

const SIDECAR = (process.env.SIDELOCK_URL || "http://127.0.0.1:7411").replace(/\/$/, "");

function headers() {
  const h = { "Content-Type": "application/json" };
  if (process.env.SIDELOCK_AUTH_TOKEN) h.Authorization = `Bearer ${process.env.SIDELOCK_AUTH_TOKEN}`;
  return h;
}

// One request; resolves to { status, answer }. Rejects when no answer came (connection refused,
// reset, timed out).
async function request(method, path, body, timeoutMs = 10000) {
  const res = await fetch(SIDECAR + path, {
    method,
    headers: headers(),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  return { status: res.status, answer: await res.json() };
}

// Waits up to waitMs for the lock. A request that got no answer may still have been granted, so
// it is sent again with the same request_id: the sidecar then answers with the grant it already
// made instead of making a second one (or finding the lock held by us).
async function acquire(name, ttlMs, waitMs, attempts = 8) {
  const body = { ttl_ms: ttlMs, wait_ms: waitMs, request_id: randomUUID() };
  for (let attempt = 1; attempt <= attempts; attempt++) {
    let status = null;
    let answer;
    try {
      // The sidecar answers within wait_ms; give it a little more before calling it lost.
      ({ status, answer } = await request("POST", `/v1/locks/${name}/acquire`, body, waitMs + 5000));
    } catch (e) {
      answer = { error: e.cause?.code || e.cause?.message || e.message };
    }
    if (status === 200) return answer;
    if (status === 409) return null; // somebody else held it for all of wait_ms
    if (status !== null && status !== 429 && status !== 503) {
      throw new Error(`acquire refused: ${status} ${JSON.stringify(answer)}`);
    }
    // No answer, a queue limit (429) or the backend down (503): try again, same request_id.
    const delayMs = answer.retry_after_ms ?? 200 * attempt;
    console.log(`attempt ${attempt}: ${answer.error}; retrying in ${(delayMs / 1000).toFixed(1)}s with the same request_id`);
    await sleep(delayMs);
  }
  throw new Error(`no answer from the sidecar at ${SIDECAR}`);
}

// Stands in for the resource the lock protects (a database row, a file on shared storage): it
// remembers the highest fencing token it has seen and refuses writes with a lower one, so a
// holder that was paused past its TTL cannot overwrite the work of the next holder. In SQL:
// UPDATE ... SET fence = :token WHERE id = :id AND fence <= :token.
// Tokens are below 2^53, so a JavaScript number holds them exactly.
class FencedStore {
  fence = 0;
  value = null;
  write(token, value) {
    if (token < this.fence) return false;
    this.fence = token;
    this.value = value;
    return true;
  }
}

async function acquireExample(name) {
  const grant = await acquire(name, 10000, 30000);
  if (grant === null) {
    console.log(`${name} is busy; try later`);
    return 75;
  }
  const token = grant.token;
  console.log(`acquired ${name} token=${token}`);
  const store = new FencedStore();
  if (store.write(token, `report of ${new Date().toISOString().slice(0, 10)}`)) {
    console.log(`stored with fence token ${token}`);
  }
  if (!store.write(token - 1, "a late write")) console.log(`a stale writer with token ${token - 1} is refused`);
  const { status, answer } = await request("POST", `/v1/locks/${name}/release`, { owner: grant.owner });
  console.log(status === 200 ? `released ${name}` : `release: ${status} ${JSON.stringify(answer)}`);
  return 0;
}

async function streamExample(name) {
  const workMs = Number(process.env.SIDELOCK_WORK_MS || 3000);
  const closer = new AbortController(); // aborting closes the connection: the lock is released
  const res = await fetch(`${SIDECAR}/v1/locks/${name}/acquire`, {
    method: "POST",
    headers: headers(),
    body: JSON.stringify({ ttl_ms: 5000, wait_ms: 30000, hold: "stream" }),
    signal: closer.signal,
  });
  if (res.status !== 200) {
    console.log(`not acquired: ${res.status} ${JSON.stringify(await res.json())}`);
    return 75;
  }
  // The answer is one JSON object per line: "acquired" first, then what happens to the lease.
  let lost = null;
  let holding;
  const acquired = new Promise((resolve) => (holding = resolve));
  const watch = (async () => {
    const decoder = new TextDecoder();
    let buffered = "";
    try {
      for await (const chunk of res.body) {
        buffered += decoder.decode(chunk, { stream: true });
        let newline;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const event = JSON.parse(buffered.slice(0, newline));
          buffered = buffered.slice(newline + 1);
          if (event.event === "acquired") holding(event);
          if (event.event === "lost" || event.event === "released") {
            lost = event.reason || event.event;
            return;
          }
        }
      }
      lost = "the stream ended";
    } catch (e) {
      if (!closer.signal.aborted) lost = `the stream broke: ${e.message}`;
    }
  })();

  const first = await acquired;
  console.log(`holding ${name} token=${first.token}`);
  const deadline = Date.now() + workMs;
  while (Date.now() < deadline) {
    await sleep(100); // one step of work, checking between steps
    if (lost !== null) {
      console.log(`lost ${name}: ${lost}; stopping work`);
      return 76;
    }
  }
  closer.abort(); // closing the connection releases the lock at once
  await watch;
  console.log(`done; closing the stream released ${name}`);
  return 0;
}

const mode = process.argv[2] || "acquire";
const name = process.argv[3] || (mode === "stream" ? "nightly-report" : "orders-42");
const run = { acquire: acquireExample, stream: streamExample }[mode];
if (!run) {
  console.log("usage: node sidelock_example.mjs acquire|stream [NAME]");
  process.exitCode = 64;
} else {
  process.exitCode = await run(name);
}
