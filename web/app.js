// zerotrain dashboard: a hash-routed page over zcoord's JSON API (/api/v1/...) with live updates
// from its Server-Sent Events streams. Every text from the API is inserted with textContent
// (el() below), never as markup; the Content-Security-Policy allows only this server's files.

const main = document.getElementById("main");
const conn = document.getElementById("conn");
const STATES = ["QUEUED", "SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "CANCELED"];

// ---- helpers ---------------------------------------------------------------------------------

// el("td", {class: "num"}, "text", childNode, ...): attributes are set one by one, strings are
// text nodes. Event handlers go in as on<event> functions.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function fmtBytes(n) {
  if (n === null || n === undefined || n <= 0) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(n < 10 && i ? 1 : 0)} ${u[i]}`;
}
function fmtNum(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString("en-US");
  return Number(x).toPrecision(digits);
}
// Axis ticks: short (12k, 3.4M, 2e-4), so that a 390-px chart keeps its labels.
function fmtAxis(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toFixed(0)}k`;
  if (a >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  if (a < 1e-2) return v.toExponential(0);
  return `${+v.toPrecision(3)}`;
}
function fmtAge(ms) {
  if (!ms) return "–";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${(s / 86400).toFixed(1)} d ago`;
}
function fmtDur(s) {
  if (!s || s <= 0) return "";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function fmtTime(ms) {
  return ms ? new Date(ms).toLocaleString() : "–";
}
function stateBadge(s) {
  return el("span", { class: `state ${s}` }, s);
}

class Unauthorized extends Error {}

async function api(path, opts = {}) {
  const headers = { Accept: "application/json" };
  if (opts.method && opts.method !== "GET") headers["X-Requested-With"] = "zerotrain-dashboard";
  const r = await fetch(path, { credentials: "same-origin", ...opts, headers });
  if (r.status === 401) {
    location.assign("/login");
    throw new Unauthorized("sign in");
  }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
  return body;
}

function setConn(ok, text) {
  conn.className = `conn ${ok ? "live" : "down"}`;
  conn.textContent = text;
}

// One EventSource for the page; closed when the page changes.
let source = null;
let pageGen = 0;
function stream(path, handlers) {
  if (source) source.close();
  source = new EventSource(path);
  source.onopen = () => setConn(true, "live");
  source.onerror = () => setConn(false, "reconnecting…");
  for (const [ev, fn] of Object.entries(handlers)) {
    source.addEventListener(ev, (m) => {
      let data;
      try { data = JSON.parse(m.data); } catch { return; }
      fn(data);
    });
  }
}

function showError(where, err) {
  if (err instanceof Unauthorized) return;
  where.replaceChildren(el("p", { class: "panel", role: "alert" }, `Error: ${err.message}`));
}

// Runs fn at most once per ms, the last call of a burst included.
function throttle(fn, ms) {
  let last = 0, timer = null;
  return () => {
    const wait = last + ms - Date.now();
    if (wait <= 0) { last = Date.now(); fn(); }
    else if (!timer) timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, wait);
  };
}

function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

// ---- jobs page ------------------------------------------------------------------------------

function slotsPanel(cluster) {
  const box = el("div", { class: "slots", id: "slots" });
  for (const dev of ["cpu", "cuda"]) {
    const s = cluster.slots[dev];
    if (!s || (s.total === 0 && dev === "cuda")) continue;
    const pct = s.total ? (100 * s.used) / s.total : 0;
    const bar = el("div", { class: "slotbar", role: "img",
      "aria-label": `${dev.toUpperCase()} slots: ${s.used} used of ${s.total}` }, el("span"));
    bar.firstChild.style.width = `${pct}%`;
    box.append(el("div", { class: "panel" },
      el("div", { class: "label" }, el("strong", {}, `${dev.toUpperCase()} slots`),
        el("span", { class: "slotcount" }, `${s.used} used · ${s.free} free · ${s.total} total`)),
      bar));
  }
  const a = cluster.agents;
  box.append(el("div", { class: "panel" },
    el("div", { class: "label" }, el("strong", {}, "Agents"), el("span", {}, `${a.ALIVE} alive · ${a.LOST} lost`)),
    el("div", { class: "muted" }, `${cluster.jobs.RUNNING} running · ${cluster.jobs.QUEUED} queued`)));
  return box;
}

function jobRow(j) {
  const pct = j.total_steps > 0 ? Math.min(100, (100 * j.step) / j.total_steps) : 0;
  const prog = el("span", { class: "progress", role: "progressbar", "aria-valuemin": 0,
    "aria-valuemax": 100, "aria-valuenow": Math.round(pct) }, el("span"));
  prog.firstChild.style.width = `${pct}%`;
  const live = j.state === "RUNNING";
  const why = j.pending_reason || (["FAILED", "CANCELED"].includes(j.state) ? j.reason : "");
  const tr = el("tr", { class: "clickable", "data-id": j.id, tabindex: 0 },
    el("td", {}, el("a", { href: `#/job/${j.id}` }, j.name), el("div", { class: "muted reason" }, why)),
    el("td", {}, stateBadge(j.state)),
    el("td", {}, prog, el("span", { class: "eta" }, live && j.eta_s ? `ETA ${fmtDur(j.eta_s)}` : "")),
    el("td", { class: "num" }, `${j.step}${j.total_steps ? ` / ${j.total_steps}` : ""}`),
    el("td", { class: "num" }, fmtNum(j.loss, 4)),
    el("td", { class: "num hide-narrow" }, fmtNum(j.tokens_per_s)),
    el("td", { class: "num hide-narrow" }, j.ranks),
    el("td", { class: "hide-narrow" }, fmtAge(j.submitted_ms)));
  const open = () => { location.hash = `#/job/${j.id}`; };
  tr.addEventListener("click", (ev) => { if (ev.target.tagName !== "A") open(); });
  tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
  return tr;
}

async function pageJobs(gen) {
  const state = new URLSearchParams(location.hash.split("?")[1] || "").get("state") || "";
  let jobs = new Map();
  const filter = el("select", { id: "state-filter", "aria-label": "Filter by state" },
    el("option", { value: "" }, "All states"),
    STATES.map((s) => el("option", { value: s, selected: s === state }, s)));
  const search = el("input", { id: "search", type: "search", placeholder: "Search by name",
    "aria-label": "Search jobs by name" });
  const tbody = el("tbody", { id: "jobs-body" });
  const table = el("div", { class: "tablewrap" }, el("table", { id: "jobs" },
    el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "State"), el("th", {}, "Progress"),
      el("th", { class: "num" }, "Step"), el("th", { class: "num" }, "Loss"),
      el("th", { class: "num hide-narrow" }, "Tokens/s"), el("th", { class: "num hide-narrow" }, "Ranks"),
      el("th", { class: "hide-narrow" }, "Age"))),
    tbody));
  const slotsBox = el("div", {}, el("p", { class: "muted" }, "…"));
  const queueBox = el("div", { id: "queue" });
  main.replaceChildren(el("h1", {}, "Jobs"), slotsBox, queueBox,
    el("div", { class: "row", style: null }, filter, search), el("div", { style: null }), table);
  table.style.marginTop = "12px";

  function render() {
    const q = search.value.trim().toLowerCase();
    const rows = [...jobs.values()]
      .filter((j) => (!filter.value || j.state === filter.value) && (!q || j.name.toLowerCase().includes(q)))
      .sort((a, b) => b.id - a.id)
      .map(jobRow);
    tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No jobs."))]));
  }
  async function loadJobs() {
    const qs = filter.value ? `?state=${filter.value}&limit=200` : "?limit=200";
    const r = await api(`/api/v1/jobs${qs}`);
    if (gen !== pageGen) return;
    jobs = new Map(r.jobs.map((j) => [j.id, j]));
    render();
  }
  async function loadCluster() {
    const c = await api("/api/v1/cluster");
    if (gen !== pageGen) return;
    slotsBox.replaceChildren(slotsPanel(c));
    queueBox.replaceChildren(...(c.queue.length ? [el("h2", {}, "Queue"),
      el("ul", { class: "panel" }, c.queue.map((q) => el("li", {},
        el("a", { href: `#/job/${q.id}` }, q.name), ` (${q.ranks} ${q.device} ranks): `,
        el("span", { class: "muted" }, q.pending_reason || "waiting"))))] : []));
  }
  const refreshCluster = debounce(() => loadCluster().catch(() => {}), 300);
  filter.addEventListener("change", () => {
    history.replaceState(null, "", filter.value ? `#/?state=${filter.value}` : "#/");
    loadJobs().catch((e) => showError(tbody, e));
  });
  search.addEventListener("input", render);
  try {
    await Promise.all([loadJobs(), loadCluster()]);
  } catch (e) {
    showError(main, e);
    return;
  }
  stream("/api/v1/stream", {
    hello: () => { loadJobs().catch(() => {}); refreshCluster(); },
    job: (j) => {
      if (gen !== pageGen) return;
      const old = jobs.get(j.id);
      if (old && old.state !== j.state) refreshCluster();
      if (!old) refreshCluster();
      jobs.set(j.id, { ...(old || {}), ...j });
      render();
    },
  });
}

// ---- job page -------------------------------------------------------------------------------

const CHARTS = [
  { title: "Loss", keys: ["loss", "val_loss"] },
  { title: "Learning rate", keys: ["lr"] },
  { title: "Gradient norm", keys: ["grad_norm"] },
  { title: "Loss scale", keys: ["loss_scale"] },
  { title: "Tokens/s", keys: ["tok_s"] },
  { title: "MFU", keys: ["mfu"] },
  { title: "Step time (ms, stacked)", keys: ["fwd_ms", "bwd_ms", "opt_ms", "comm_ms"], stack: true },
  { title: "Memory of rank 0 (stacked)", prefix: "mem_", exclude: ["mem_peak", "mem_model_states"], stack: true, bytes: true },
];
const PALETTE = ["#0b62c4", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7e8c", "#6e7781"];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Holds the series of one job and the uPlot charts drawn from them.
class JobCharts {
  constructor(box) {
    this.box = box;
    this.steps = [];
    this.series = {}; // key -> values aligned with steps
    this.charts = [];
    this.lastStep = -1;
    this.pending = false;
  }
  load(m) {
    this.steps = m.steps.slice();
    this.series = {};
    for (const [k, v] of Object.entries(m.series)) this.series[k] = v.slice();
    this.lastStep = m.steps.length ? m.steps[m.steps.length - 1] : -1;
    this.stored = this.lastStep; // the last step read from the coordinator's store
    this.build();
  }
  // The stored rows after `since` replace the points pushed live since then (a push carries
  // only the newest step of each commit; the store has every kept step).
  merge(m, since) {
    let i = this.steps.findIndex((s) => s > since);
    if (i < 0) i = this.steps.length;
    this.steps.length = i;
    for (const k of Object.keys(this.series)) this.series[k].length = i;
    const pushed = this.lastStep;
    this.lastStep = since;
    m.steps.forEach((step, r) => {
      const vals = {};
      for (const [k, col] of Object.entries(m.series)) if (col[r] !== null) vals[k] = col[r];
      this.add(step, vals);
    });
    if (m.steps.length) this.stored = m.steps[m.steps.length - 1];
    if (pushed > this.lastStep) this.lastStep = pushed; // a newer push arrives again anyway
    this.schedule();
  }
  add(step, values) {
    if (step <= this.lastStep) return;
    this.lastStep = step;
    const n = this.steps.length;
    this.steps.push(step);
    for (const [k, v] of Object.entries(values)) {
      if (!this.series[k]) this.series[k] = new Array(n).fill(null);
    }
    for (const k of Object.keys(this.series)) this.series[k].push(k in values ? values[k] : null);
    if (this.steps.length > 4000) { // keep the browser light: thin every other point
      this.steps = this.steps.filter((_, i) => i % 2 === 0 || i === this.steps.length - 1);
      for (const k of Object.keys(this.series))
        this.series[k] = this.series[k].filter((_, i, a) => i % 2 === 0 || i === a.length - 1);
    }
    const keysNow = this.keysFor().map((c) => c.keys.join()).join("|");
    if (keysNow !== this.builtKeys) this.build();
    else this.schedule();
  }
  keysFor() {
    const out = [];
    for (const c of CHARTS) {
      let keys = c.keys || Object.keys(this.series).filter((k) => k.startsWith(c.prefix) && !c.exclude.includes(k)).sort();
      keys = keys.filter((k) => this.series[k] && this.series[k].some((v) => v !== null));
      if (keys.length) out.push({ ...c, keys });
    }
    return out;
  }
  // Stacked charts draw cumulative sums, the largest first, so that each band stays visible.
  order(c) {
    return c.stack ? c.keys.slice().reverse() : c.keys;
  }
  data(c) {
    const cols = c.keys.map((k) => this.series[k]);
    if (c.stack) {
      const acc = new Array(this.steps.length).fill(0);
      return [this.steps, ...cols.map((col) => col.map((v, i) => (acc[i] += v || 0))).reverse()];
    }
    return [this.steps, ...cols];
  }
  build() {
    for (const ch of this.charts) ch.plot.destroy();
    this.charts = [];
    this.box.replaceChildren();
    const specs = this.keysFor();
    this.builtKeys = specs.map((c) => c.keys.join()).join("|");
    if (!specs.length) {
      this.box.append(el("p", { class: "muted" }, "No metrics yet."));
      return;
    }
    if (!window.uPlot) {
      this.box.append(el("p", { class: "muted" }, "Charts unavailable (uPlot did not load)."));
      return;
    }
    const axis = { stroke: cssVar("--muted"), grid: { stroke: cssVar("--line"), width: 1 }, ticks: { stroke: cssVar("--line") } };
    // every panel first, so that the grid has its final columns when the widths are measured
    const divs = specs.map((c) => el("div", { class: "panel chart", "data-chart": c.keys[0] }, el("h3", {}, c.title)));
    this.box.append(...divs);
    specs.forEach((c, n) => {
      const div = divs[n];
      const width = Math.max(240, div.clientWidth - 28);
      const opts = {
        width, height: 180,
        legend: { show: true },
        cursor: { drag: { x: true, y: false } },
        scales: { x: { time: false } },
        axes: [{ ...axis }, { ...axis, size: 64, values: (u, v) => v.map(c.bytes ? fmtBytes : fmtAxis) }],
        series: [{ label: "step" }, ...this.order(c).map((k) => {
          const color = PALETTE[c.keys.indexOf(k) % PALETTE.length];
          return { label: k, stroke: color, width: 1.5, spanGaps: true,
            fill: c.stack ? `${color}55` : undefined, points: { show: k === "val_loss" },
            value: c.bytes ? (u, v) => fmtBytes(v) : undefined };
        })],
      };
      const plot = new window.uPlot(opts, this.data(c), div);
      this.charts.push({ spec: c, plot, div });
    });
  }
  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      for (const ch of this.charts) ch.plot.setData(this.data(ch.spec));
    });
  }
  resize() {
    for (const ch of this.charts) ch.plot.setSize({ width: Math.max(240, ch.div.clientWidth - 28), height: 180 });
  }
  points(key = "loss") {
    return this.series[key] ? this.series[key].filter((v) => v !== null).length : 0;
  }
}

function ranksTable(ranks) {
  const maxStep = Math.max(0, ...ranks.map((r) => r.step));
  const body = ranks.map((r) => {
    const lag = ranks.length > 1 && r.phase !== "EXITED" && r.step < maxStep - 1;
    return el("tr", { class: lag ? "lag" : null, "data-rank": r.rank },
      el("td", {}, r.agent), el("td", { class: "num" }, r.rank, lag ? el("span", { class: "badge", title: "behind the other ranks" }, "behind") : null),
      el("td", {}, r.phase), el("td", { class: "num" }, r.step),
      el("td", { class: "num hide-narrow" }, r.collective_seq ?? "–"),
      el("td", { class: "num mem" }, fmtBytes(r.memory_bytes)),
      el("td", { class: "num hide-narrow" }, fmtBytes(r.peak_memory_bytes)),
      el("td", { class: "num hide-narrow" }, r.pid || "–"),
      el("td", {}, fmtAge(r.last_report_ms)));
  });
  return el("div", { class: "tablewrap" }, el("table", { id: "ranks" },
    el("thead", {}, el("tr", {}, el("th", {}, "Agent"), el("th", { class: "num" }, "Rank"), el("th", {}, "Phase"),
      el("th", { class: "num" }, "Step"), el("th", { class: "num hide-narrow" }, "Collective"),
      el("th", { class: "num" }, "Memory"), el("th", { class: "num hide-narrow" }, "Peak"),
      el("th", { class: "num hide-narrow" }, "PID"), el("th", {}, "Last report"))),
    el("tbody", {}, body.length ? body : el("tr", {}, el("td", { colspan: 9, class: "muted" }, "No ranks placed.")))));
}

function logLine(l) {
  const who = l.rank >= 0 ? `[${l.rank}]` : "[zcoord]";
  return el("div", { class: `line ${l.source}`, "data-rank": l.rank, "data-id": l.id },
    el("span", { class: "rk" }, who), l.text);
}

async function pageJob(gen, id) {
  main.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  let d;
  try {
    d = await api(`/api/v1/jobs/${id}`);
  } catch (e) {
    showError(main, e);
    return;
  }
  if (gen !== pageGen) return;
  let job = d.job;
  let world = d.ranks.length || job.ranks;

  const title = el("h1", {}, job.name, " ", el("span", { id: "job-state" }, stateBadge(job.state)));
  const reason = el("p", { class: "reason muted", id: "job-reason" });
  const facts = el("div", { class: "facts panel", id: "facts" });
  const cancel = el("button", { class: "danger", id: "cancel", type: "button" }, "Cancel job");
  const copy = el("button", { type: "button", id: "copy", title: "Copy a zctl command for this job" }, "Copy zctl command");
  const chartsBox = el("div", { class: "charts", id: "charts" });
  const ranksBox = el("div", { id: "ranks-box" });
  const attemptsBox = el("ol", { class: "timeline panel", id: "attempts" });
  const ckptBox = el("div", { id: "checkpoints" });
  const rankSel = el("select", { id: "log-rank", "aria-label": "Logs of rank" },
    el("option", { value: "" }, "All ranks"), el("option", { value: "-1" }, "zcoord events"),
    Array.from({ length: world }, (_, r) => el("option", { value: r }, `Rank ${r}`)));
  const logSearch = el("input", { id: "log-search", type: "search", placeholder: "Search logs", "aria-label": "Search logs" });
  const follow = el("input", { id: "log-follow", type: "checkbox", checked: true });
  const logsBox = el("div", { class: "logs", id: "logs", role: "log", "aria-live": "off", tabindex: 0 });
  const spec = el("pre", { class: "spec panel", id: "spec" }, JSON.stringify(d.spec, null, 2));

  function renderHead() {
    document.getElementById("job-state")?.replaceChildren(stateBadge(job.state));
    reason.textContent = job.pending_reason || job.reason || "";
    const pct = job.total_steps ? ` (${Math.round((100 * job.step) / job.total_steps)}%)` : "";
    const f = [["Step", `${job.step}${job.total_steps ? ` / ${job.total_steps}` : ""}${pct}`],
      ["Loss", fmtNum(job.loss, 5)], ["Tokens/s", fmtNum(job.tokens_per_s)],
      ["ETA", job.state === "RUNNING" && job.eta_s ? fmtDur(job.eta_s) : "–"],
      ["Ranks", `${job.ranks} ${job.device}`], ["Restarts", `${job.restarts} of ${job.max_restarts}`],
      ["Submitted", fmtTime(job.submitted_ms)], ["User", job.user || "–"]];
    facts.replaceChildren(...f.map(([k, v]) => el("div", { class: "fact" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v))));
    const ended = ["COMPLETED", "FAILED", "CANCELED"].includes(job.state);
    cancel.disabled = ended;
  }
  function renderAttempts(attempts) {
    attemptsBox.replaceChildren(...attempts.slice().reverse().map((a) => el("li", { class: a.state },
      el("strong", {}, `Attempt ${a.number}`), " ", stateBadge(a.state), " ",
      el("span", { class: "muted" }, `${fmtTime(a.started_ms || a.created_ms)}${a.ended_ms ? ` → ${fmtTime(a.ended_ms)}` : ""}`),
      a.resume_path ? el("div", { class: "muted" }, `resumed from step ${a.resume_step}`) : null,
      a.reason ? el("div", { class: "reason" }, a.reason) : null)));
  }
  async function loadCkpts() {
    const c = await api(`/api/v1/jobs/${id}/checkpoints?all=1`);
    ckptBox.replaceChildren(c.checkpoints.length ? el("div", { class: "tablewrap" }, el("table", {},
      el("thead", {}, el("tr", {}, el("th", { class: "num" }, "Step"), el("th", {}, "State"), el("th", { class: "num" }, "Size"), el("th", { class: "hide-narrow" }, "Path"))),
      el("tbody", {}, c.checkpoints.map((k) => el("tr", {}, el("td", { class: "num" }, k.step), el("td", {}, stateBadge(k.state)),
        el("td", { class: "num" }, fmtBytes(k.bytes)), el("td", { class: "hide-narrow wrap" }, k.path)))))) :
      el("p", { class: "muted" }, "No checkpoints."));
  }

  // logs: rank filter (server side), search (here), follow (scroll to the end)
  let logs = [];
  function logMatches(l) {
    const r = rankSel.value;
    if (r !== "" && String(l.rank) !== r) return false;
    const q = logSearch.value.trim().toLowerCase();
    return !q || l.text.toLowerCase().includes(q);
  }
  function renderLogs() {
    const lines = logs.filter(logMatches).slice(-2000).map(logLine);
    logsBox.replaceChildren(...(lines.length ? lines : [el("div", { class: "muted" }, "No log lines.")]));
    if (follow.checked) logsBox.scrollTop = logsBox.scrollHeight;
  }
  async function loadLogs() {
    const r = rankSel.value;
    const qs = r === "" ? "tail=1000" : `tail=1000&rank=${r}`;
    const res = await api(`/api/v1/jobs/${id}/logs?${qs}`);
    if (gen !== pageGen) return;
    logs = res.logs;
    renderLogs();
  }
  function addLog(l) {
    if (logs.some((x) => x.id === l.id)) return;
    logs.push(l);
    if (logs.length > 5000) logs = logs.slice(-4000);
    if (!logMatches(l)) return;
    if (logsBox.firstChild && logsBox.firstChild.classList.contains("muted")) logsBox.replaceChildren();
    logsBox.append(logLine(l));
    if (follow.checked) logsBox.scrollTop = logsBox.scrollHeight;
  }
  rankSel.addEventListener("change", () => loadLogs().catch((e) => showError(logsBox, e)));
  logSearch.addEventListener("input", renderLogs);

  let armed = false;
  cancel.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      cancel.classList.add("armed");
      cancel.textContent = "Click again to cancel";
      setTimeout(() => { armed = false; cancel.classList.remove("armed"); cancel.textContent = "Cancel job"; }, 5000);
      return;
    }
    cancel.disabled = true;
    try {
      const r = await api(`/api/v1/jobs/${id}/cancel`, { method: "POST" });
      job = { ...job, ...r.job };
      renderHead();
    } catch (e) {
      reason.textContent = `Cancel failed: ${e.message}`;
      cancel.disabled = false;
    }
  });
  copy.addEventListener("click", async () => {
    const cmd = `zctl logs -f ${id}`;
    try {
      await navigator.clipboard.writeText(cmd);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = cmd;
    }
    setTimeout(() => { copy.textContent = "Copy zctl command"; }, 3000);
  });

  main.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← Jobs")), title, reason,
    el("div", { class: "row" }, cancel, copy), el("h2", {}, "Progress"), facts,
    el("h2", {}, "Charts"), chartsBox,
    el("h2", {}, "Ranks"), ranksBox,
    el("h2", {}, "Logs"), el("div", { class: "row" }, rankSel, logSearch, el("label", { class: "inline" }, follow, "Follow")), logsBox,
    el("h2", {}, "Attempts"), attemptsBox,
    el("h2", {}, "Checkpoints"), ckptBox,
    el("h2", {}, "Resolved spec"), spec);
  renderHead();
  ranksBox.replaceChildren(ranksTable(d.ranks));
  renderAttempts(d.attempts);

  const charts = new JobCharts(chartsBox);
  window.ztCharts = charts; // for the browser test and for people poking at the page
  async function loadMetrics() {
    const m = await api(`/api/v1/jobs/${id}/metrics?max_points=1000`);
    if (gen !== pageGen) return;
    charts.load(m);
  }
  let fetching = false;
  const increment = throttle(async () => {
    if (gen !== pageGen || fetching) return;
    fetching = true;
    const since = charts.stored;
    const m = await api(`/api/v1/jobs/${id}/metrics?since=${since}&max_points=1000`).catch(() => null);
    fetching = false;
    if (m && gen === pageGen) charts.merge(m, since);
  }, 2000);
  const onResize = debounce(() => charts.resize(), 150);
  const scheme = window.matchMedia("(prefers-color-scheme: dark)");
  const onScheme = () => charts.build(); // axis and grid colours come from the theme
  window.addEventListener("resize", onResize);
  scheme.addEventListener("change", onScheme);
  const cleanupGen = gen;
  const stop = () => {
    if (pageGen === cleanupGen) return;
    window.removeEventListener("resize", onResize);
    scheme.removeEventListener("change", onScheme);
    window.removeEventListener("hashchange", stop);
  };
  window.addEventListener("hashchange", stop);

  await Promise.all([loadMetrics(), loadLogs(), loadCkpts()]).catch((e) => showError(chartsBox, e));
  const reloadAttempts = debounce(async () => {
    const r = await api(`/api/v1/jobs/${id}`).catch(() => null);
    if (r && gen === pageGen) { renderAttempts(r.attempts); loadCkpts().catch(() => {}); }
  }, 300);
  stream(`/api/v1/jobs/${id}/stream`, {
    hello: () => { loadMetrics().catch(() => {}); reloadAttempts(); },
    job: (j) => { job = { ...job, ...j }; renderHead(); },
    metrics: (m) => { charts.add(m.step, m.values); increment(); },
    ranks: (r) => ranksBox.replaceChildren(ranksTable(r.ranks)),
    log: addLog,
    event: () => reloadAttempts(),
  });
}

// ---- agents page ----------------------------------------------------------------------------

async function pageAgents(gen) {
  main.replaceChildren(el("h1", {}, "Agents"), el("p", { class: "muted" }, "Loading…"));
  async function load() {
    const r = await api("/api/v1/agents");
    if (gen !== pageGen) return;
    const rows = r.agents.map((a) => el("tr", { "data-agent": a.name },
      el("td", {}, el("strong", {}, a.name), el("div", { class: "muted" }, a.hostname)),
      el("td", {}, stateBadge(a.state)),
      el("td", { class: "num slots-cell" }, `${a.used_slots} / ${a.slots} ${a.device}`),
      el("td", { class: "wrap" }, a.gpus.length ? a.gpus.map((g) => el("div", {},
        `GPU ${g.index}: ${g.name} · ${fmtBytes(g.memory_total - g.memory_free)} used of ${fmtBytes(g.memory_total)}`)) : "CPU only"),
      el("td", { class: "wrap hide-narrow" }, a.workers.length ? a.workers.map((w) => el("div", {},
        el("a", { href: `#/job/${w.job_id}` }, `job ${w.job_id}`), ` rank ${w.rank} · ${w.phase} · step ${w.step} · ${fmtBytes(w.memory_bytes)}`)) : "–"),
      el("td", {}, fmtAge(a.last_heartbeat_ms))));
    main.replaceChildren(el("h1", {}, "Agents"), el("div", { class: "tablewrap" }, el("table", { id: "agents" },
      el("thead", {}, el("tr", {}, el("th", {}, "Agent"), el("th", {}, "State"), el("th", { class: "num" }, "Slots used"),
        el("th", {}, "Devices"), el("th", { class: "hide-narrow" }, "Workers"), el("th", {}, "Last heartbeat"))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No agents registered."))))));
  }
  try {
    await load();
  } catch (e) {
    showError(main, e);
    return;
  }
  const reload = debounce(() => load().catch(() => {}), 500);
  stream("/api/v1/stream", { hello: reload, job: reload });
  const timer = setInterval(() => { if (gen !== pageGen) clearInterval(timer); else reload(); }, 5000);
}

// ---- router ---------------------------------------------------------------------------------

function route() {
  const gen = ++pageGen;
  const h = location.hash || "#/";
  const m = h.match(/^#\/job\/(\d+)/);
  const page = m ? "job" : h.startsWith("#/agents") ? "agents" : "jobs";
  for (const a of document.querySelectorAll(".top nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `zerotrain · ${page === "job" ? `job ${m[1]}` : page}`;
  if (page === "job") pageJob(gen, Number(m[1]));
  else if (page === "agents") pageAgents(gen);
  else pageJobs(gen);
  main.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
route();
