// Validates every Kubernetes object the project ships against the Kubernetes API schemas of a
// current release (helm/sidelock/README.md, "Kubernetes API schemas"): every document of every Helm
// golden (tests/helm/golden/, one per value set) and the plain YAML under deploy/kubernetes/; a
// Kubernetes object anywhere else under deploy/ fails until it is listed here. The schemas are the
// packages pinned in ./package.json (kubernetes-models: Kubernetes v1.36.0;
// @kubernetes-models/prometheus-operator: prometheus-operator v0.91.0), never written here.
//
// Strict: the packages' validators accept fields their schemas do not know (the Kubernetes OpenAPI
// schemas do not close their objects), so each document is validated through proxies that record
// which fields the validator looked up; a field it never looked up is not in the schema and fails
// (`readinesProbe`, or a `readinessProbe` directly under a pod spec). A kind the packages do not
// have fails, and so does a deprecated API version (the packages still carry removed ones such as
// extensions/v1beta1).
//
// Before the real files, a self-test mutates a real golden in memory (a misspelt probe, a probe in
// the pod spec, a wrong type, an unknown kind) and requires each mutation to fail, so the checker
// can never pass everything.
//
// Usage: node validate.mjs REPO_ROOT    (modules from ./node_modules: ./run.sh installs them)
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

// Below these, something stopped feeding documents to the checker (goldens moved, a glob broke).
const kMinDocuments = 40;
const kMinGoldens = 10;

// The schema packages, tried in this order for an apiVersion + kind.
const kPackages = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

// deploy/kubernetes files of whole API objects, validated as they are.
const kDeployFiles = ["sidecar-snippet.yaml", "kustomize/example/deployment.yaml"];

// deploy/kubernetes kustomize patches (partial objects), validated applied to the object named.
const kDeployPatches = {
  "kustomize/sidelock/sidecar-patch.yaml": "kustomize/example/deployment.yaml",
};

// deploy/kubernetes files that are not Kubernetes API objects, and why. Any other *.yaml there
// fails until it is added to one of the three lists, so a new file is never skipped silently.
const kDeploySkipped = {
  "kustomize/example/kustomization.yaml":
    "kustomize's own configuration (kustomize.config.k8s.io Kustomization), not an API object",
  "kustomize/sidelock/kustomization.yaml":
    "kustomize's own configuration (kustomize.config.k8s.io Component), not an API object",
  "kustomize/sidelock/sidelock.yaml":
    "sidelock's config file (the configMapGenerator's input; helm_chart runs --check-config on it)",
};

// -------------------------------------------------------------------------------------------------
// Looking up a kind.

const classCache = new Map();

// The model class of apiVersion + kind, with the file it came from, or an error message.
async function modelClass(apiVersion, kind) {
  const key = `${apiVersion} ${kind}`;
  if (classCache.has(key)) return classCache.get(key);
  let found = { error: `unknown kind: no schema package has ${apiVersion} ${kind}` };
  const valid = typeof apiVersion === "string" && typeof kind === "string" &&
    /^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) && /^[A-Za-z0-9]+$/.test(kind);
  if (!valid) {
    found = { error: `missing or malformed apiVersion (${apiVersion}) or kind (${kind})` };
  }
  for (const pkg of valid ? kPackages : []) {
    const spec = `${pkg}/${apiVersion}/${kind}`;
    let module;
    let file;
    try {
      file = fileURLToPath(import.meta.resolve(spec));
      module = await import(spec);
    } catch {
      continue;  // not exported by this package
    }
    const cls = module[kind];
    // The group/version folders also export the objects' parts (PodSpec, Container): only a class
    // that declares this apiVersion and kind is a top-level API object.
    if (typeof cls !== "function" || cls.apiVersion !== apiVersion || cls.kind !== kind) continue;
    if (isDeprecated(file, kind)) {
      found = { error: `deprecated API version: ${apiVersion} ${kind} (@deprecated in ${pkg})` };
    } else {
      found = { cls, pkg };
    }
    break;
  }
  classCache.set(key, found);
  return found;
}

// True when the package's type declaration marks the class @deprecated (removed or deprecated group
// versions, from the upstream OpenAPI descriptions).
function isDeprecated(jsFile, kind) {
  let dts;
  try {
    dts = readFileSync(jsFile.replace(/\.js$/, ".d.ts"), "utf8");
  } catch {
    return false;
  }
  const at = dts.indexOf(`export declare class ${kind} `);
  if (at < 0) return false;
  const doc = dts.slice(0, at).match(/\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*$/);
  return doc !== null && doc[1].includes("@deprecated");
}

// -------------------------------------------------------------------------------------------------
// Strict validation.

// A copy of value whose objects are proxies recording each field the validator reads (a property
// read or an `in` test). Returns the copy and the list of {path, target, read} records, one per
// object.
function tracked(value, path = "", records = []) {
  if (Array.isArray(value)) {
    return { copy: value.map((v, i) => tracked(v, `${path}[${i}]`, records).copy), records };
  }
  if (value === null || typeof value !== "object") return { copy: value, records };
  const target = {};
  for (const [k, v] of Object.entries(value)) {
    target[k] = tracked(v, path ? `${path}.${k}` : k, records).copy;
  }
  const record = { path, target, read: new Set() };
  records.push(record);
  const copy = new Proxy(target, {
    get(t, k, receiver) {
      if (typeof k === "string") record.read.add(k);
      return Reflect.get(t, k, receiver);
    },
    has(t, k) {
      if (typeof k === "string") record.read.add(k);
      return Reflect.has(t, k);
    },
  });
  return { copy, records };
}

// The problems of one document (empty when it is valid).
async function problemsOf(doc) {
  const found = await modelClass(doc?.apiVersion, doc?.kind);
  if (found.error) return [found.error];
  const problems = [];
  const { copy, records } = tracked(doc);
  try {
    found.cls.prototype.validate.call(copy);
  } catch (e) {
    if (!e || !Array.isArray(e.errors)) throw e;
    problems.push(`schema: ${e.message}`);
  }
  // A field the validator never read is not in the schema. Maps (labels, annotations, data,
  // resources) pass: the validator reads each of their values to check its type. (A free-form field
  // whose schema allows anything would not be read and would fail here, loudly: none is used
  // today.) Only the outermost unknown field of a branch is reported (nothing below it was read).
  const unknownPaths = [];
  for (const r of records) {
    for (const k of Object.keys(r.target)) {
      if (!r.read.has(k)) unknownPaths.push(r.path ? `${r.path}.${k}` : k);
    }
  }
  for (const p of unknownPaths.sort()) {
    if (!unknownPaths.some((q) => q !== p && p.startsWith(q) && /^[.[]/.test(p.slice(q.length)))) {
      problems.push(`unknown field ${p} (not in the ${doc.apiVersion} ${doc.kind} schema)`);
    }
  }
  return problems;
}

// -------------------------------------------------------------------------------------------------
// Inputs.

// A problem with the files to validate (as opposed to a bug here): reported without a stack.
class InputError extends Error {}

function yamlDocuments(file) {
  const docs = [];
  parseAllDocuments(readFileSync(file, "utf8")).forEach((d, i) => {
    if (d.errors.length) throw new InputError(`${file}: document ${i + 1}: ${d.errors[0].message}`);
    const value = d.toJS();
    if (value !== null && value !== undefined) docs.push(value);
  });
  return docs;
}

// A kustomize strategic merge patch laid over its target, as far as the patches under deploy/ need:
// maps merge, lists of named objects (containers, volumes, ports, env) merge by name, anything else
// is replaced. The target keeps its name (kustomize does the same).
function strategicMerge(target, patch) {
  const named = (x) => x && typeof x === "object" && typeof x.name === "string";
  if (Array.isArray(target) && Array.isArray(patch) && [...target, ...patch].every(named)) {
    const merged = patch.map((p) => {
      const t = target.find((x) => x.name === p.name);
      return t ? strategicMerge(t, p) : p;
    });
    return [...merged, ...target.filter((t) => !patch.some((p) => p.name === t.name))];
  }
  if (target && patch && typeof target === "object" && typeof patch === "object" &&
      !Array.isArray(target) && !Array.isArray(patch)) {
    const out = { ...target };
    for (const [k, v] of Object.entries(patch)) {
      out[k] = k in target ? strategicMerge(target[k], v) : v;
    }
    return out;
  }
  return patch;
}

function listYaml(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...listYaml(p));
    else if (/\.ya?ml$/.test(name)) out.push(p);
  }
  return out;
}

// [{source, doc}] of every document to validate, and the skipped files with their reasons.
function inputs(repo) {
  const items = [];
  const goldenDir = join(repo, "tests/helm/golden");
  const goldens = readdirSync(goldenDir).filter((f) => f.endsWith(".yaml")).sort();
  for (const f of goldens) {
    const docs = yamlDocuments(join(goldenDir, f));
    if (docs.length === 0) throw new InputError(`tests/helm/golden/${f}: no document`);
    docs.forEach((doc, i) => items.push({ source: `tests/helm/golden/${f} #${i + 1}`, doc }));
  }
  if (goldens.length < kMinGoldens) {
    throw new InputError(`only ${goldens.length} goldens (at least ${kMinGoldens} expected)`);
  }

  const kube = join(repo, "deploy/kubernetes");
  const rel = (p) => relative(kube, p);
  for (const f of kDeployFiles) {
    yamlDocuments(join(kube, f)).forEach((doc, i) =>
      items.push({ source: `deploy/kubernetes/${f} #${i + 1}`, doc }));
  }
  for (const [f, onto] of Object.entries(kDeployPatches)) {
    const [target] = yamlDocuments(join(kube, onto));
    const [patch] = yamlDocuments(join(kube, f));
    const merged = strategicMerge(target, patch);
    merged.metadata = { ...merged.metadata, name: target.metadata.name };
    items.push({ source: `deploy/kubernetes/${f} (applied to ${onto})`, doc: merged });
  }
  const known = [...kDeployFiles, ...Object.keys(kDeployPatches), ...Object.keys(kDeploySkipped)];
  for (const p of listYaml(kube)) {
    if (!known.includes(relative(kube, p))) {
      const file = `deploy/kubernetes/${relative(kube, p)}`;
      throw new InputError(`${file}: neither validated nor skipped with a reason ` +
                           "(list it in tests/helm/kube-schema/validate.mjs)");
    }
  }
  const skipped = Object.entries(kDeploySkipped).map(
    ([f, why]) => `deploy/kubernetes/${f}: ${why}`,
  );
  // The rest of deploy/ is compose, Prometheus and systemd files; make sure no Kubernetes object
  // hides there (the alert rules reach Kubernetes as the chart's PrometheusRule, validated in its
  // golden).
  for (const p of listYaml(join(repo, "deploy"))) {
    if (p.startsWith(kube + "/")) continue;
    const isObject = (d) => d && typeof d === "object" && "apiVersion" in d && "kind" in d;
    if (yamlDocuments(p).some(isObject)) {
      throw new InputError(`${relative(repo, p)}: a Kubernetes object outside deploy/kubernetes, ` +
                           "not validated (list it in tests/helm/kube-schema/validate.mjs)");
    }
  }
  return { items, skipped };
}

// -------------------------------------------------------------------------------------------------
// The self-test: real goldens must pass, and each mutation of one must fail.

const probed = (d) => d.spec?.template?.spec?.containers?.find((c) => c.readinessProbe);
const kMutations = [
  {
    what: "a misspelt field (readinesProbe on a container)",
    of: probed,
    mutate: (d) => {
      const c = probed(d);
      c.readinesProbe = c.readinessProbe;
      delete c.readinessProbe;
    },
  },
  {
    what: "a probe in the wrong place (readinessProbe directly under the pod spec)",
    of: probed,
    mutate: (d) => {
      const c = probed(d);
      d.spec.template.spec.readinessProbe = c.readinessProbe;
      delete c.readinessProbe;
    },
  },
  {
    what: 'a wrong type (replicas: "two")',
    of: probed,
    mutate: (d) => { d.spec.replicas = "two"; },
  },
  { what: "an unknown kind (Deploymnet)", of: probed, mutate: (d) => { d.kind = "Deploymnet"; } },
  {
    what: "a removed API version (extensions/v1beta1)",
    of: probed,
    mutate: (d) => { d.apiVersion = "extensions/v1beta1"; },
  },
  {
    what: "a misspelt field in a prometheus-operator object (PodMonitor endpoint `intervall`)",
    of: (d) => d.kind === "PodMonitor" && d.spec?.podMetricsEndpoints?.[0],
    mutate: (d) => { d.spec.podMetricsEndpoints[0].intervall = "30s"; },
  },
];

async function selfTest(items) {
  const failures = [];
  for (const m of kMutations) {
    const base = items.find((it) => it.source.startsWith("tests/helm/golden/") && m.of(it.doc));
    if (!base) {
      failures.push(`self-test: no golden to mutate for ${m.what}`);
      continue;
    }
    const before = await problemsOf(structuredClone(base.doc));
    if (before.length) failures.push(`self-test: ${base.source} fails unmutated: ${before[0]}`);
    const doc = structuredClone(base.doc);
    m.mutate(doc);
    const problems = await problemsOf(doc);
    if (problems.length === 0) {
      failures.push(`self-test: ${base.source} with ${m.what} PASSED: the checker is broken`);
    } else {
      console.log(`self-test: ${m.what}: rejected as expected (${problems[0]})`);
    }
  }
  return failures;
}

// -------------------------------------------------------------------------------------------------

async function main() {
  const repo = process.argv[2];
  if (!repo) {
    console.error("usage: node validate.mjs REPO_ROOT");
    return 2;
  }
  const { items, skipped } = inputs(repo);
  const failures = await selfTest(items);

  const kinds = new Map();
  let invalid = 0;
  for (const it of items) {
    const problems = await problemsOf(it.doc);
    if (problems.length) invalid++;
    const what = `${it.source} (${it.doc?.kind} ${it.doc?.metadata?.name})`;
    for (const p of problems) failures.push(`${what}: ${p}`);
    const found = classCache.get(`${it.doc?.apiVersion} ${it.doc?.kind}`);
    const k = `${it.doc?.apiVersion} ${it.doc?.kind}${found?.pkg ? ` (${found.pkg})` : ""}`;
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  const versions = [...kPackages, "yaml"].map((p) => `${p}@${JSON.parse(readFileSync(
    new URL(`./node_modules/${p}/package.json`, import.meta.url))).version}`);
  console.log(`schemas: ${versions.join(", ")}`);
  const valid = items.length - invalid;
  console.log(`validated ${items.length} documents (${valid} valid, ${invalid} invalid):`);
  for (const [k, n] of [...kinds].sort()) console.log(`  ${String(n).padStart(3)}  ${k}`);
  for (const s of skipped) console.log(`skipped ${s}`);
  if (items.length < kMinDocuments) {
    failures.push(`only ${items.length} documents validated (expected >= ${kMinDocuments})`);
  }
  for (const f of failures) console.log(`FAIL ${f}`);
  console.log(failures.length ? `kube-schema: FAILED, ${failures.length} problem(s)`
                              : "kube-schema: all valid");
  return failures.length ? 1 : 0;
}

process.exitCode = await main().catch((e) => {
  console.error(`kube-schema: FAILED: ${e instanceof InputError ? e.message : e.stack ?? e}`);
  return 1;
});
