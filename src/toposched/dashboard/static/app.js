// The toposched dashboard: plain JS over the read API (/api/v1), kept live by polling.
// Every request carries the signed-in token, so a page shows exactly what the API lets it see.

const POLL_MS = 1000; // changes must show within 2 s
const BIG_POLL_MS = 5000; // a cluster of hundreds of nodes: one map is ~1 kB a node
const TOKEN = "toposched.token";
const SAMPLES = "toposched.samples";
const ENDED = new Set(["succeeded", "failed", "cancelled", "rejected", "dependency-failed", "idle-stopped", "timed-out"]);
const HOLDING = new Set(["running", "stopping"]); // the states in which a job holds its GPUs
const SMALL_GPUS = 800; // up to this many GPUs the cluster page fetches the running jobs' teams
const RESERVING = 200; // the waiting jobs (oldest first) whose reasons are read for reservations
const LEGEND = 40; // jobs named in the cluster page's legend

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const who = document.getElementById("who");
const state = { health: null, me: null, bandwidth: {}, presets: {}, teams: new Map(), page: null, busy: false, worker: 0,
  logs: new Map(), confirm: false, nodes: 0, lastPoll: 0, missing: null };

const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

// ---- auth and requests ----

const token = () => sessionStorage.getItem(TOKEN) || localStorage.getItem(TOKEN) || "";

function signOut() {
  sessionStorage.removeItem(TOKEN);
  localStorage.removeItem(TOKEN);
  state.me = null;
  state.page = null;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, { method = "GET", text = false } = {}) {
  const headers = { Accept: text ? "text/plain" : "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const reply = await fetch(path, { method, headers, cache: "no-store" });
  const body = await reply.text();
  if (!reply.ok) throw new ApiError(reply.status, detail(body, reply));
  return text ? body : JSON.parse(body);
}

// Every page of a job list: the server gives at most its page size and `metadata.continue`
// while more remain (a server that does not page answers all at once).
async function allJobs(path, pages = 20) {
  const jobs = [];
  let next = null;
  for (let i = 0; i < pages; i++) {
    const page = await api(next ? `${path}&continue=${encodeURIComponent(next)}` : path);
    jobs.push(...page.jobs);
    next = page.metadata?.continue;
    if (!next) break;
  }
  return { jobs };
}

function detail(body, reply) {
  try {
    const d = JSON.parse(body).detail;
    if (typeof d === "string") return d;
    if (Array.isArray(d)) return d.map((e) => e.msg).join("; ");
  } catch { /* not JSON: say the status */ }
  return `${reply.status} ${reply.statusText}`;
}

// What the API lets this user do to a job: users act on their own team's jobs, admins on all.
const mayTouch = (job) => state.me?.role === "admin" || state.me?.team === job.queue;

// `2 × 1 GPU`; an elastic job says how many of its workers run now and its range.
function shape(job, long = false) {
  const per = long ? `${job.gpus_per_worker} GPU(s)` : `${job.gpus_per_worker} GPU`;
  const elastic = job.spec?.elastic;
  if (!elastic) return long ? `${job.workers} worker(s) × ${per}` : `${job.workers}×${per}`;
  const running = HOLDING.has(job.state) ? job.placement.length : 0;
  const range = `elastic ${elastic.min}:${elastic.max}`; // as `get` writes it
  if (!long) return `${running || elastic.min}×${per} (${range})`;
  return `${running ? `${running} running` : "none running"} (${range}) × ${per}`;
}

const jobPath = (name) => `/api/v1/jobs/${encodeURIComponent(name).replace(/%2F/g, "/")}`;
const jobLink = (name) => `<a href="#/job/${encodeURIComponent(name)}">${esc(name)}</a>`;

function say(message, kind = "error") {
  notice.hidden = false;
  notice.className = kind;
  notice.innerHTML = `<span>${esc(message)}</span><button data-action="dismiss" aria-label="dismiss">×</button>`;
}

function unsay() {
  notice.hidden = true;
  notice.textContent = "";
}

// ---- drawing helpers ----

const last = new WeakMap();
function patch(el, html) {
  if (el && last.get(el) !== html) {
    el.innerHTML = html;
    last.set(el, html);
  }
}

function hue(name) {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return (h * 137.508) % 360;
}
const jobColour = (name) => `hsl(${hue(name).toFixed(0)} 65% 52%)`;

function ago(seconds) {
  if (seconds == null) return "";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 90) return `${s.toFixed(0)} s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}
const when = (t) => (t == null ? "" : new Date(t * 1000).toLocaleString());
const badge = (s) => `<span class="state ${esc(s)}">${esc(s === "pending" ? "waiting" : s)}</span>`;

function gbps(code) {
  if (code === "X") return 0;
  const nv = /^NV(\d+)$/.exec(code);
  if (nv) return Number(nv[1]) * (state.bandwidth.NV ?? 25);
  return state.bandwidth[code] ?? 0;
}

// Components of the GPUs joined by links that `joined` accepts.
function components(indices, links, joined) {
  const seen = new Set();
  const groups = [];
  for (const start of indices) {
    if (seen.has(start)) continue;
    const group = [];
    const todo = [start];
    seen.add(start);
    while (todo.length) {
      const g = todo.pop();
      group.push(g);
      for (const o of indices) {
        if (!seen.has(o) && joined(links[g][o])) {
          seen.add(o);
          todo.push(o);
        }
      }
    }
    groups.push(group.sort((a, b) => a - b));
  }
  return groups;
}

// GPUs grouped by socket, then by PCIe switch. A preset's are known; otherwise a socket is a
// set of GPUs no two of which talk over SYS (NVLink hides the PCIe path between a pair, so
// SYS is what tells sockets apart), and a switch the GPUs joined by PIX.
function layout(node) {
  const known = state.presets[node.topology];
  if (known && known.sockets.length === node.gpus.length) {
    const groups = new Map();
    node.gpus.forEach(({ index }) => {
      const socket = groups.get(known.sockets[index]) ?? new Map();
      groups.set(known.sockets[index], socket);
      socket.set(known.switches[index], [...(socket.get(known.switches[index]) ?? []), index]);
    });
    return [...groups.values()].map((socket) => [...socket.values()]);
  }
  const sockets = [];
  for (const { index } of node.gpus) {
    const home = sockets.find((s) => s.every((o) => node.links[index][o] !== "SYS"));
    if (home) home.push(index);
    else sockets.push([index]);
  }
  return sockets.map((socket) => components(socket, node.links, (c) => c === "PIX"));
}

const reservedRe = /reserved (\S+) GPUs (\d+(?:,\d+)*)/;
function reservations(jobs) {
  const held = new Map();
  for (const job of jobs) {
    const m = job.state === "pending" && reservedRe.exec(job.reason);
    if (m) for (const g of m[2].split(",")) held.set(`${m[1]}:${g}`, job.name);
  }
  return held;
}

const nvOf = (node, g) => node.links[g].flatMap((c, o) => (/^NV/.test(c) ? [o] : []));

// A shared GPU's holders and their shares: "a 0.25, b 0.25 4096Mi (0.5 left)".
function sharesText(shares) {
  const held = shares.map((s) => [s.job, s.milli ? `${s.milli / 1000}` : "",
    s.memory_mib ? `${s.memory_mib}Mi` : ""].filter(Boolean).join(" "));
  const left = 1000 - shares.reduce((sum, s) => sum + s.milli, 0);
  return `${held.join(", ")} (${left / 1000} left)`;
}

function gpuCell(node, gpu, reserved, mark) {
  const shared = gpu.shares?.length ? gpu.shares : null;
  const team = gpu.job ? state.teams.get(gpu.job) : null;
  const holder = reserved.get(`${node.name}:${gpu.index}`);
  const nv = nvOf(node, gpu.index).map((o) => `${o} (${node.links[gpu.index][o]})`);
  const info = [`GPU ${gpu.index} on ${node.name}`,
    gpu.job ? `job ${gpu.job}${team ? `, team ${team}` : ""}` : shared ? `shared: ${sharesText(shared)}`
      : gpu.past ? "not this job's" : "free",
    gpu.healthy ? null : "UNHEALTHY", holder ? `reserved for ${holder}` : null,
    gpu.busy_pct != null ? `${gpu.busy_pct.toFixed(0)}% busy` : null,
    gpu.memory_used ? `${gib(gpu.memory_used)} in use` : null,
    gpu.outside?.length ? `pids ${gpu.outside.join(", ")} run outside the scheduler` : null,
    nv.length ? `NVLink to ${nv.join(", ")}` : null].filter(Boolean).join(" · ");
  const cls = ["gpu", gpu.job || shared ? "busy" : "free", shared ? "shared" : "", gpu.healthy ? "" : "sick",
    holder ? "reserved" : "", mark && !mark.has(gpu.index) ? "dim" : ""].join(" ").trim();
  const vars = [gpu.job ? `--c:${jobColour(gpu.job)}` : "", gpu.busy_pct != null ? `--busy:${gpu.busy_pct.toFixed(0)}` : ""];
  const colour = vars.some(Boolean) ? ` style="${vars.filter(Boolean).join(";")}"` : "";
  const busy = gpu.busy_pct != null ? ` data-busy="${gpu.busy_pct.toFixed(0)}"` : "";
  const label = mark && mark.has(gpu.index) ? `w${mark.get(gpu.index)}` : gpu.past ? "" : shared ? `${shared.length} shares`
    : gpu.job ?? (gpu.healthy ? "free" : "down");
  return `<button class="${cls}"${colour} data-action="gpu" data-node="${esc(node.name)}" ` +
    `data-gpu="${gpu.index}" data-job="${esc(gpu.job ?? "")}" data-nv="${nvOf(node, gpu.index).join(",")}"${busy} title="${esc(info)}">` +
    `<b>${gpu.index}</b><span>${esc(label)}</span></button>`;
}

function groupsHtml(node, reserved, mark = null) {
  const byIndex = new Map(node.gpus.map((g) => [g.index, g]));
  const sockets = layout(node).map((switches, s) => {
    const sw = switches.map((gpus) =>
      `<div class="switch"><span class="tag">PCIe switch</span>` +
      `<div class="gpus">${gpus.map((g) => gpuCell(node, byIndex.get(g), reserved, mark)).join("")}</div></div>`);
    return `<div class="socket"><span class="tag">socket ${s}</span>${sw.join("")}</div>`;
  });
  return `<div class="sockets">${sockets.join("")}</div>`;
}

function heatHtml(node) {
  const max = Math.max(1, ...node.links.flat().map(gbps));
  const head = node.gpus.map((g) => `<th>${g.index}</th>`).join("");
  const rows = node.links.map((row, i) => `<tr><th>${i}</th>${row.map((c) => {
    const v = gbps(c);
    const light = c === "X" ? 96 : 92 - 55 * (v / max);
    return `<td style="background:hsl(215 70% ${light.toFixed(0)}%)${light < 60 ? ";color:#fff" : ""}" ` +
      `title="GPU ${i} ↔ ${c === "X" ? "itself" : `${c}: ${v} GB/s`}">${c === "X" ? "" : v}</td>`;
  }).join("")}</tr>`).join("");
  return `<table class="heat"><caption>GB/s between GPUs (NVLink: per link × links)</caption>` +
    `<thead><tr><th></th>${head}</tr></thead><tbody>${rows}</tbody></table>`;
}

function nodeHead(node) {
  const used = node.gpus.filter((g) => g.job).length;
  const sick = node.gpus.filter((g) => !g.healthy).length;
  const labels = Object.entries(node.labels).map(([k, v]) => `<code>${esc(k)}=${esc(v)}</code>`).join(" ");
  return `<h3>${esc(node.name)}</h3><span class="muted">${esc(node.topology)} · ${used}/${node.gpus.length} GPUs in use` +
    `${sick ? ` · <b class="bad">${sick} unhealthy</b>` : ""}</span> <span class="hw muted">${hardware(node)}</span> ${labels}`;
}

// GPU type and memory, and the CPUs and memory the node's workers hold of what it has (the
// node says null where it does not count them).
function hardware(node) {
  const parts = [];
  if (node.gpu_type) parts.push(esc(node.gpu_type) + (node.gpu_memory ? ` ${gib(node.gpu_memory)}` : ""));
  if (node.cpus != null) parts.push(`CPUs ${node.cpus_used / 1000}/${node.cpus / 1000} used`);
  if (node.memory != null) parts.push(`memory ${gib(node.memory_used)}/${gib(node.memory)} used`);
  return parts.join(" · ");
}

function gib(bytes) {
  return bytes >= 2 ** 30 ? `${+(bytes / 2 ** 30).toFixed(1)} GiB` : `${Math.round(bytes / 2 ** 20)} MiB`;
}

function table(headers, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty)}</p>`;
  return `<div class="scroll"><table><thead><tr>${headers.map((h) => `<th>${h}</th>`).join("")}</tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table></div>`;
}

function spark(points, label, max) {
  if (points.length < 2) return `<figure class="spark"><figcaption>${esc(label)}</figcaption><p class="muted">collecting…</p></figure>`;
  const t0 = points[0][0];
  const span = Math.max(1, points[points.length - 1][0] - t0);
  const top = Math.max(1, max ?? Math.max(...points.map((p) => p[1])));
  const path = points.map(([t, v], i) =>
    `${i ? "L" : "M"}${((200 * (t - t0)) / span).toFixed(1)},${(38 - (36 * v) / top).toFixed(1)}`).join(" ");
  const now = points[points.length - 1][1];
  return `<figure class="spark"><figcaption>${esc(label)}: <b>${now}</b></figcaption>` +
    `<svg viewBox="0 0 200 40" preserveAspectRatio="none" role="img" aria-label="${esc(label)}">` +
    `<path d="${path}"/></svg><small class="muted">last ${(span / 60).toFixed(0)} min</small></figure>`;
}

// The samples live in this tab (the API keeps no history): one every 10 s, for 6 hours.
function sample(used, waiting) {
  const all = JSON.parse(sessionStorage.getItem(SAMPLES) || "[]");
  const now = Date.now() / 1000;
  if (!all.length || now - all[all.length - 1][0] >= 10) all.push([now, used, waiting]);
  const kept = all.filter((s) => now - s[0] < 6 * 3600);
  sessionStorage.setItem(SAMPLES, JSON.stringify(kept));
  return kept;
}

// ---- pages ----

const pages = {};

pages.cluster = {
  skeleton: () => `<h1>Cluster</h1><div id="summary" class="cards"></div><div id="charts" class="charts"></div>
    <h2>Nodes</h2><div id="legend" class="legend"></div>
    <p id="gpu-info" class="muted">Tap or hover a GPU for its job and team.</p><div id="nodes"></div>`,
  // Few requests and bytes on a large cluster: one GPU map, the oldest waiting jobs (for
  // reservations), the queues' counts; a job's team is fetched when its GPU is pointed at.
  async refresh() {
    const small = (state.health?.gpus ?? 0) <= SMALL_GPUS;
    const [{ nodes }, { jobs: waiting }, { queues }, running] = await Promise.all([api("/api/v1/nodes"),
      api(`/api/v1/jobs?state=pending&limit=${RESERVING}`), api("/api/v1/queues"),
      small ? allJobs("/api/v1/jobs?state=running&state=stopping") : { jobs: [] }]);
    state.nodes = nodes.length;
    for (const j of running.jobs) state.teams.set(j.name, j.queue);
    const reserved = reservations(waiting);
    const gpus = nodes.flatMap((n) => n.gpus);
    const used = gpus.filter((g) => g.job).length;
    const holding = [...new Set(gpus.map((g) => g.job).filter(Boolean))].sort();
    const queued = queues.reduce((sum, q) => sum + q.pending, 0);
    const cards = [["GPUs", gpus.length], ["in use", used], ["free", gpus.filter((g) => !g.job && g.healthy).length],
      ["unhealthy", gpus.filter((g) => !g.healthy).length], ["reserved", reserved.size],
      ["jobs running", holding.length], ["jobs waiting", queued]];
    patch(document.getElementById("summary"),
      cards.map(([k, v]) => `<div class="card"><b data-stat="${esc(k)}">${v}</b><span>${esc(k)}</span></div>`).join(""));
    const samples = sample(used, queued);
    patch(document.getElementById("charts"),
      spark(samples.map((s) => [s[0], s[1]]), "GPUs in use", gpus.length) +
      spark(samples.map((s) => [s[0], s[2]]), "jobs waiting"));
    patch(document.getElementById("legend"), holding.slice(0, LEGEND).map((name) => {
      const team = state.teams.get(name);
      return `<a class="key" href="#/job/${encodeURIComponent(name)}"><i style="--c:${jobColour(name)}"></i>${esc(name)}` +
        `${team ? ` <small>${esc(team)}</small>` : ""}</a>`;
    }).join("") + (holding.length > LEGEND ? `<span class="key muted">and ${holding.length - LEGEND} more jobs</span>` : "") +
      `<span class="key"><i class="reserved"></i>reserved</span><span class="key"><i class="sick"></i>unhealthy</span>`);
    drawNodes(document.getElementById("nodes"), nodes, reserved);
  },
};

// One pass of HTML for all nodes; later polls patch each node's GPUs alone, so an open link
// matrix stays open and 1,000 nodes cost one string compare each.
function drawNodes(box, nodes, reserved) {
  const names = nodes.map((n) => n.name).join("\n");
  if (box.dataset.names !== names) {
    const open = nodes.length <= 4;
    box.innerHTML = nodes.map((n, i) => `<article class="node" data-i="${i}"><header></header><div class="map"></div>` +
      `<details class="links"${open ? " open" : ""}><summary>Link matrix (GB/s)</summary>${open ? heatHtml(n) : ""}</details></article>`).join("");
    box.dataset.names = names;
    box.querySelectorAll("details.links").forEach((d, i) => d.addEventListener("toggle", () => {
      if (d.open && !d.querySelector("table")) d.insertAdjacentHTML("beforeend", heatHtml(nodes[i]));
    }));
  }
  const cards = box.children;
  nodes.forEach((n, i) => {
    patch(cards[i].firstElementChild, nodeHead(n));
    patch(cards[i].children[1], groupsHtml(n, reserved));
  });
}

function blockers(job, nodes, waiting) {
  const m = reservedRe.exec(job.reason);
  if (m) {
    const node = nodes.find((n) => n.name === m[1]);
    const gpus = new Set(m[2].split(",").map(Number));
    const holders = node ? [...new Set(node.gpus.filter((g) => gpus.has(g.index) && g.job).map((g) => g.job))] : [];
    return holders.length ? `waits for ${holders.map(jobLink).join(", ")} to end` : "its reserved GPUs are free";
  }
  const ahead = waiting.slice(0, waiting.indexOf(job));
  return ahead.length ? `behind ${ahead.slice(0, 3).map((j) => jobLink(j.name)).join(", ")}${ahead.length > 3 ? ` and ${ahead.length - 3} more` : ""}` : "";
}

// The order the core considers waiting jobs in, as far as the API tells: the job holding the
// reservation first, then by priority, then by submission.
function considered(waiting) {
  return [...waiting].sort((a, b) => (reservedRe.test(b.reason) - reservedRe.test(a.reason)) ||
    (b.priority - a.priority) || (a.submitted_at - b.submitted_at));
}

pages.queue = {
  skeleton: (r) => `<h1>Queue</h1><form id="filters" class="filters">
      <label>Team <select name="team"><option value="">all teams</option></select></label>
      <label>State <select name="state">${["all", "waiting", "running", "ended"].map((s) =>
        `<option${r.params.get("state") === s ? " selected" : ""}>${s}</option>`).join("")}</select></label></form>
    <section data-show="waiting"><h2>Waiting</h2><p class="muted">In the order the scheduler considers them: the job holding
      a reservation first, then by priority, then by submission.</p><div id="waiting"></div></section>
    <section data-show="running"><h2>Running</h2><div id="running"></div></section>
    <section data-show="ended"><h2>Recent</h2><div id="recent"></div></section>`,
  async refresh(r) {
    const team = r.params.get("team") || "";
    const show = r.params.get("state") || "all";
    const q = team ? `&queue=${encodeURIComponent(team)}` : "";
    const [live, recent, { nodes }, { queues }] = await Promise.all([allJobs(`/api/v1/jobs?limit=1000${q}`),
      api(`/api/v1/jobs?all=true&newest_first=true&limit=100${q}`), api("/api/v1/nodes"), api("/api/v1/queues")]);
    const select = document.querySelector("#filters select[name=team]");
    patch(select, `<option value="">all teams</option>` + queues.map((t) =>
      `<option${t.name === team ? " selected" : ""}>${esc(t.name)}</option>`).join(""));
    document.querySelectorAll("section[data-show]").forEach((s) => {
      s.hidden = show !== "all" && s.dataset.show !== show;
    });
    const waiting = considered(live.jobs.filter((j) => j.state === "pending"));
    patch(document.getElementById("waiting"), table(["#", "job", "team", "priority", "shape", "waiting since", "why it waits", "blocked by"],
      waiting.map((j, i) => `<tr data-job="${esc(j.name)}"><td>${i + 1}</td><td>${jobLink(j.name)}</td><td>${esc(j.queue)}</td>` +
        `<td>${j.priority}</td><td>${esc(shape(j))}</td><td title="${esc(when(j.submitted_at))}">${ago(j.submitted_at)}</td>` +
        `<td class="reason">${esc(j.reason)}</td><td class="blockers">${blockers(j, nodes, waiting)}</td></tr>`), "Nobody waits."));
    const running = live.jobs.filter((j) => j.state === "running" || j.state === "stopping");
    patch(document.getElementById("running"), table(["job", "team", "state", "GPUs", "since", "why here"],
      running.map((j) => `<tr data-job="${esc(j.name)}"><td>${jobLink(j.name)}</td><td>${esc(j.queue)}</td><td>${badge(j.state)}` +
        `${j.activity?.idle_since != null ? ` <span class="state idle">idle</span>` : ""}</td>` +
        `<td>${j.placement.map((w) => `${esc(w.node)}:${w.gpus.join(",")}`).join(" ")}</td>` +
        `<td title="${esc(when(j.started_at))}">${ago(j.started_at)}</td><td class="reason">${esc(j.reason)}</td></tr>`), "Nothing runs."));
    const ended = recent.jobs.filter((j) => ENDED.has(j.state))
      .sort((a, b) => (b.ended_at ?? b.submitted_at) - (a.ended_at ?? a.submitted_at)).slice(0, 50);
    patch(document.getElementById("recent"), table(["job", "team", "state", "ended", "why"],
      ended.map((j) => `<tr data-job="${esc(j.name)}"><td>${jobLink(j.name)}</td><td>${esc(j.queue)}</td><td>${badge(j.state)}</td>` +
        `<td title="${esc(when(j.ended_at))}">${ago(j.ended_at)}</td><td class="reason">${esc(j.reason)}</td></tr>`), "No job has ended yet."));
  },
};

pages.teams = {
  skeleton: () => `<h1>Teams</h1><p class="muted">Each team's guaranteed share of GPUs, what it uses, and what it
    borrows beyond its share (borrowed GPUs may be reclaimed when their owners need them).</p><div id="teams"></div>`,
  async refresh() {
    const { queues } = await api("/api/v1/queues");
    const total = Math.max(1, state.health?.gpus ?? 1, ...queues.map((q) => Math.max(q.used_gpus, q.guaranteed_gpus)));
    const pct = (n) => `${((100 * n) / total).toFixed(1)}%`;
    patch(document.getElementById("teams"), table(["team", "guaranteed", "in use", "borrowing", "running", "waiting", "share"],
      queues.map((q) => {
        const own = Math.min(q.used_gpus, q.guaranteed_gpus);
        const borrowed = Math.max(0, q.used_gpus - q.guaranteed_gpus);
        return `<tr data-team="${esc(q.name)}"><td><a href="#/queue?team=${encodeURIComponent(q.name)}">${esc(q.name)}</a></td>` +
          `<td>${q.guaranteed_gpus}</td><td>${q.used_gpus}</td><td class="${borrowed ? "warn" : ""}">${borrowed}</td>` +
          `<td>${q.running}</td><td>${q.pending}</td><td class="barcell"><div class="bar">` +
          `<i class="own" style="width:${pct(own)}"></i><i class="borrowed" style="width:${pct(borrowed)}"></i>` +
          `<b class="share" style="left:${pct(q.guaranteed_gpus)}"></b></div></td></tr>`;
      }), "No team has a queue yet."));
  },
};

pages.job = {
  skeleton: (r) => `<h1><span id="job-name">${esc(r.arg)}</span> <span id="job-state"></span></h1>
    <div id="job-actions" class="actions"></div><div id="job-summary"></div>
    <h2>Placement</h2><div id="job-placement"></div><div id="job-activity" class="charts"></div><h2>Why</h2><pre id="job-explain" class="explain"></pre>
    <h2>History</h2><ol id="job-history" class="timeline"></ol>
    <h2>Logs</h2><div id="job-workers" class="tabs"></div><pre id="job-log" class="log"></pre>
    <h2>Spec</h2><pre id="job-spec"></pre>`,
  async refresh(r) {
    const path = jobPath(r.arg);
    const [job, explained, { nodes }] = await Promise.all([api(path),
      api(`${path}/explain`).catch((e) => ({ text: `(no explanation: ${e.message})` })), api("/api/v1/nodes")]);
    const idle = job.activity?.idle_since != null;
    patch(document.getElementById("job-state"), badge(job.state) + (idle ? ` <span class="state idle">idle</span>` : ""));
    state.teams.set(job.name, job.queue);
    const live = !ENDED.has(job.state);
    // A job waiting again after a stop holds nothing, whatever its reason says of its last run.
    const holding = HOLDING.has(job.state) && job.placement.length > 0;
    patch(document.getElementById("job-actions"), !live || !mayTouch(job) ? "" : state.confirm
      ? `Cancel ${esc(job.name)}? <button class="danger" data-action="cancel-yes">Yes, cancel it</button> <button data-action="cancel-no">No</button>`
      : `<button class="danger" data-action="cancel">Cancel job</button>`);
    patch(document.getElementById("job-summary"), `<dl class="facts">` + [["team", esc(job.queue)], ["owner", esc(job.owner)],
      ["priority", job.priority], ["shape", esc(shape(job, true))],
      ["topology", job.spec?.gputopology === false ? "off (--gputopology=false): the lowest free GPU indices" : "on"],
      ["ring bandwidth", job.ring_gbps != null ? `${+job.ring_gbps.toFixed(1)} GB/s` : "—"],
      ["speed", speed(job)], ["busy", busyText(job)], ["attempt", job.attempt], ["restarts", job.restarts],
      ["submitted", esc(when(job.submitted_at))], ["started", started(job, holding)], ["ended", esc(when(job.ended_at))],
      ["now", esc(job.reason)]].map(([k, v]) => `<dt>${k}</dt><dd data-fact="${k}">${v}</dd>`).join("") + `</dl>`);
    patch(document.getElementById("job-placement"), placementHtml(job, nodes, holding, live));
    const { samples } = holding ? await api(`${path}/activity`) : { samples: [] };
    patch(document.getElementById("job-activity"), holding ? spark(samples.map(([t, v]) => [t, Math.round(v)]), "GPUs busy (%)", 100) : "");
    patch(document.getElementById("job-explain"), esc(explained.text));
    patch(document.getElementById("job-history"), (job.history ?? []).map((h) =>
      `<li><time title="${esc(when(h.time))}">${esc(new Date(h.time * 1000).toLocaleTimeString())}</time>` +
      `<b>${h.old ? `${esc(h.old)} → ` : ""}${esc(h.new)}</b> <span>${esc(h.reason)}</span></li>`).join(""));
    patch(document.getElementById("job-spec"), esc(JSON.stringify(job.spec, null, 2)));
    await refreshLog(job, path);
  },
};

// `predicted 437 samples/s (51% of best) for resnet50`, while the job holds GPUs.
function speed(job) {
  const p = job.predicted;
  if (!p) return "—";
  return `predicted ${p.samples_per_s.toFixed(0)} samples/s (${(100 * p.share).toFixed(0)}% of best) ` +
    `<span class="muted">for ${esc(p.model)}; the best placement of as many GPUs: ${p.best_samples_per_s.toFixed(0)} samples/s</span>`;
}

// `87% busy now, 64% on average`, as `get` says it; the CPU stand-in named where it is one.
function busyText(job) {
  const a = job.activity;
  if (!a) return "—";
  const what = a.source === "nvml" ? "" : ` <span class="muted">(CPU time of its processes: no NVML on the server)</span>`;
  const idle = a.idle_since != null ? ` · <b class="warn">idle since ${esc(new Date(a.idle_since * 1000).toLocaleTimeString())}</b>` : "";
  return `${a.busy_pct.toFixed(0)}% busy now, ${a.mean_pct.toFixed(0)}% on average${what}${idle}`;
}

// A job waiting again after a stop has a start time from its last run, not a current one.
function started(job, holding) {
  if (job.started_at == null) return "";
  if (holding || job.state !== "pending") return esc(when(job.started_at));
  return `<span class="muted">not running now (last started ${esc(when(job.started_at))})</span>`;
}

// The job's GPUs on their nodes. While it holds them the map is the live one; an ended job's
// GPUs are drawn alone, as it held them: their current holders are another job's story.
function placementHtml(job, nodes, holding, live) {
  if (!holding && live) {
    const was = job.started_at != null ? " It ran, was stopped and gave its GPUs back; it waits to be placed again." : "";
    return `<p class="muted">Not placed now.${was}</p>`;
  }
  if (!job.placement.length) return `<p class="muted">No GPUs held.</p>`;
  const mine = new Map();
  for (const w of job.placement) for (const g of w.gpus) mine.set(`${w.node}:${g}`, w.worker);
  return nodes.filter((n) => job.placement.some((w) => w.node === n.name)).map((n) => {
    const mark = new Map(n.gpus.filter((g) => mine.has(`${n.name}:${g.index}`)).map((g) => [g.index, mine.get(`${n.name}:${g.index}`)]));
    if (holding) return `<article class="node"><header>${nodeHead(n)}</header>${groupsHtml(n, new Map(), mark)}</article>`;
    const past = { ...n, gpus: n.gpus.map((g) => ({ index: g.index, healthy: true, past: true, job: mark.has(g.index) ? job.name : null })) };
    return `<article class="node past"><header><h3>${esc(n.name)}</h3><span class="muted">the GPUs it held until it ended ` +
      `(their current holders are not shown)</span></header>${groupsHtml(past, new Map(), mark)}</article>`;
  }).join("");
}

async function refreshLog(job, path) {
  const box = document.getElementById("job-log");
  const workers = job.placement.length;
  patch(document.getElementById("job-workers"), Array.from({ length: workers }, (_, w) =>
    `<button data-action="worker" data-worker="${w}" class="${w === state.worker ? "on" : ""}">worker ${w}</button>`).join(""));
  if (!workers) return patch(box, `<span class="muted">No output: the job has not started.</span>`);
  const key = `${job.name}/${job.attempt}/${state.worker}`;
  const known = state.logs.get(key);
  if (known && known.done) return patch(box, known.html);
  let html;
  try {
    const text = await api(`${path}/logs?worker=${state.worker}`, { text: true });
    html = esc(text.split("\n").slice(-300).join("\n")) || `<span class="muted">(no output yet)</span>`;
  } catch (e) {
    html = `<span class="refused">The API refused the logs (${e.status}): ${esc(e.message)}</span>`;
    // A refusal does not change while the page is open: asked once, not every second.
    if (e.status === 403) {
      state.logs.set(key, { html, done: true });
      return patch(box, html);
    }
  }
  state.logs.set(key, { html, done: ENDED.has(job.state) });
  const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  patch(box, html);
  if (atEnd) box.scrollTop = box.scrollHeight;
}

async function cancel() {
  const name = route().arg;
  state.confirm = false;
  try {
    await api(jobPath(name), { method: "DELETE" });
    say(`Cancelling ${name}.`, "info");
  } catch (e) {
    say(`The API refused to cancel ${name} (${e.status}): ${e.message}`);
  }
  tick(true);
}

// Names the GPU's job and team under the map; a team not known yet is asked for once.
async function describe(el) {
  const info = document.getElementById("gpu-info");
  if (!info) return;
  info.textContent = el.title;
  const job = el.dataset.job;
  if (!job || state.teams.has(job)) return;
  state.teams.set(job, null);
  try {
    state.teams.set(job, (await api(jobPath(job))).queue);
  } catch {
    state.teams.delete(job); // gone, or refused: the map says what it knows
    return;
  }
  if (info.textContent === el.title) info.textContent = el.title.replace(`job ${job}`, `job ${job}, team ${state.teams.get(job)}`);
}

// ---- sign in, routing, the poll ----

function signInForm(message) {
  state.page = "signin";
  who.innerHTML = "";
  main.innerHTML = `<form id="signin" class="signin"><h1>Sign in</h1>
    <p>Paste an API token: the admin token is in the server's data directory (<code>admin.token</code>);
    an admin makes team tokens with <code>toposched token create --user NAME --team TEAM</code>.</p>
    <label>Token <input name="token" type="password" autocomplete="off" required></label>
    <label class="inline"><input name="remember" type="checkbox"> remember in this browser</label>
    <button type="submit">Sign in</button>${message ? `<p class="refused" role="alert">${esc(message)}</p>` : ""}</form>`;
}

async function signIn(form) {
  const value = form.token.value.trim();
  (form.remember.checked ? localStorage : sessionStorage).setItem(TOKEN, value);
  state.page = null;
  await tick(true);
}

function route() {
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, ...rest] = path.split("/");
  return { page: pages[page] ? page : "cluster", arg: decodeURIComponent(rest.join("/")), params: new URLSearchParams(query) };
}

async function render(force) {
  const r = route();
  state.health = await api("/api/v1/health");
  if (notice.hidden && state.health.status !== "ok" && state.health.status !== "standby") {
    say(`The server is ${state.health.status}${state.health.degraded ? `: ${state.health.degraded}` : ""}. Reads still work.`, "warn");
  }
  if (state.health.auth && !token()) {
    if (state.page !== "signin") signInForm();
    return;
  }
  if (!state.me) {
    try {
      state.me = await api("/api/v1/whoami");
    } catch (e) {
      if (e.status !== 401) throw e;
      signOut();
      signInForm(`The server refused this token: ${e.message}`);
      return;
    }
    ({ bandwidth: state.bandwidth, presets: state.presets } = await api("/dashboard/topology.json"));
    who.innerHTML = `<span>${esc(state.me.user)} · ${esc(state.me.team || "all teams")} (${esc(state.me.role)})</span>` +
      (state.health.auth ? ` <button data-action="signout">Sign out</button>` : "");
  }
  const key = location.hash || "#/cluster";
  if (state.page !== key) {
    state.page = key;
    state.missing = null;
    state.worker = 0;
    state.confirm = false;
    main.innerHTML = `<div class="page ${r.page}">${pages[r.page].skeleton(r)}</div>`;
    document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("on", a.dataset.page === r.page));
  }
  if (state.missing === key) return; // a job that is not there: said once, not asked every second
  const slow = state.nodes > 100 && !force && Date.now() - state.lastPoll < BIG_POLL_MS;
  if (slow) return;
  state.lastPoll = Date.now();
  await pages[r.page].refresh(r);
  if (main.dataset.ready !== key) performance.mark(`drawn ${key}`); // for benchmarks/dashboard.py
  main.dataset.ready = key;
}

async function tick(force = false) {
  if (state.busy) return;
  state.busy = true;
  try {
    await render(force);
  } catch (e) {
    if (e.status === 401) {
      signOut();
      signInForm(`The server refused this token: ${e.message}`);
    } else if (e.status === 404 && route().page === "job") {
      state.missing = state.page;
      main.innerHTML = `<h1>Not found</h1><p class="refused">${esc(e.message)}</p>` +
        `<p><a href="#/queue">See the queue</a>; this page does not ask again until it is reloaded.</p>`;
    } else {
      say(`Cannot load this page: ${e.message}`);
    }
  } finally {
    state.busy = false;
  }
}

document.addEventListener("click", (event) => {
  const el = event.target.closest("[data-action]");
  if (!el) return;
  const action = el.dataset.action;
  if (action === "dismiss") unsay();
  if (action === "signout") {
    signOut();
    tick(true);
  }
  if (action === "cancel" || action === "cancel-no") {
    state.confirm = action === "cancel";
    tick(true);
  }
  if (action === "cancel-yes") cancel();
  if (action === "worker") {
    state.worker = Number(el.dataset.worker);
    tick(true);
  }
  if (action === "gpu") describe(el);
});

// Hovering a GPU outlines its NVLink neighbours on the same node.
document.addEventListener("mouseover", (event) => {
  const el = event.target.closest("button.gpu");
  document.querySelectorAll("button.gpu.nv").forEach((b) => b.classList.remove("nv"));
  if (!el) return;
  describe(el);
  const peers = new Set(el.dataset.nv.split(","));
  el.closest(".sockets").querySelectorAll("button.gpu").forEach((b) => {
    if (peers.has(b.dataset.gpu)) b.classList.add("nv");
  });
});

document.addEventListener("submit", (event) => {
  event.preventDefault();
  if (event.target.id === "signin") signIn(event.target);
});

document.addEventListener("change", (event) => {
  const form = event.target.closest("#filters");
  if (!form) return;
  const params = new URLSearchParams();
  if (form.team.value) params.set("team", form.team.value);
  if (form.state.value !== "all") params.set("state", form.state.value);
  location.hash = `#/queue${params.size ? `?${params}` : ""}`;
});

window.addEventListener("hashchange", () => {
  unsay();
  tick(true);
});
tick(true);
setInterval(tick, POLL_MS);
