// trainq's pages: an API client in the browser. Every number comes from /v1/... asked as
// whoever opened the page; the DOM is built with textContent only (job names, reasons and
// logs are other people's text).

const view = document.getElementById("view");
const live = document.getElementById("live");
const SAMPLE_MS = 5000; // GPUs change without events: one /v1/gpus for the whole box
const KEEP = 720; // an hour of samples at SAMPLE_MS

// --- the API ---------------------------------------------------------------------------

// `trainq ui` prints a URL with #token=...: kept in this origin's storage (its port's alone)
// and sent with every request; the forwarder refuses requests without it. Reached any other
// way (trainqd's socket over ssh -L) there is none, and none is needed.
const TOKEN_KEY = "trainq-ui-token";
// A page's address may carry it too: #/job/12&token=...
const given = location.hash.match(/^#(.*?)&?token=([A-Za-z0-9_-]+)$/);
if (given) {
  localStorage.setItem(TOKEN_KEY, given[2]);
  history.replaceState(null, "", `${location.pathname}#${given[1] || "/box"}`);
}
const token = localStorage.getItem(TOKEN_KEY);
const withToken = (headers = {}) => (token ? { ...headers, "x-trainq-token": token } : headers);

async function api(path) {
  const response = await fetch(path, { headers: withToken({ accept: "application/json" }) });
  const text = await response.text();
  let body = null;
  try { body = JSON.parse(text); } catch { body = null; }
  if (!response.ok && !body) throw Object.assign(new Error(text.trim() || response.statusText), { status: response.status });
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw Object.assign(new Error(message), { status: response.status });
  }
  return body;
}

// Reads an NDJSON stream, calling `each` per record, until it ends or `signal` aborts it.
async function follow(path, each, signal) {
  const response = await fetch(path, { signal, headers: withToken() });
  if (!response.ok) throw Object.assign(new Error(response.statusText), { status: response.status });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    rest += value;
    const lines = rest.split("\n");
    rest = lines.pop();
    for (const line of lines) if (line.trim()) each(JSON.parse(line));
  }
}

// --- the DOM -----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function table(caption, headers, rows, attrs = {}) {
  return el("div", { class: "scroll" },
    el("table", attrs,
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows)));
}

const cell = (text, attrs = {}) => el("td", { ...attrs, text: text ?? "–" });
const num = (text, attrs = {}) => cell(text, { ...attrs, class: `num ${attrs.class ?? ""}`.trim() });
const stateWord = (state) => el("span", { class: `state state-${state}`, "data-state": state, text: state.toLowerCase() });
const jobLink = (id) => el("a", { href: `#/job/${id}`, text: `#${id}` });
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
const pct = (value) => (value === null || value === undefined ? null : `${Math.round(value)}%`);

function show(title, ...content) {
  document.title = `${title} · trainq`;
  view.replaceChildren(el("h1", { text: title }), ...content.filter((part) => part !== null));
}

function failure(error) {
  return el("p", { class: "note", role: "alert", text: `trainqd says: ${error.message}` });
}

// --- the live parts: events and GPU samples ------------------------------------------------

const eventListeners = new Set();
let globalEvents = null; // the stream's controller while the page follows every job's events

// A job's page follows that job's own stream instead: a browser keeps at most six
// connections to one address, and each open page should hold as few as it can.
function followEvents(on) {
  if (!on) { globalEvents?.abort(); globalEvents = null; return; }
  if (globalEvents) return;
  const controller = new AbortController();
  globalEvents = controller;
  (async () => {
    for (let wait = 500; !controller.signal.aborted; wait = Math.min(wait * 2, 10000)) {
      try {
        const stream = follow("/v1/events", (event) => {
          for (const listener of eventListeners) listener(event);
        }, controller.signal);
        live.textContent = "live";
        await stream;
      } catch (error) {
        // reconnected below
      }
      if (controller.signal.aborted) return;
      live.textContent = "reconnecting…";
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  })();
}

const samples = { times: [], gpus: new Map(), last: null };
const sampleListeners = new Set();

async function sampleGpus() {
  try {
    const list = await api("/v1/gpus");
    const now = Date.now() / 1000;
    samples.times.push(now);
    for (const gpu of list.gpus) {
      if (!samples.gpus.has(gpu.index)) samples.gpus.set(gpu.index, { util: [], mem: [] });
      const series = samples.gpus.get(gpu.index);
      series.util.push(gpu.utilization_percent);
      series.mem.push(gpu.memory_used_mib);
    }
    if (samples.times.length > KEEP) {
      samples.times.shift();
      for (const series of samples.gpus.values()) { series.util.shift(); series.mem.shift(); }
    }
    samples.last = list;
    for (const listener of sampleListeners) listener(list);
  } catch (error) {
    live.textContent = `cannot reach trainqd: ${error.message}`;
  }
}

// A chart of `series` ({label, values}) over the sample times; uPlot when it loaded.
function chart(title, unit, series, times = samples.times, over = "the samples since this page opened", x = "time") {
  const box = el("figure", { class: "chart", "data-chart": title });
  box.append(el("figcaption", { text: `${title} (${unit}), ${over}` }));
  if (typeof uPlot === "undefined" || times.length === 0) return box;
  const width = Math.min(800, Math.max(280, view.clientWidth - 40));
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  new uPlot({
    width, height: 200,
    scales: { x: { time: x === "time" } },
    series: [{ label: x }, ...series.map((s, i) => ({ label: s.label, stroke: colours[i % colours.length], width: 2, spanGaps: true }))],
    axes: [{ label: x === "time" ? null : x }, { label: unit }],
  }, [times.slice(), ...series.map((s) => s.values.slice())], box);
  box.dataset.series = JSON.stringify(series.map((s) => s.values.at(-1) ?? null));
  return box;
}

// --- pages ---------------------------------------------------------------------------------

async function runningJobs() {
  const list = await api("/v1/jobs?state=RUNNING&limit=1000");
  return new Map(list.jobs.map((job) => [job.id, job]));
}

async function boxPage() {
  const list = samples.last ?? (await api("/v1/gpus"));
  const holders = await runningJobs();
  const rows = list.gpus.map((gpu) => {
    const job = gpu.job_id === null ? null : holders.get(gpu.job_id);
    let held = "free";
    if (gpu.job_id !== null) held = `job ${gpu.job_id}${job ? ` (${job.owner.user})` : ""}`;
    else if (gpu.foreign_pids.length) held = `used outside trainq (${gpu.foreign_pids.length} processes)`;
    return el("tr", { "data-gpu": gpu.index },
      num(gpu.index),
      cell(gpu.name),
      el("td", {}, gpu.job_id === null ? held : el("a", { href: `#/job/${gpu.job_id}`, text: held })),
      num(pct(gpu.utilization_percent), { class: "util" }),
      num(gpu.memory_used_mib === null ? null : `${gpu.memory_used_mib} / ${gpu.memory_total_mib} MiB`, { class: "mem" }),
      cell(gpu.drain ? `drained by ${gpu.drain.by}: ${gpu.drain.reason}` : "no"));
  });
  const gpuSeries = (key) => [...samples.gpus.entries()].map(([index, s]) => ({ label: `GPU ${index}`, values: s[key] }));
  show("The box",
    list.host_drain ? el("p", { role: "note", text: `The whole host is drained by ${list.host_drain.by}: ${list.host_drain.reason}` }) : null,
    table(`${list.gpus.length} GPUs (${list.backend})`, ["GPU", "Model", "Held by", "Utilization", "Memory", "Drained"], rows, { id: "gpus" }),
    chart("GPU utilization", "%", gpuSeries("util")),
    chart("GPU memory used", "MiB", gpuSeries("mem")));
}

async function queuePage() {
  const list = await api("/v1/jobs?limit=1000");
  const order = { RUNNING: 0, STOPPING: 1, PENDING: 2 };
  const jobs = list.jobs.slice().sort((a, b) =>
    (order[a.state] ?? 3) - (order[b.state] ?? 3) || (a.place ?? 0) - (b.place ?? 0) || a.id - b.id);
  const rows = jobs.map((job) => el("tr", { "data-job": job.id },
    el("td", {}, jobLink(job.id)),
    cell(job.name),
    cell(job.owner.user),
    el("td", {}, stateWord(job.state)),
    cell(job.gpus.length ? job.gpus.join(", ") : String(totalGpus(job.spec))),
    num(job.place),
    cell(job.pending_reason ?? (job.started_at ? `since ${when(job.started_at)}` : null))));
  const more = list.next ? el("p", { class: "note", text: `The first ${jobs.length} of ${list.total} jobs.` }) : null;
  const [every, gpus] = await Promise.all([timelineJobs(), samples.last ?? api("/v1/gpus")]);
  show("The queue",
    table(`${jobs.length} running and waiting jobs`, ["Job", "Name", "User", "State", "GPUs", "Place", "Why / since"], rows, { id: "queue" }),
    more,
    timeline(every, gpus.gpus.length));
}

// --- the queue's timeline: which job held which GPU when -------------------------------------

const TIMELINE_HOURS = 6;
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// Every job the caller may list that the timeline may need, page by page (the list is by
// id). Ended jobs never change, so those below the first one that may still matter (not
// ended, or ended in the last TIMELINE_HOURS) are not asked for again at the next redraw.
const ENDED = new Set(["COMPLETED", "FAILED", "STOPPED"]);
let timelineAfter = 0;

async function timelineJobs() {
  const jobs = [];
  for (let after = timelineAfter; ;) {
    const page = await api(`/v1/jobs?all=true&limit=1000&after=${after}`);
    jobs.push(...page.jobs);
    if (!page.next) break;
    after = page.next;
  }
  const before = Date.now() - TIMELINE_HOURS * 3600e3;
  const done = (job) => ENDED.has(job.state) && job.attempts.every((a) => a.ended_at && Date.parse(a.ended_at) < before);
  const stillNeeded = jobs.findIndex((job) => !done(job));
  const passed = stillNeeded === -1 ? jobs.length : stillNeeded;
  if (passed > 0) timelineAfter = jobs[passed - 1].id;
  return jobs.slice(passed);
}

// One row per GPU, one bar per attempt on each GPU it held, over the last TIMELINE_HOURS.
function timeline(jobs, gpuCount, now = Date.now()) {
  // The last TIMELINE_HOURS, or since the first attempt that held a GPU in them when that is
  // later (a young box's bars would be slivers at the right edge), ten minutes at least.
  const starts = jobs.flatMap((job) => (job.attempts ?? []).filter((a) => a.started_at && a.gpus.length
    && (!a.ended_at || Date.parse(a.ended_at) > now - TIMELINE_HOURS * 3600e3)).map((a) => Date.parse(a.started_at)));
  const first = starts.length ? Math.min(...starts) : now;
  const span = Math.min(TIMELINE_HOURS * 3600e3, Math.max(10 * 60e3, (now - first) * 1.05));
  const from = now - span;
  const rowHeight = 28, left = 60, right = 990, width = 1000, top = 20;
  const x = (t) => left + ((Math.max(t, from) - from) / span) * (right - left);
  const rows = Array.from({ length: gpuCount }, (_, gpu) => svg("g", { "data-gpu": gpu },
    svg("text", { x: 4, y: top + gpu * rowHeight + 18, class: "tl-gpu" }, `GPU ${gpu}`),
    svg("line", { x1: left, x2: right, y1: top + (gpu + 1) * rowHeight, y2: top + (gpu + 1) * rowHeight, class: "tl-rule" })));
  const ticks = 6;
  const hours = Array.from({ length: ticks + 1 }, (_, i) => {
    const t = from + (i * span) / ticks;
    const anchor = i === 0 ? "start" : i === ticks ? "end" : "middle";
    return svg("text", { x: x(t), y: 12, class: "tl-hour", "text-anchor": anchor },
      new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  });
  const minutes = Math.round(span / 60e3);
  const over = minutes >= 120 ? `${Math.round(minutes / 60)} hours` : `${minutes} minutes`;
  let bars = 0;
  for (const job of jobs) {
    for (const a of job.attempts ?? []) {
      if (!a.started_at || !a.gpus.length) continue;
      const start = Date.parse(a.started_at);
      const end = a.ended_at ? Date.parse(a.ended_at) : now;
      if (end < from) continue;
      // The bar's state: running, the job's end for its last attempt, "ended" for one retried.
      const state = !a.ended_at ? "RUNNING" : a.number === job.attempts.length ? job.state : "ENDED";
      const exit = a.exit_code ?? a.signal_name;
      const outcome = a.ended_at ? `${a.outcome ?? "ended"}${exit === null || exit === undefined ? "" : ` ${exit}`}` : "running";
      const words = `job ${job.id} (${job.owner.user}${job.name ? `, ${job.name}` : ""}) ${state.toLowerCase()}, attempt ${a.number}: ${outcome}, ${when(a.started_at)} to ${a.ended_at ? when(a.ended_at) : "now"}`;
      for (const gpu of a.gpus) {
        if (!rows[gpu]) continue;
        const x0 = x(start), w = Math.max(2, x(end) - x0), y = top + gpu * rowHeight + 4;
        // Each bar links to its job's page: reached by Tab, its words read from its label.
        rows[gpu].append(svg("g", {
          class: `tl-bar state-${state}`, "data-state": state,
          "data-job": job.id, "data-attempt": a.number, "data-start": a.started_at, "data-end": a.ended_at ?? "",
        }, svg("a", { href: `#/job/${job.id}`, "aria-label": words },
          svg("title", {}, words),
          svg("rect", { x: x0, y, width: w, height: rowHeight - 8, rx: 3 }),
          w > 30 ? svg("text", { x: x0 + 4, y: y + 15 }, `#${job.id}`) : "")));
        bars += 1;
      }
    }
  }
  const picture = svg("svg", {
    id: "timeline", viewBox: `0 0 ${width} ${top + gpuCount * rowHeight + 4}`, role: "group",
    "aria-label": `Which job held which GPU over the last ${over}: ${bars} bars`,
  }, ...hours, ...rows);
  return el("figure", { class: "timeline" },
    el("figcaption", { text: `Which job held which GPU, the last ${over}` }), picture);
}

let jobStream = null;
let redrawJobCharts = null; // the job page's charts follow the samples without a new render

function jobSummary(job) {
  return el("p", { id: "summary" }, "State: ", stateWord(job.state), ` · owner ${job.owner.user} · priority ${job.priority}`,
    job.pending_reason ? ` · waiting: ${job.pending_reason}` : "",
    job.place ? ` · place ${job.place}` : "",
    job.failure_reason ? ` · failed: ${job.failure_reason}` : "",
    job.stop_reason ? ` · stopped: ${job.stop_reason}` : "");
}

function attemptsTable(job) {
  const rows = job.attempts.map((a) => el("tr", { "data-attempt": a.number },
    num(a.number),
    cell(a.gpus.join(", ") || "none"),
    cell(when(a.started_at)),
    cell(when(a.ended_at)),
    cell(a.outcome ?? (a.ended_at ? null : "running")),
    cell(a.exit_code ?? a.signal_name),
    num(pct(a.gpu_util_mean)),
    num(pct(a.gpu_util_peak)),
    num(a.gpu_memory_peak_mib),
    cell(a.reason)));
  return table("Attempts and why each ended", ["#", "GPUs", "Started", "Ended", "Outcome", "Exit", "Util mean", "Util peak", "Memory peak (MiB)", "Reason"], rows, { id: "attempts" });
}

// A job of several nodes: each node, and how it ended the latest attempt (as `trainq show`).
function nodesTable(job) {
  if (!job.nodes?.length) return null;
  const live = job.state === "RUNNING" || job.state === "STOPPING";
  const rows = job.nodes.map((n) => el("tr", { "data-node": n.name },
    cell(n.name),
    cell(n.group),
    num(n.rank),
    cell(n.gpus.join(", ") || "none"),
    cell(n.outcome ?? (live ? job.state.toLowerCase() : null)),
    cell(n.exit_code ?? n.signal_name),
    num(n.restarts)));
  return table("Nodes and how each ended the latest attempt", ["Node", "Group", "Rank", "GPUs", "State", "Exit", "Restarts"], rows, { id: "nodes" });
}

// The metrics its trainer reported (metric_definitions, metrics.jsonl): one chart per series,
// one line per attempt over the steps; for those who may read its log, a short line for others.
const metricsAsked = new WeakMap(); // the newest question per section: older answers are dropped

async function metricsSection(job, into) {
  const asked = (metricsAsked.get(into) ?? 0) + 1;
  metricsAsked.set(into, asked);
  let got;
  try {
    got = await api(`/v1/jobs/${job.id}/metrics`);
    if (metricsAsked.get(into) !== asked) return;
  } catch (error) {
    if (metricsAsked.get(into) !== asked) return;
    into.dataset.refused = String(error.status ?? "");
    into.replaceChildren(el("p", { class: "note", text: error.status === 403
      ? "Its metrics are not yours to see." : `Its metrics: ${error.message}` }));
    return;
  }
  const names = [...new Set(got.attempts.flatMap((a) => Object.keys(a.series)))].sort();
  if (!names.length) { into.replaceChildren(el("p", { class: "note", text: "No metrics reported." })); return; }
  into.replaceChildren(...names.map((name) => {
    const attempts = got.attempts.filter((a) => a.series[name]);
    const steps = [...new Set(attempts.flatMap((a) => a.series[name].points.map(([step]) => step)))].sort((a, b) => a - b);
    const lines = attempts.map((a) => {
      const at = new Map(a.series[name].points);
      return { label: `attempt ${a.number}`, values: steps.map((step) => at.get(step) ?? null) };
    });
    const last = attempts.at(-1).series[name];
    const over = `latest ${last.latest ? `${last.latest[1]} at step ${last.latest[0]}` : "–"}, best ${last.best ?? "–"} (${last.direction === "maximize" ? "max" : "min"})`;
    const figure = chart(`Metric ${name}`, name, lines, steps, over, "step");
    figure.dataset.metric = name;
    figure.dataset.points = JSON.stringify(attempts.map((a) => [a.number, a.series[name].points]));
    return figure;
  }));
}

async function jobPage(id) {
  let job = await api(`/v1/jobs/${id}`);
  const states = el("ol", { id: "states" });
  const summary = el("div", {}, jobSummary(job));
  const attempts = el("div", {}, attemptsTable(job));
  const nodes = el("div", {}, nodesTable(job));
  const log = el("pre", { class: "log", id: "log", tabindex: "0", "aria-label": "log tail" });
  const charts = el("div", { id: "job-charts" });
  // The samples trainqd keeps of the running attempt: its GPUs over its run so far.
  const drawCharts = async () => {
    if (!(job.state === "RUNNING" || job.state === "STOPPING") || !job.gpus.length) return;
    const got = await api(`/v1/jobs/${job.id}/samples`).catch(() => null);
    if (!got || !got.samples.length) return;
    const times = got.samples.map((s) => Date.parse(s.time) / 1000);
    const over = `attempt ${got.attempt}, the last ${got.samples.length} samples`;
    const values = (key) => got.samples.map((s) => s[key]);
    const label = `GPU${job.gpus.length > 1 ? "s" : ""} ${job.gpus.join(", ")}`;
    charts.replaceChildren(
      chart("This job's GPU utilization", "%", [{ label, values: values("utilization_percent") }], times, over),
      chart("This job's GPU memory used", "MiB", [{ label, values: values("memory_used_mib") }], times, over));
  };
  const metrics = el("div", { id: "job-metrics" });
  const drawMetrics = () => metricsSection(job, metrics);
  drawCharts();
  drawMetrics();
  show(`Job ${job.id}: ${job.name}`,
    summary,
    el("h2", { text: "What it runs" }), specList(job.spec),
    el("h2", { text: "States" }), states,
    nodes,
    attempts,
    charts,
    el("h2", { text: "Metrics" }), metrics,
    el("h2", { text: "Log" }), log);
  // A live job's charts follow the GPU samples' pace; its metrics too, while it reports.
  redrawJobCharts = () => {
    drawCharts();
    if (job.state === "RUNNING" || job.state === "STOPPING") drawMetrics();
  };
  jobStream?.abort();
  jobStream = new AbortController();
  const signal = jobStream.signal;
  // Each of its events (the history first, then as they happen) adds a line; the record is
  // read again at most once a second, without restarting the streams.
  let reread = null;
  const rereadSoon = () => {
    reread ??= setTimeout(async () => {
      reread = null;
      if (signal.aborted) return;
      job = await api(`/v1/jobs/${id}`).catch(() => job);
      summary.replaceChildren(jobSummary(job));
      attempts.replaceChildren(attemptsTable(job));
      nodes.replaceChildren(...[nodesTable(job)].filter(Boolean));
      drawMetrics();  // an ended attempt's last reports
    }, 1000);
  };
  follow(`/v1/events?job=${id}&since=0`, (event) => {
    live.textContent = "live";
    states.append(el("li", { "data-state": event.to_state },
      `${when(event.time)}: `, stateWord(event.to_state), event.reason ? ` (${event.reason})` : ""));
    rereadSoon();
  }, signal).catch(() => {});
  followLog(job, log, signal);
}

// The GPUs a job takes in all: a job of several nodes takes each node's (trainq.core.nodes).
function totalGpus(spec) {
  const groups = spec.instance_groups ?? [];
  if (groups.length) return groups.reduce((sum, g) => sum + (g.instance_count ?? 1) * (g.gpus ?? 0), 0);
  return (spec.instance_count ?? 1) * (spec.gpus ?? 0);
}

// How its GPUs are laid out over its nodes, for the job's page.
function gpuLayout(spec) {
  const groups = spec.instance_groups ?? [];
  if (groups.length) {
    const parts = groups.map((g) => `${g.name}: ${g.instance_count ?? 1} × ${g.gpus ?? 0}`);
    return `${totalGpus(spec)} (${parts.join(", ")})`;
  }
  const nodes = spec.instance_count ?? 1;
  return nodes > 1 ? `${totalGpus(spec)} (${nodes} nodes × ${spec.gpus ?? 0})` : spec.gpus;
}

// The spec as the API gave it: other users get hidden values where the owner gets them whole.
function specList(spec) {
  const rows = [
    ["Command", spec.command ? spec.command.join(" ") : null],
    ["Image", spec.image],
    ["GPUs", gpuLayout(spec)],
    ...Object.entries(spec.environment ?? {}).map(([k, v]) => [`env ${k}`, v]),
    ...Object.entries(spec.hyperparameters ?? {}).map(([k, v]) => [`hyperparameter ${k}`, typeof v === "string" ? v : JSON.stringify(v)]),
  ].filter(([, value]) => value !== null && value !== undefined);
  return el("dl", { id: "spec" }, rows.map(([name, value]) => [el("dt", { text: name }), el("dd", { text: String(value) })]));
}

async function followLog(job, log, signal) {
  const active = job.state === "RUNNING" || job.state === "STOPPING";  // follow only a live log
  try {
    const response = await fetch(`/v1/jobs/${job.id}/logs?tail=200${active ? "&follow=1" : ""}`, { signal, headers: withToken() });
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      log.textContent = response.status === 403 ? "The log is for its owner's eyes." : (body?.error?.message ?? response.statusText);
      log.dataset.refused = String(response.status);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      log.append(value);
      log.scrollTop = log.scrollHeight;
    }
  } catch (error) {
    if (!signal.aborted) log.append(`\n[log: ${error.message}]`);
  }
}

async function usersPage() {
  const list = await api("/v1/users");
  const rows = list.users.map((u) => el("tr", { "data-user": u.user },
    cell(u.user),
    num(u.gpu_hours.toFixed(2)),
    num(`${(u.share * 100).toFixed(1)}%`),
    num(`${u.running_jobs} (${u.running_gpus} GPUs)`),
    num(`${u.waiting_jobs} (${u.waiting_gpus} GPUs)`)));
  show("Users",
    table(list.half_life_days ? `Recent use (half-life ${list.half_life_days} days)` : "Fair share is off",
      ["User", "GPU-hours", "Share", "Running", "Waiting"], rows, { id: "users" }));
}

// GPU-hours of the period per user (or class), drawn as bars of the largest.
async function reportPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] ?? "");
  const since = /^\d+[mhdw]$/.test(params.get("since") ?? "") ? params.get("since") : "7d";
  const by = params.get("by") === "class" ? "class" : "user";
  const report = await api(`/v1/report?since=${since}&by=${by}`);
  const most = Math.max(1e-9, ...report.rows.map((r) => r.gpu_hours));
  const rows = report.rows.map((r) => {
    const name = (by === "class" ? r.class : r.user) ?? "–";
    const bar = el("div", { class: "bar", role: "presentation" });
    bar.style.width = `${Math.round((100 * r.gpu_hours) / most)}%`;
    return el("tr", { "data-row": name },
      cell(name),
      num(r.gpu_hours.toFixed(2), { class: "gpu-hours" }),
      el("td", { class: "bar-cell" }, bar),
      num(r.idle_gpu_hours.toFixed(2)),
      num(r.jobs), num(r.completed), num(r.failed), num(r.stopped));
  });
  const choices = el("p", {}, "Period: ",
    ["1d", "7d", "30d"].map((p) => [el("a", { href: `#/reports?since=${p}&by=${by}`, text: p }), " "]),
    " · by ", el("a", { href: `#/reports?since=${since}&by=user`, text: "user" }), " ",
    el("a", { href: `#/reports?since=${since}&by=class`, text: "class" }));
  show(`GPU-hours over the last ${since}`, choices,
    table(`By ${by}, from ${when(report.since)} to ${when(report.until)}`,
      [by === "class" ? "Class" : "User", "GPU-hours", "", "Idle GPU-hours", "Jobs", "Completed", "Failed", "Stopped"], rows, { id: "report" }));
}

// --- routing -------------------------------------------------------------------------------

function route() {
  const hash = location.hash || "#/box";
  const job = hash.match(/^#\/job\/(\d+)$/);
  if (job) return { name: "job", render: () => jobPage(job[1]), live: (e) => e.job_id === Number(job[1]) };
  if (hash === "#/queue") return { name: "queue", render: queuePage, live: () => true };
  if (hash === "#/users") return { name: "users", render: usersPage, live: () => true };
  if (hash.startsWith("#/reports")) return { name: "reports", render: reportPage, live: () => false };
  return { name: "box", render: boxPage, live: () => true, sampled: true };
}

let current = route();
let pending = null;

function render(focus) {
  current = route();
  jobStream?.abort();
  jobStream = null;
  redrawJobCharts = null;
  followEvents(current.name !== "job");
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === `#/${current.name}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  return current.render().then(() => { if (focus) view.focus(); }).catch((error) => show("trainq", failure(error)));
}

// Events come in bursts: one render per burst, a tenth of a second after it starts, and
// at most one a second (a queue page reads up to 1,000 jobs each time).
let lastRender = 0;
function refreshSoon() {
  if (pending) return;
  const wait = Math.max(100, lastRender + 1000 - Date.now());
  pending = setTimeout(() => { pending = null; lastRender = Date.now(); render(false); }, wait);
}

eventListeners.add((event) => { if (current.live(event)) refreshSoon(); });
sampleListeners.add(() => { if (current.sampled) refreshSoon(); else redrawJobCharts?.(); });
window.addEventListener("hashchange", () => render(true));

render(false);
sampleGpus();
setInterval(sampleGpus, SAMPLE_MS);
