// tests/deploy: what the Dockerfiles of deploy/docker must hold, as pure functions over their
// text (parsed by dockerfile-ast), so that test_dockerfiles.mjs can run each on the real files
// and on broken copies alike.

import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { DockerfileParser } from "dockerfile-ast";
import { validate as lintDockerfile } from "dockerfile-utils";

// ---- parsing ----------------------------------------------------------------------------------

// {args: ARGs before the first FROM, stages: [{from, name, instrs: [{keyword, content, words,
// json, line}]}]}; json is the exec form's strings, or null for the shell form
export function parseDockerfile(text) {
  const d = DockerfileParser.parse(text);
  const out = { args: [], stages: [] };
  for (const i of d.getInstructions()) {
    const keyword = i.getKeyword().toUpperCase();
    const content = i.getArgumentsContent() || "";
    const words = i.getArguments().map((a) => a.getValue());
    let json = null;
    if (typeof i.getJSONStrings === "function") {
      const s = i.getJSONStrings();
      if (s.length) json = s.map((x) => x.getJSONValue());
    }
    // flags (--from=build, --chown=...) are not among the arguments: keep them as words first
    const flags = typeof i.getFlags === "function" ? i.getFlags().map((f) => `--${f.getName()}${f.getValue() === null ? "" : "=" + f.getValue()}`) : [];
    const ins = { keyword, content, words: [...flags, ...words], json, line: i.getRange().start.line + 1 };
    if (keyword === "FROM") {
      const asAt = words.findIndex((w) => w.toUpperCase() === "AS");
      out.stages.push({ from: words.find((w) => !w.startsWith("--")), name: asAt >= 0 ? words[asAt + 1] : null, instrs: [] });
    } else if (!out.stages.length) {
      if (keyword === "ARG") out.args.push(ins);
    } else {
      out.stages[out.stages.length - 1].instrs.push(ins);
    }
  }
  return out;
}

// the ARG's default: ARG NAME=VALUE
export function argDefault(parsed, name) {
  for (const a of parsed.args) {
    const m = a.content.match(/^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$/);
    if (m && m[1] === name) return m[2] ?? null;
  }
  return undefined;
}

// HEALTHCHECK [flags] CMD ...: the command as argv (exec form) or as a shell string
export function healthcheck(stage) {
  const h = stage.instrs.find((i) => i.keyword === "HEALTHCHECK");
  if (!h) return null;
  const m = h.content.match(/\bCMD\s+([\s\S]*)$/);
  if (!m) return { none: true };
  const cmd = m[1].trim();
  if (cmd.startsWith("[")) return { argv: JSON.parse(cmd) };
  return { shell: cmd };
}

// ---- lint -------------------------------------------------------------------------------------

// dockerfile-utils' diagnostics, errors and warnings alike, as "line N: message"
export function lint(text) {
  return lintDockerfile(text).map((d) => `line ${d.range.start.line + 1}: ${d.message}`);
}

// Every piece of shell a Dockerfile runs: RUN in shell form (/bin/sh), RUN or HEALTHCHECK in
// exec form through "sh -c" or "bash -c", HEALTHCHECK CMD in shell form.
export function shellSnippets(parsed, file) {
  const out = [];
  const fromArgv = (argv, where) => {
    const sh = path.basename(argv[0] || "");
    if ((sh === "sh" || sh === "bash" || sh === "dash") && argv[1] === "-c" && typeof argv[2] === "string")
      out.push({ where, shell: sh === "bash" ? "bash" : "sh", script: argv[2] });
  };
  parsed.stages.forEach((st, si) => {
    for (const i of st.instrs) {
      const where = `${file}:${i.line} ${i.keyword} (stage ${st.name || si})`;
      if (i.keyword === "RUN") {
        if (i.json) fromArgv(i.json, where);
        else out.push({ where, shell: "sh", script: i.content });
      }
      if (i.keyword === "HEALTHCHECK") {
        const h = healthcheck({ instrs: [i] });
        if (h?.argv) fromArgv(h.argv, where);
        else if (h?.shell) out.push({ where, shell: "sh", script: h.shell });
      }
    }
  });
  return out;
}

export function shellcheckAvailable() {
  return spawnSync("shellcheck", ["--version"], { stdio: "ignore" }).status === 0;
}

// shellcheck's findings on each snippet (all severities), as "WHERE: SCnnnn message"
export function shellcheckSnippets(snippets) {
  const problems = [];
  for (const s of snippets) {
    const r = spawnSync("shellcheck", ["-s", s.shell, "-f", "gcc", "-"], { input: s.script + "\n", encoding: "utf8" });
    if (r.status !== 0) {
      const lines = (r.stdout || r.stderr || "").trim().split("\n").map((l) => l.replace(/^-:\d+:\d+: /, ""));
      problems.push(`${s.where}: ${lines.join("; ")}`);
    }
  }
  return problems;
}

export function shellcheckFiles(files) {
  const r = spawnSync("shellcheck", ["-f", "gcc", ...files], { encoding: "utf8" });
  return r.status === 0 ? [] : (r.stdout || r.stderr).trim().split("\n");
}

// ---- what the build makes -----------------------------------------------------------------------

// the targets zt-build.sh builds (its TARGETS line)
export function buildTargets(ztBuildText) {
  const m = ztBuildText.match(/^TARGETS="([^"]*)"/m);
  return m ? m[1].split(/\s+/).filter(Boolean) : [];
}

// the packages zt-build.sh installs for the build (its BUILD_PACKAGES)
export function buildPackages(ztBuildText) {
  const m = ztBuildText.match(/^BUILD_PACKAGES="([^"]*)"/m);
  return m ? m[1].split(/\s+/).filter(Boolean) : [];
}

// the top-level folders the top CMakeLists.txt adds (its foreach(dir ...) line)
export function cmakeModules(cmakeText) {
  const m = cmakeText.match(/foreach\(dir ([^)]*)\)/);
  return m ? m[1].split(/\s+/).filter(Boolean) : [];
}

// the files a stage's COPY --from=STAGE instructions bring: [{src, dst}] with dst a full path
export function copiedFrom(stage, from) {
  const out = [];
  for (const i of stage.instrs) {
    if (i.keyword !== "COPY") continue;
    const flag = i.words.find((w) => w.startsWith("--from="));
    if (!flag || flag.slice(7) !== from) continue;
    const rest = i.words.filter((w) => !w.startsWith("--"));
    const dst = rest[rest.length - 1];
    for (const src of rest.slice(0, -1)) out.push({ src, dst: dst.endsWith("/") ? dst + path.basename(src) : dst });
  }
  return out;
}

// The runtime stage's binaries: files copied from the build stage's out/bin, at their path in
// the image, with the build target each one is.
export function runtimeBinaries(parsed) {
  const build = parsed.stages[0];
  const final = parsed.stages[parsed.stages.length - 1];
  return copiedFrom(final, build.name)
    .filter((c) => /\/out\/bin\/[^/]+$/.test(c.src))
    .map((c) => ({ path: c.dst, target: path.basename(c.src) }));
}

// the binaries the build stage names for the runtime stage's package list
function runtimePackagesBins(parsed) {
  const run = parsed.stages[0].instrs.find((i) => i.keyword === "RUN" && i.words.includes("runtime-packages"));
  return run ? run.words.slice(run.words.indexOf("runtime-packages") + 2) : [];
}

// ---- structure ----------------------------------------------------------------------------------

const REQUIRED_LABELS = ["org.opencontainers.image.title", "org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.description"];
const SECRET_NAME = /(TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE|CREDENTIAL|API_?KEY)/i;
const SECRET_FILE = /(\.token|\.key|\.pem|\.p12|id_rsa|\.env|users)$/i;
const TOOLCHAIN = /\b(build-essential|cmake|gcc|g\+\+|clang|nvcc|[a-z0-9.+-]+-dev)\b/;

// What every image's Dockerfile must be: base images from build arguments (with defaults), a
// build stage and a runtime stage, a non-root user, a HEALTHCHECK, labels, no secret baked in,
// no toolchain in the runtime stage, and an ENTRYPOINT that is a binary the build makes.
export function checkStructure(parsed, { targets, file }) {
  const problems = [];
  const p = (m) => problems.push(`${file}: ${m}`);
  if (parsed.stages.length < 2) p(`${parsed.stages.length} stage(s); needs a build stage and a runtime stage`);
  if (!parsed.stages.length) return problems;
  parsed.stages.forEach((st, i) => {
    const m = (st.from || "").match(/^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$/);
    const earlier = parsed.stages.slice(0, i).some((s) => s.name && s.name === st.from);
    if (!m && !earlier) p(`stage ${i} starts FROM ${st.from}: the base image must be a build argument (ARG NAME=default, FROM \${NAME}) so that a test can build from a local base`);
    if (m && !argDefault(parsed, m[1])) p(`ARG ${m[1]} (FROM of stage ${i}) has no default before the first FROM`);
  });
  const build = parsed.stages[0];
  const final = parsed.stages[parsed.stages.length - 1];
  if (!build.name) p("the build stage has no name (FROM ... AS build)");
  // the runtime stage
  const users = final.instrs.filter((i) => i.keyword === "USER");
  const user = users.length ? users[users.length - 1].content.split(":")[0] : null;
  if (!user) p("the runtime stage sets no USER: it would run as root");
  else if (user === "0" || user === "root") p(`the runtime stage runs as ${user}`);
  else if (!/^\d+$/.test(user)) p(`USER ${user} is a name; give the uid (Kubernetes' runAsNonRoot can only verify a number)`);
  const hc = healthcheck(final);
  if (!hc || hc.none) p("the runtime stage has no HEALTHCHECK");
  const labels = final.instrs.filter((i) => i.keyword === "LABEL").map((i) => i.content).join(" ");
  for (const l of REQUIRED_LABELS) if (!labels.includes(`${l}=`)) p(`no LABEL ${l}`);
  for (const st of parsed.stages) {
    for (const i of st.instrs) {
      if (i.keyword === "ENV" || i.keyword === "ARG") {
        const name = i.content.split(/[=\s]/)[0];
        if (SECRET_NAME.test(name)) p(`line ${i.line}: ${i.keyword} ${name} looks like a secret; images carry none (Kubernetes mounts them)`);
      }
      if (i.keyword === "COPY" || i.keyword === "ADD") {
        const srcs = i.words.filter((w) => !w.startsWith("--")).slice(0, -1);
        for (const s of srcs) {
          if (s === "." || s === "./" || s === "*") p(`line ${i.line}: ${i.keyword} ${s} copies the whole context (tokens and build folders included); name what the build needs`);
          if (SECRET_FILE.test(s)) p(`line ${i.line}: ${i.keyword} ${s} bakes a secret into the image`);
        }
      }
    }
  }
  for (const i of final.instrs) {
    if (i.keyword === "RUN" && TOOLCHAIN.test(i.content)) p(`line ${i.line}: the runtime stage installs a toolchain or -dev package (${i.content.match(TOOLCHAIN)[0]})`);
  }
  // the entrypoint: exec form, a binary the build makes, copied into the runtime stage
  const eps = final.instrs.filter((i) => i.keyword === "ENTRYPOINT");
  const ep = eps[eps.length - 1];
  const bins = runtimeBinaries(parsed);
  if (!ep) p("the runtime stage has no ENTRYPOINT");
  else if (!ep.json) p(`ENTRYPOINT ${ep.content} is in shell form; the exec form lets the program get SIGTERM`);
  else {
    const bin = bins.find((b) => b.path === ep.json[0]);
    if (!bin) p(`ENTRYPOINT ${ep.json[0]} is not a binary the runtime stage copies from the build (${bins.map((b) => b.path).join(", ") || "none"})`);
    else if (!targets.includes(bin.target)) p(`ENTRYPOINT ${ep.json[0]} is ${bin.target}, which zt-build.sh does not build (${targets.join(", ")})`);
  }
  for (const b of bins) if (!targets.includes(b.target)) p(`the runtime stage copies ${b.target}, which zt-build.sh does not build`);
  // the runtime packages are those of exactly the binaries the image holds
  const listed = runtimePackagesBins(parsed).map((b) => path.basename(b)).sort();
  const held = bins.map((b) => b.target).sort();
  if (JSON.stringify(listed) !== JSON.stringify(held)) p(`runtime-packages is made for ${listed.join(", ")} but the image holds ${held.join(", ")}`);
  return problems;
}

// The build stage's instructions from its first, as text: the CPU images must share it (one
// cache), and the CUDA image's must differ only in its base and in building with CUDA on.
export function buildStageText(parsed, { normaliseCuda = false } = {}) {
  const build = parsed.stages[0];
  return build.instrs
    .filter((i) => !(i.keyword === "RUN" && i.words.includes("runtime-packages")))
    .map((i) => {
      let c = `${i.keyword} ${i.content}`;
      if (normaliseCuda) c = c.replace(/zt-build build ON /, "zt-build build OFF ");
      return c;
    })
    .join("\n");
}

export function readText(p) {
  return fs.readFileSync(p, "utf8");
}

export function shellcheckVersion() {
  try {
    return execFileSync("shellcheck", ["--version"], { encoding: "utf8" }).match(/version: (\S+)/)?.[1];
  } catch {
    return null;
  }
}
