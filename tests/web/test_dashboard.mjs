// The dashboard in a real browser: Debian's chromium driven by playwright-core (npm, pinned in
// package-lock.json; nothing is downloaded here) against a real zcoord with a user token and an
// agent join token, and a real zagent (registered with the join token) training a small CPU job.
// Checks: the page asks for the token; the API and the sign-in form refuse a wrong one and the
// agent join token (401); the jobs page lists the job; its loss chart gains points without a
// reload; the ranks table shows memory; the logs filter by rank; text a user controls (a cancel
// reason full of markup) shows as text and opens no dialog; cancels name who did them
// ("(by admin)"); cancel ends the job; the agents page shows the slots; no CSP violation or
// script error. Screenshots (desktop light and dark, a 390-px phone) go to
// $ZT_BUILD_DIR/tests/web_artifacts. Run by ctest as `node --test` (tests/web/web.cmake).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const CHROMIUM = process.env.ZT_CHROMIUM || "/usr/bin/chromium";
const BIN = process.env.ZT_BIN || "./bin";
const OUT = join(process.env.ZT_BUILD_DIR || ".", "tests", "web_artifacts");
const TOKEN = "dashboard-token-31415";
const AGENT_TOKEN = "dashboard-agent-join-27182";
const XSS = "<img src=x onerror=alert(1)>";

// What is missing to run at all: in CI that is a failure, elsewhere a skip (ctest: # SKIP).
async function missing() {
  if (!existsSync(CHROMIUM)) return `no browser at ${CHROMIUM} (scripts/install-deps.sh installs chromium)`;
  for (const b of ["zcoord", "zagent", "zworker", "zctl"])
    if (!existsSync(join(BIN, b))) return `no ${b} in ${BIN}`;
  try {
    await import("playwright-core");
  } catch (e) {
    return `playwright-core is not installed (run 'npm ci' in the repository root): ${e.message}`;
  }
  return null;
}

// A token file as zcoord, zagent and zctl require it: one line, readable by its owner only.
function writeToken(path, token) {
  writeFileSync(path, `${token}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(fn, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await sleep(100);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

class Cluster {
  constructor() {
    this.tmp = mkdtempSync(join(tmpdir(), "zt_web_"));
    this.procs = [];
    this.tokenFile = join(this.tmp, "token");
    writeToken(this.tokenFile, TOKEN);
    this.agentTokenFile = join(this.tmp, "agent-token");
    writeToken(this.agentTokenFile, AGENT_TOKEN);
    // zctl holds the user token; zagent the agent join token (and, as root, leave to run its
    // workers as root: zagent refuses that without --run-as or ZT_ALLOW_ROOT)
    this.env = { ...process.env, ZT_TOKEN_FILE: this.tokenFile, OMP_NUM_THREADS: "1" };
    delete this.env.ZT_TOKEN;
    delete this.env.ZT_AGENT_TOKEN;
    this.agentEnv = { ...this.env, ZT_TOKEN_FILE: this.agentTokenFile };
    if (process.getuid && process.getuid() === 0) this.agentEnv.ZT_ALLOW_ROOT = "1";
  }
  start(name, args, env = this.env) {
    const log = join(this.tmp, `${name}.log`);
    const p = spawn(join(BIN, name), args, { cwd: this.tmp, env, stdio: ["ignore", "pipe", "pipe"] });
    const chunks = [];
    p.stdout.on("data", (d) => chunks.push(d));
    p.stderr.on("data", (d) => chunks.push(d));
    p.on("exit", () => writeFileSync(log, Buffer.concat(chunks)));
    p.logText = () => Buffer.concat(chunks).toString();
    this.procs.push(p);
    return p;
  }
  zctl(...args) {
    const r = spawnSync(join(BIN, "zctl"), ["--coordinator", this.grpc, ...args.map(String)],
      { cwd: this.tmp, env: this.env, encoding: "utf8", timeout: 120000 });
    if (r.status !== 0) throw new Error(`zctl ${args.join(" ")} exited ${r.status}: ${r.stdout}${r.stderr}`);
    return r.stdout;
  }
  // The first start picks free ports; a restart takes the same ones (the browser reconnects).
  async startCoord() {
    const ready = join(this.tmp, "ready.json");
    rmSync(ready, { force: true });
    this.coord = this.start("zcoord", ["--db", join(this.tmp, "zt.db"), "--grpc", this.grpc || "127.0.0.1:0",
      "--http", this.http || "127.0.0.1:0", "--ready-file", ready, "--token-file", this.tokenFile,
      "--agent-token-file", this.agentTokenFile,
      "--heartbeat-interval", "200ms", "--heartbeat-timeout", "5s"]);
    const info = await waitFor(() => existsSync(ready) && JSON.parse(readFileSync(ready, "utf8")), 20000, "zcoord's ready file");
    this.grpc = info.grpc;
    this.http = info.http;
    this.base = `http://${info.http}`;
  }
  async restartCoord() {
    const p = this.coord;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    await exited;
    // a clean stop with streams open (and, in sanitizer builds, no leak report)
    assert.equal(p.exitCode, 0, `zcoord exited ${p.exitCode} (${p.signalCode}) on SIGTERM:\n${p.logText().slice(-3000)}`);
    await this.startCoord();
  }
  async startAgent() {
    const status = join(this.tmp, "a1.status.json");
    this.agent = this.start("zagent", ["--coordinator", this.grpc, "--slots", "cpu:2", "--name", "a1",
      "--work-dir", join(this.tmp, "work"), "--status-file", status, "--stop-grace", "5s"], this.agentEnv);
    await waitFor(() => existsSync(status) && JSON.parse(readFileSync(status, "utf8")).registered, 20000, "the agent to register");
  }
  writeJob(name, steps) {
    const job = {
      name,
      model: { arch: "gpt2", n_layer: 2, n_head: 2, n_embd: 64, block_size: 64, vocab_size: 256, init: "random", seed: 7 },
      data: { train: "data/synth_train_*.bin", val: "data/synth_val_*.bin" },
      train: { steps, eval_every: 25, eval_steps: 2, checkpoint_every: 0 },
      resources: { ranks: 2, ranks_per_node: 2, device: "cpu" },
      max_restarts: 0,
      deepspeed: { train_batch_size: 8, train_micro_batch_size_per_gpu: 4,
        optimizer: { type: "AdamW", params: { lr: 1e-3 } }, zero_optimization: { stage: 1 } },
    };
    const path = join(this.tmp, `${name}.json`);
    writeFileSync(path, JSON.stringify(job, null, 1));
    return path;
  }
  submit(path) {
    const out = this.zctl("submit", path);
    const id = out.split(/\s+/).find((t) => /^\d+$/.test(t));
    assert.ok(id, `no job id in: ${out}`);
    return Number(id);
  }
  async api(path, opts = {}) {
    const r = await fetch(this.base + path, { ...opts, headers: { Authorization: `Bearer ${TOKEN}`, ...(opts.headers || {}) } });
    return { status: r.status, body: await r.json() };
  }
  async stop(ok) {
    for (const p of this.procs.slice().reverse()) {
      if (p.exitCode === null && p.signalCode === null) {
        p.kill("SIGTERM");
        await Promise.race([new Promise((r) => p.once("exit", r)), sleep(15000)]);
        if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
      }
    }
    if (ok && !process.env.ZT_KEEP_TMP) rmSync(this.tmp, { recursive: true, force: true });
    else console.log(`# test files kept in ${this.tmp}`);
  }
  logs() {
    return this.procs.map((p) => `---- ${p.spawnfile} ----\n${p.logText().slice(-3000)}`).join("\n");
  }
}

test("dashboard in a real browser", { timeout: 240000 }, async (t) => {
  const why = await missing();
  if (why) {
    if (process.env.CI) assert.fail(`the browser test cannot run in CI: ${why}`);
    t.skip(`zt-browser-unavailable: ${why}`); // ctest's SKIP_REGULAR_EXPRESSION
    return;
  }
  // steps depend on each other: after a failure the rest fail at once instead of waiting
  let failed = null;
  const step = (name, fn) => t.test(name, async () => {
    if (failed) throw new Error(`not run: the step "${failed}" failed`);
    try {
      await fn();
    } catch (e) {
      failed = name;
      throw e;
    }
  });
  const { chromium } = await import("playwright-core");
  mkdirSync(OUT, { recursive: true });
  const c = new Cluster();
  let ok = false;
  let ctx = null;
  try {
    await c.startCoord();
    await c.startAgent();
    c.zctl("data", "synth", "--out", join(c.tmp, "data"), "--train-tokens", "200k", "--val-tokens", "20k", "--seed", "1");
    const jid = c.submit(c.writeJob("web-demo", 1000000));
    const probe = c.submit(c.writeJob("probe", 10));
    c.zctl("cancel", probe, "--reason", XSS);
    await waitFor(async () => (await c.api(`/api/v1/jobs/${jid}`)).body.job.step >= 3, 90000, "the job to train a few steps");

    await step("the API refuses a wrong token with 401 and a JSON error", async () => {
      const r = await fetch(`${c.base}/api/v1/jobs`, { headers: { Authorization: "Bearer wrong" } });
      assert.equal(r.status, 401);
      assert.match((await r.json()).error, /credential/);
      assert.equal((await fetch(`${c.base}/healthz`)).status, 200);
    });

    await step("the agent join token is no user credential for the API either", async () => {
      const r = await fetch(`${c.base}/api/v1/jobs`, { headers: { Authorization: `Bearer ${AGENT_TOKEN}` } });
      assert.equal(r.status, 401);
      assert.match((await r.json()).error, /credential/);
    });

    const userDataDir = mkdtempSync(join(c.tmp, "chromium-"));
    ctx = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"],
      viewport: { width: 1280, height: 900 },
      colorScheme: "light",
    });
    const page = ctx.pages()[0] || (await ctx.newPage());
    page.setDefaultTimeout(20000);
    const dialogs = [];
    const problems = [];
    page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      // expected: the sign-in page's 401, and the event stream cut while zcoord restarts
      const expected = /Failed to load resource.*401|ERR_INCOMPLETE_CHUNKED_ENCODING|ERR_CONNECTION_REFUSED/;
      if (m.type() === "error" && !expected.test(m.text())) problems.push(`console: ${m.text()}`);
    });

    await step("the page asks for the token and refuses a wrong one", async () => {
      await page.goto(`${c.base}/`);
      await page.locator("input#token").waitFor();
      await page.fill("input#token", "not-the-token");
      await page.click("button[type=submit]");
      await page.getByText("Wrong token.").waitFor();
      // the agent join token does not sign a user in
      await page.fill("input#token", AGENT_TOKEN);
      await page.click("button[type=submit]");
      await page.getByText("Wrong token.").waitFor();
      assert.equal(await page.locator("#jobs-body").count(), 0);
      await page.screenshot({ path: join(OUT, "signin-desktop-light.png") });
      await page.fill("input#token", TOKEN);
      await page.click("button[type=submit]");
      await page.locator("#jobs-body").waitFor();
    });

    await step("the jobs page lists the job, and a markup reason shows as text", async () => {
      const row = page.locator(`#jobs-body tr[data-id="${jid}"]`);
      await row.waitFor();
      assert.match(await row.innerText(), /web-demo/);
      assert.match(await row.innerText(), /RUNNING/);
      const probeRow = page.locator(`#jobs-body tr[data-id="${probe}"]`);
      await probeRow.waitFor();
      assert.ok((await probeRow.innerText()).includes(XSS), await probeRow.innerText());
      assert.equal(await page.locator("img").count(), 0);
      await page.locator("#slots").getByText("CPU slots").waitFor();
      assert.match(await page.locator("#slots").innerText(), /2 used/);
      await sleep(500);
      await page.screenshot({ path: join(OUT, "jobs-desktop-light.png"), fullPage: true });
    });

    await step("the job page: the loss chart gains points without a reload", async () => {
      await page.click(`#jobs-body a[href="#/job/${jid}"]`);
      await page.locator("#charts .uplot").first().waitFor({ timeout: 20000 });
      const n0 = await page.evaluate(() => window.ztCharts.points("loss"));
      assert.ok(n0 > 0, `no loss points at first (${n0})`);
      const url = page.url();
      await waitFor(() => page.evaluate((n) => window.ztCharts.points("loss") > n, n0), 15000, "more loss points");
      assert.equal(page.url(), url);
    });

    await step("the ranks table shows memory", async () => {
      await page.locator("#ranks tbody tr[data-rank='1']").waitFor();
      const mem = await waitFor(async () => {
        const cells = await page.locator("#ranks td.mem").allInnerTexts();
        return cells.length === 2 && cells.every((x) => /iB$/.test(x)) && cells;
      }, 10000, "memory in the ranks table");
      assert.equal(mem.length, 2);
    });

    await step("the logs filter by rank", async () => {
      await page.locator("#logs .line").first().waitFor({ timeout: 15000 });
      const all = await page.locator("#logs .line").evaluateAll((ls) => ls.map((l) => l.dataset.rank));
      assert.ok(new Set(all).size >= 2, `lines of one source only: ${[...new Set(all)]}`);
      await page.selectOption("#log-rank", "0");
      await waitFor(async () => {
        const ranks = await page.locator("#logs .line").evaluateAll((ls) => ls.map((l) => l.dataset.rank));
        return ranks.length > 0 && ranks.every((r) => r === "0");
      }, 10000, "only rank 0's lines");
      await page.selectOption("#log-rank", "");
      await page.locator("#logs .line[data-rank='-1']").first().waitFor();
    });

    await step("screenshots: desktop light and dark, a 390-px phone", async () => {
      await sleep(300);
      await page.screenshot({ path: join(OUT, "job-desktop-light.png"), fullPage: true });
      await page.emulateMedia({ colorScheme: "dark" });
      await sleep(300);
      await page.screenshot({ path: join(OUT, "job-desktop-dark.png"), fullPage: true });
      await page.goto(`${c.base}/#/`);
      await page.locator(`#jobs-body tr[data-id="${jid}"]`).waitFor();
      await page.screenshot({ path: join(OUT, "jobs-desktop-dark.png"), fullPage: true });
      await page.emulateMedia({ colorScheme: "light" });
      await page.setViewportSize({ width: 390, height: 844 });
      await page.goto(`${c.base}/#/job/${jid}`);
      await page.locator("#charts .uplot").first().waitFor({ timeout: 20000 });
      await sleep(300);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(overflow <= 390, `the phone page is ${overflow} px wide`);
      await page.screenshot({ path: join(OUT, "job-phone.png") });
      await page.screenshot({ path: join(OUT, "job-phone-full.png"), fullPage: true });
      await page.goto(`${c.base}/#/`);
      await page.locator(`#jobs-body tr[data-id="${jid}"]`).waitFor();
      await page.screenshot({ path: join(OUT, "jobs-phone.png"), fullPage: true });
      await page.setViewportSize({ width: 1280, height: 900 });
    });

    await step("the job page of the canceled probe shows its reason as text", async () => {
      await page.goto(`${c.base}/#/job/${probe}`);
      await page.locator("#job-reason").waitFor();
      await waitFor(async () => (await page.locator("#job-reason").innerText()).includes(XSS), 5000, "the reason");
      // zctl canceled it with the user token of "admin": the reason says so
      assert.ok((await page.locator("#job-reason").innerText()).includes("(by admin)"),
        await page.locator("#job-reason").innerText());
      await page.locator("#logs .line").first().waitFor();
      assert.ok((await page.locator("#logs").innerText()).includes(XSS));
      assert.equal(await page.locator("img").count(), 0);
    });

    await step("cancel ends the job", async () => {
      await page.goto(`${c.base}/#/job/${jid}`);
      await page.locator("#cancel:not([disabled])").waitFor();
      await page.click("#cancel");
      await page.click("#cancel");
      await page.locator("#job-state .state.CANCELED").waitFor({ timeout: 15000 });
      const r = await c.api(`/api/v1/jobs/${jid}`);
      assert.equal(r.body.job.state, "CANCELED");
      // the signed-in user canceled it
      assert.ok(r.body.job.reason.includes("(by admin)"), r.body.job.reason);
    });

    await step("the agents page shows the slots", async () => {
      await page.goto(`${c.base}/#/agents`);
      const row = page.locator("#agents tr[data-agent='a1']");
      await row.waitFor();
      assert.match(await row.locator(".slots-cell").innerText(), /\/ 2 cpu/);
      assert.match(await row.innerText(), /ALIVE/);
      await page.screenshot({ path: join(OUT, "agents-desktop-light.png"), fullPage: true });
    });

    await step("the keyboard alone reaches a job, with a visible focus ring", async () => {
      await page.goto(`${c.base}/#/`);
      const link = `#jobs-body a[href="#/job/${jid}"]`;
      await page.locator(link).waitFor();
      await page.evaluate(() => document.activeElement && document.activeElement.blur());
      let reached = false;
      for (let i = 0; i < 60 && !reached; i++) {
        await page.keyboard.press("Tab");
        reached = await page.evaluate((sel) => document.activeElement === document.querySelector(sel), link);
      }
      assert.ok(reached, "Tab never reached the job's link");
      const ring = await page.evaluate(() => {
        const st = getComputedStyle(document.activeElement);
        return `${st.outlineStyle} ${st.outlineWidth}`;
      });
      assert.match(ring, /^solid [1-9]/, `the focused link shows no outline (${ring})`);
      await page.keyboard.press("Enter");
      await page.waitForFunction((id) => location.hash === `#/job/${id}`, jid);
      await page.locator("#logs").waitFor();
      // the log filter is reachable and usable from the keyboard too
      let onFilter = false;
      for (let i = 0; i < 80 && !onFilter; i++) {
        await page.keyboard.press("Tab");
        onFilter = await page.evaluate(() => document.activeElement && document.activeElement.id === "log-rank");
      }
      assert.ok(onFilter, "Tab never reached the log's rank filter");
    });

    await step("text contrast is readable in light and dark (WCAG AA, 4.5:1)", async () => {
      for (const scheme of ["light", "dark"]) {
        await page.emulateMedia({ colorScheme: scheme });
        const low = await page.evaluate(() => {
          const v = (n) => getComputedStyle(document.documentElement).getPropertyValue(n).trim();
          const lum = (hex) => {
            const c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
              .map((x) => (x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4));
            return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
          };
          const ratio = (a, b) => {
            const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
            return (hi + 0.05) / (lo + 0.05);
          };
          const out = [];
          for (const fg of ["--text", "--muted", "--accent", "--ok", "--warn", "--bad", "--info"])
            for (const bg of ["--bg", "--panel"]) {
              const r = ratio(v(fg), v(bg));
              if (!(r >= 4.5)) out.push(`${fg} on ${bg}: ${r.toFixed(2)}`);
            }
          return out;
        });
        assert.deepEqual(low, [], `${scheme}: text colours below 4.5:1`);
      }
      await page.emulateMedia({ colorScheme: "light" });
    });

    await step("the page reconnects by itself after zcoord restarts", async () => {
      await page.goto(`${c.base}/#/`);
      await page.locator(`#jobs-body tr[data-id="${jid}"]`).waitFor();
      await page.locator("#conn.live").waitFor();
      await c.restartCoord();
      const next = c.submit(c.writeJob("after-restart", 5));
      await page.locator(`#jobs-body tr[data-id="${next}"]`).waitFor({ timeout: 20000 });
      await page.locator("#conn.live").waitFor();
    });

    await step("no dialog opened, no script error, no CSP violation", async () => {
      assert.deepEqual(dialogs, []);
      assert.deepEqual(problems, []);
    });
    ok = !failed;
  } finally {
    if (!ok) console.log(c.logs());
    if (ctx) await ctx.close().catch(() => {});
    await c.stop(ok);
  }
});
