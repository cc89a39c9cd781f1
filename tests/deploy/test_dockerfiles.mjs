// tests/deploy: the Dockerfiles of deploy/docker lint clean (dockerfile-utils; shellcheck on
// every RUN and HEALTHCHECK command and on the scripts), have the shape every image needs
// (dockerfile_checks.mjs), and build what the CMake build makes. The CUDA image cannot be built
// here (no registry for its base): its build stage is checked against the CPU images', which
// tests/deploy/test_images.sh builds and runs. Each check is also run on a broken Dockerfile.
// Run: node --test tests/deploy/test_dockerfiles.mjs   (ctest -R deploy_dockerfiles)

import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

const SRC = process.env.ZT_SOURCE_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const DOCKER = path.join(SRC, "deploy/docker");
const FILES = ["Dockerfile.coordinator", "Dockerfile.agent-cpu", "Dockerfile.agent"];
const SCRIPTS = [path.join(DOCKER, "zt-build.sh"), path.join(DOCKER, "build-images.sh"), path.join(SRC, "tests/deploy/test_images.sh")];

let d = null;
let missing = null;
try {
  d = await import("./dockerfile_checks.mjs");
} catch (e) {
  missing = `the npm packages are not installed (run npm ci, or scripts/install-deps.sh): ${e.message.split("\n")[0]}`;
}
function unavailable(t, needShellcheck = false) {
  let why = missing;
  if (!why && needShellcheck && !d.shellcheckAvailable()) why = "shellcheck is not installed (scripts/install-deps.sh installs it)";
  if (!why) return false;
  if (process.env.CI) assert.fail(`the Dockerfile checks cannot run in CI: ${why}`);
  t.skip(`zt-deploy-unavailable: ${why}`);
  return true;
}

const text = (f) => fs.readFileSync(path.join(DOCKER, f), "utf8");
const ztBuild = () => fs.readFileSync(path.join(DOCKER, "zt-build.sh"), "utf8");

for (const f of FILES) {
  test(`${f}: dockerfile-utils finds nothing`, (t) => {
    if (unavailable(t)) return;
    assert.deepEqual(d.lint(text(f)), []);
  });
  test(`${f}: shellcheck finds nothing in its RUN and HEALTHCHECK commands`, (t) => {
    if (unavailable(t, true)) return;
    const snippets = d.shellSnippets(d.parseDockerfile(text(f)), f);
    assert.ok(snippets.length >= 4, `only ${snippets.length} shell commands found`);
    assert.deepEqual(d.shellcheckSnippets(snippets), []);
  });
  test(`${f}: stages, user, HEALTHCHECK, labels, no secret, entrypoint built`, (t) => {
    if (unavailable(t)) return;
    assert.deepEqual(d.checkStructure(d.parseDockerfile(text(f)), { targets: d.buildTargets(ztBuild()), file: f }), []);
  });
  test(`${f}: its VERSION label defaults to the project's version`, (t) => {
    if (unavailable(t)) return;
    const version = fs.readFileSync(path.join(SRC, "CMakeLists.txt"), "utf8").match(/project\(zerotrain VERSION ([0-9.]+)/)[1];
    const final = d.parseDockerfile(text(f)).stages.at(-1);
    assert.ok(final.instrs.some((i) => i.keyword === "ARG" && i.content === `VERSION=${version}`), `no ARG VERSION=${version} in the runtime stage`);
  });
  test(`${f}: copies every module the top CMakeLists.txt builds`, (t) => {
    if (unavailable(t)) return;
    const modules = d.cmakeModules(fs.readFileSync(path.join(SRC, "CMakeLists.txt"), "utf8"));
    assert.ok(modules.length >= 5, `the foreach(dir ...) of CMakeLists.txt was not found`);
    const build = d.parseDockerfile(text(f)).stages[0];
    const copied = build.instrs.filter((i) => i.keyword === "COPY").map((i) => i.words.filter((w) => !w.startsWith("--"))[0]);
    for (const m of ["CMakeLists.txt", ...modules]) {
      if (!fs.existsSync(path.join(SRC, m))) continue;
      assert.ok(copied.includes(m), `the build stage does not COPY ${m}`);
    }
  });
}

test("shellcheck finds nothing in the scripts", (t) => {
  if (unavailable(t, true)) return;
  assert.deepEqual(d.shellcheckFiles(SCRIPTS), []);
});

test("the CPU images share one build stage, and the CUDA image's differs only in its base and CUDA", (t) => {
  if (unavailable(t)) return;
  const coord = d.parseDockerfile(text("Dockerfile.coordinator"));
  const cpu = d.parseDockerfile(text("Dockerfile.agent-cpu"));
  const cuda = d.parseDockerfile(text("Dockerfile.agent"));
  assert.equal(d.buildStageText(cpu), d.buildStageText(coord), "the CPU images' build stages differ: they would not share the cache, and the image test would not cover both");
  assert.equal(d.buildStageText(cuda, { normaliseCuda: true }), d.buildStageText(cpu), "the CUDA build stage runs other steps than the CPU one that the image test builds");
  assert.ok(cuda.stages[0].instrs.some((i) => i.keyword === "RUN" && /zt-build build ON /.test(i.content)), "the CUDA image does not build with CUDA on");
  assert.ok(cpu.stages[0].instrs.some((i) => i.keyword === "RUN" && /zt-build build OFF /.test(i.content)));
  // the CUDA bases: NVIDIA's devel image with cuDNN to build, its runtime twin to run
  const build = d.argDefault(cuda, "BUILD_IMAGE");
  const base = d.argDefault(cuda, "BASE_IMAGE");
  assert.match(build, /^nvidia\/cuda:[0-9.]+-cudnn-devel-ubuntu[0-9.]+$/);
  assert.match(base, /^nvidia\/cuda:[0-9.]+-cudnn-runtime-ubuntu[0-9.]+$/);
  assert.equal(build.replace("-devel-", "-runtime-"), base, "build and runtime bases of the CUDA image differ in version or OS");
  assert.equal(cuda.stages[0].from, "${BUILD_IMAGE}");
  assert.equal(cuda.stages[1].from, "${BASE_IMAGE}");
  for (const p of [coord, cpu]) assert.match(d.argDefault(p, "BASE_IMAGE"), /^debian:12[.0-9]*-slim$/);
});

test("the images' entrypoints are binaries the build makes", (t) => {
  if (unavailable(t)) return;
  const targets = d.buildTargets(ztBuild());
  assert.deepEqual([...targets].sort(), ["zagent", "zcoord", "zctl", "zworker"]);
  // each target is a CMake executable...
  const cmake = ["coordinator", "agent", "engine", "cli"].map((m) => fs.readFileSync(path.join(SRC, m, "CMakeLists.txt"), "utf8")).join("\n");
  for (const t2 of targets) assert.match(cmake, new RegExp(`add_executable\\(${t2}\\b`), `no add_executable(${t2}) in the CMake build`);
  // ...and, where this build made it, a program in its bin folder
  const bin = process.env.ZT_BIN;
  const expect = { "Dockerfile.coordinator": ["zcoord", "zctl"], "Dockerfile.agent-cpu": ["zagent", "zworker", "zctl"], "Dockerfile.agent": ["zagent", "zworker", "zctl"] };
  for (const f of FILES) {
    const parsed = d.parseDockerfile(text(f));
    const final = parsed.stages[parsed.stages.length - 1];
    const ep = final.instrs.filter((i) => i.keyword === "ENTRYPOINT").pop();
    const held = d.runtimeBinaries(parsed).map((b) => b.target).sort();
    assert.deepEqual(held, [...expect[f]].sort(), `${f} holds ${held}`);
    const entry = path.basename(ep.json[0]);
    assert.ok(targets.includes(entry), `${f}: ENTRYPOINT ${ep.json[0]}`);
    if (bin && fs.existsSync(bin)) assert.ok(fs.existsSync(path.join(bin, entry)), `${f}: the build made no ${entry} in ${bin}`);
  }
});

test("zt-build.sh installs only packages scripts/install-deps.sh also installs", (t) => {
  if (unavailable(t)) return;
  const deps = fs.readFileSync(path.join(SRC, "scripts/install-deps.sh"), "utf8");
  const list = deps.slice(deps.indexOf("pkgs=("), deps.indexOf(")\n", deps.indexOf("pkgs=("))).replace(/#.*$/gm, "");
  const known = new Set(list.split(/\s+/));
  const pkgs = d.buildPackages(ztBuild());
  assert.ok(pkgs.length >= 10, "BUILD_PACKAGES not found in zt-build.sh");
  assert.deepEqual(pkgs.filter((p) => !known.has(p)), []);
});

test("build-images.sh builds from a context holding every module", (t) => {
  if (unavailable(t)) return;
  const s = fs.readFileSync(path.join(DOCKER, "build-images.sh"), "utf8");
  const tarLine = s.split("\n").find((l) => /tar -C "\$root" -c /.test(l));
  assert.ok(tarLine, "no tar of the context in build-images.sh");
  for (const m of ["CMakeLists.txt", ...d.cmakeModules(fs.readFileSync(path.join(SRC, "CMakeLists.txt"), "utf8")), "deploy/docker"]) {
    if (fs.existsSync(path.join(SRC, m))) assert.ok(tarLine.split(/\s+/).includes(m), `build-images.sh leaves ${m} out of the context`);
  }
  const mk = fs.readFileSync(path.join(SRC, "Makefile"), "utf8");
  assert.match(mk, /^images:.*\n\tdeploy\/docker\/build-images\.sh/m, "no `make images` target running deploy/docker/build-images.sh");
});

// ---- the checks catch what they are for -------------------------------------------------------

const CPU = "Dockerfile.agent-cpu";
const BROKEN = [
  ["an unknown instruction", (s) => s.replace("ENTRYPOINT", "ENTRYPONT"), (s) => d.lint(s), /Unknown instruction: ENTRYPONT/],
  ["a HEALTHCHECK with a bad duration", (s) => s.replace("--interval=15s", "--interval=15"), (s) => d.lint(s), /duration/i],
  ["an unquoted variable in a RUN line", (s) => s.replace("RUN sh /usr/local/bin/zt-build deps", "RUN cd $HOME && sh /usr/local/bin/zt-build deps"), (s) => d.shellcheckSnippets(d.shellSnippets(d.parseDockerfile(s), CPU)), /SC2086/],
  ["a broken HEALTHCHECK command", (s) => s.replace('grep -q ."]', 'grep -q . ]]"]'), (s) => d.shellcheckSnippets(d.shellSnippets(d.parseDockerfile(s), CPU)), /HEALTHCHECK.*SC/],
  ["running as root", (s) => s.replace("USER 10001:10001", "USER root"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /runs as root/],
  ["no USER", (s) => s.replace("USER 10001:10001\n", ""), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /sets no USER/],
  ["a base image written in", (s) => s.replace("FROM ${BASE_IMAGE} AS build", "FROM debian:12-slim AS build"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /must be a build argument/],
  ["no HEALTHCHECK", (s) => s.replace(/HEALTHCHECK[^\n]*\\\n[^\n]*\n/, ""), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /no HEALTHCHECK/],
  ["a missing label", (s) => s.replace("org.opencontainers.image.revision=", "org.opencontainers.image.rev="), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /no LABEL org.opencontainers.image.revision/],
  ["an entrypoint the build does not make", (s) => s.replace('ENTRYPOINT ["/usr/local/bin/zagent"]', 'ENTRYPOINT ["/usr/local/bin/zagentd"]'), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /ENTRYPOINT \/usr\/local\/bin\/zagentd is not a binary/],
  ["an entrypoint in shell form", (s) => s.replace('ENTRYPOINT ["/usr/local/bin/zagent"]', "ENTRYPOINT /usr/local/bin/zagent"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /shell form/],
  ["the whole context copied", (s) => s.replace("COPY web /src/web", "COPY . /src"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /copies the whole context/],
  ["a token baked in", (s) => s.replace("ENV ZT_WORK_DIR", "ENV ZT_TOKEN=abcdefabcdefabcdef ZT_WORK_DIR"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /ZT_TOKEN looks like a secret/],
  ["a token file copied in", (s) => s.replace("COPY web /src/web", "COPY web /src/web\nCOPY deploy/k8s/base/agent.token /etc/"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /bakes a secret/],
  ["a toolchain in the runtime stage", (s) => s.replace("rm -rf /tmp/zt\n", "rm -rf /tmp/zt && apt-get install -y cmake\n"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /installs a toolchain/],
  ["runtime packages made for other binaries", (s) => s.replace("runtime-packages /out /out/bin/zagent /out/bin/zworker /out/bin/zctl", "runtime-packages /out /out/bin/zagent"), (s) => d.checkStructure(d.parseDockerfile(s), { targets: d.buildTargets(ztBuild()), file: CPU }), /runtime-packages is made for zagent but the image holds/],
];

for (const [name, edit, check, expect] of BROKEN) {
  test(`caught in a Dockerfile: ${name}`, async (t) => {
    if (unavailable(t, /shellcheck/.test(check.toString()))) return;
    const good = text(CPU);
    const bad = edit(good);
    assert.notEqual(bad, good, "the edit changed nothing");
    assert.deepEqual(await check(good), [], "the check fails on the real Dockerfile");
    const problems = await check(bad);
    assert.ok(problems.some((p) => expect.test(p)), `expected a problem matching ${expect}, got:\n${problems.join("\n") || "(none)"}`);
  });
}
