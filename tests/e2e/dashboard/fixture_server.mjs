// A stand-in for the head's dashboard server, for working on the page and on check.mjs
// without a cluster: serves runtime/src/head/dashboard/index.html at "/" (re-read on every
// request, so edits show on reload) and fixture JSON at the API paths, with the same token
// handshake as the head (GET /?token=T -> 302 to "/" with an HttpOnly cookie; /api/* without
// the cookie -> 401). The data moves: node usage drifts and the running sweep's curves grow by
// one iteration per second (times --speed), so live updating can be watched.
//
//   node fixture_server.mjs [--port 0] [--token test] [--actors 12] [--speed 1]
//
// Prints one JSON line on stdout once listening:
//   {"url": "http://127.0.0.1:PORT/?token=test", "base": ..., "nodes": [alive node ids],
//    "sweep": "mlp-asha"}
// Like the head, "/" without the cookie answers a 401 page; --open-page serves the page
// anyway, so that its own "not authorised" banner (from the API's 401) can be seen.
// GET /__fixture/down?seconds=N makes every API request fail (connection reset) for N
// seconds, to see the "cannot reach the head" banner and the recovery.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import http from "node:http";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const { values: opt } = parseArgs({
  options: {
    port: { type: "string", default: "0" },
    token: { type: "string", default: "test" },
    actors: { type: "string", default: "12" },
    speed: { type: "string", default: "1" },
    html: { type: "string", default: resolve(here, "../../../runtime/src/head/dashboard/index.html") },
    "open-page": { type: "boolean", default: false },
  },
});
const kCookie = "rayd_dashboard";
const t0 = Date.now();
const speed = Number(opt.speed) || 1;
let downUntil = 0;

const hex = (seed, n = 56) => createHash("sha256").update(String(seed)).digest("hex").slice(0, n);
const GiB = 1024 ** 3;

// ---------- cluster ----------
const nodes = [
  { node_id: hex("node-head"), hostname: "head-0", ip: "127.0.0.1", address: "127.0.0.1:40123",
    is_head: true, alive: true, total: { CPU: 8, memory: 30 * GiB, object_store_memory: 8 * GiB },
    labels: { zone: "a" } },
  { node_id: hex("node-gpu"), hostname: "gpu-1", ip: "10.0.0.7", address: "10.0.0.7:40123",
    is_head: false, alive: true,
    total: { CPU: 32, GPU: 4, memory: 240 * GiB, object_store_memory: 64 * GiB, "accelerator_type:H100": 1 },
    labels: { zone: "a", gpu: "h100" } },
  { node_id: hex("node-dead"), hostname: "cpu-2", ip: "10.0.0.9", address: "10.0.0.9:40123",
    is_head: false, alive: false, total: { CPU: 16, memory: 60 * GiB, object_store_memory: 16 * GiB },
    labels: {}, death_reason: "no heartbeat for 30 s (last from 10.0.0.9:40123); marked dead" },
];

function clusterJson() {
  const now = Date.now();
  const s = (now - t0) / 1000;
  const out = nodes.map((n, i) => {
    const avail = {};
    for (const [k, v] of Object.entries(n.total)) {
      if (!n.alive) { avail[k] = v; continue; }
      const frac = 0.35 + 0.3 * Math.sin(s / 7 + i * 2 + k.length);  // drifts between 5% and 65% used
      avail[k] = k === "GPU" ? v - 3 : k.includes(":") ? v : Math.max(0, +(v * (1 - frac)).toFixed(2));
    }
    return { node_id: n.node_id, state: n.alive ? "ALIVE" : "DEAD", address: n.address, ip: n.ip, hostname: n.hostname, alive: n.alive,
      is_head: n.is_head, total: n.total, available: avail, labels: n.labels,
      start_time_ms: t0 - 3600e3 * (i + 1), last_heartbeat_ms: n.alive ? now - 300 - i * 200 : t0 - 40e3,
      death_reason: n.death_reason || "",
      infeasible: n.is_head ? [{ resources: { CPU: 64 }, count: 1, waiting_since_ms: now - 5000 }] : [] };
  });
  const job = hex("job-1", 8), oldJob = hex("job-0", 8);
  const kStates = ["ALIVE", "ALIVE", "ALIVE", "PENDING_CREATION", "RESTARTING", "DEAD", "DEPENDENCIES_UNREADY"];
  const actors = [];
  for (let i = 0; i < Number(opt.actors); i++) {
    const st = kStates[i % kStates.length];
    actors.push({ actor_id: hex("actor" + i, 32), name: i % 3 === 0 ? `trial_runner_${i}` : "",
      namespace: i % 3 === 0 ? "tune" : "", state: st,
      node_id: st === "ALIVE" || st === "RESTARTING" || st === "DEAD" ? nodes[i % 2].node_id : "",
      job_id: i % 5 === 4 ? oldJob : job, address: "", num_restarts: st === "RESTARTING" ? 1 : 0,
      max_restarts: i % 2 ? 0 : i % 4 ? 3 : -1,
      death_cause: st === "DEAD" ? "the worker process exited: SIGKILL (exit code 137)" : "",
      class_name: i % 2 ? "Counter::FactoryCreate" : "rayd::tune::TrialRunner",
      placement_group_id: i < 2 ? hex("pg-0", 36) : "" });
  }
  const pgs = [
    { placement_group_id: hex("pg-0", 36), name: "trial-00000", state: "CREATED", strategy: "STRICT_SPREAD",
      bundles: [{ resources: { CPU: 2, GPU: 1 }, node_id: nodes[1].node_id },
                { resources: { CPU: 2, memory: 4 * GiB }, node_id: nodes[0].node_id }] },
    { placement_group_id: hex("pg-1", 36), name: "", state: "PENDING", strategy: "PACK",
      cause: "infeasible: no node has CPU 64",
      bundles: [{ resources: { CPU: 64 }, node_id: "" }] },
  ];
  const jobs = [
    { job_id: job, driver_pid: 4242, status: "RUNNING", state: "RUNNING", start_time_ms: t0 - 120e3, end_time_ms: 0 },
    { job_id: oldJob, driver_pid: 4100, status: "FINISHED", state: "FINISHED", start_time_ms: t0 - 3500e3, end_time_ms: t0 - 2900e3 },
  ];
  return { cluster: { cluster_id: hex("cluster", 32), gcs_address: "127.0.0.1:6380", now_ms: now,
    start_time_ms: t0 - 3 * 3600e3,
    session_dir: "/tmp/rayd/session_fixture" }, nodes: out, actors, placement_groups: pgs, jobs };
}

// ---------- sweeps ----------
// The running sweep: trial i starts at second 3i-4 (so two have results at once), gains one
// iteration a second, and stops at its ASHA rung (or errors, or runs to max_iter).
const kLr = [0.1, 0.03, 0.01, 0.003, 0.001, 0.3, 0.05, 0.02];
const kStop = [40, 40, 10, 40, 25, 10, 7, 40];
const asha = kLr.map((lr, i) => ({ trial_id: String(i).padStart(5, "0"), start: 3 * i - 4, stop: kStop[i],
  error: i === 6, config: { lr, hidden: [32, 64, 128, 256][i % 4], optimizer: i % 3 ? "adam" : "sgd" },
  loss: (it) => 0.18 + 0.07 * i + (2.3 - 0.18 - 0.07 * i) * Math.exp(-it / (4 + i)) + 0.03 * Math.sin(it * 1.7 + i) }));

// The finished one, with a name that needs URL-encoding.
const pbt = [0, 1, 2, 3].map((i) => ({ trial_id: String(i).padStart(5, "0"), start: -1e9, stop: 25, error: false,
  config: { lr: [0.01, 0.003, 0.03, 0.001][i], momentum: 0.9, augment: i % 2 === 0 },
  loss: (it) => Math.min(0.99, 0.55 + 0.06 * i - 0.5 * Math.exp(-it / 6) + 0.35 * (1 - Math.exp(-it / 8)) + 0.01 * Math.cos(it + i)) }));

const sweepsDef = [
  { name: "mlp-asha", metric: "loss", mode: "min", scheduler: "asha", trials: asha, started_ms: t0 - 4000 },
  { name: "cnn pbt#2", metric: "accuracy", mode: "max", scheduler: "pbt", trials: pbt, started_ms: t0 - 1800e3,
    finished_ms: t0 - 1500e3 },
];

function sweepJson(def, withTrials) {
  const e = def.finished_ms ? Infinity : ((Date.now() - t0) / 1000) * speed + 4;
  const counts = { PENDING: 0, RUNNING: 0, TERMINATED: 0, ERROR: 0, PAUSED: 0 };
  const trials = [], curves = {};
  let results = 0, lastMs = def.started_ms;
  for (const t of def.trials) {
    const iters = Math.max(0, Math.min(t.stop, Math.floor(e - t.start)));
    const status = e < t.start ? "PENDING" : iters >= t.stop ? (t.error ? "ERROR" : "TERMINATED") : "RUNNING";
    counts[status]++;
    results += iters;
    const pts = [];
    for (let it = 1; it <= iters; it++) pts.push([it, +t.loss(it).toFixed(5)]);
    if (pts.length) curves[t.trial_id] = pts;
    if (pts.length && !def.finished_ms) lastMs = Math.max(lastMs, t0 + ((t.start + iters - 4) / speed) * 1000);
    const vals = pts.map((p) => p[1]);
    const last = pts.length ? { [def.metric]: pts[pts.length - 1][1], time_this_iter_s: 0.8 } : {};
    if (pts.length && def.metric === "loss") last.accuracy = +(1 - pts[pts.length - 1][1] / 2.5).toFixed(4);
    trials.push({ trial_id: t.trial_id, status, config: t.config, iterations: iters, last,
      best: vals.length ? (def.mode === "min" ? Math.min(...vals) : Math.max(...vals)) : null });
  }
  const running = counts.PENDING + counts.RUNNING + counts.PAUSED > 0;
  const out = { name: def.name, state: running ? "RUNNING" : "FINISHED", metric: def.metric, mode: def.mode,
    scheduler: def.scheduler, num_trials: def.trials.length, trial_counts: counts, results,
    started_ms: def.started_ms, updated_ms: def.finished_ms || Math.round(lastMs) };
  return withTrials ? { ...out, trials, series: curves } : out;
}

// ---------- HTTP ----------
function send(res, status, body, headers = {}) {
  const json = typeof body !== "string";
  res.writeHead(status, { "Content-Type": json ? "application/json" : "text/html; charset=utf-8",
    "Cache-Control": "no-store", ...headers });
  res.end(json ? JSON.stringify(body) : body);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const cookies = Object.fromEntries((req.headers.cookie || "").split(/;\s*/).filter(Boolean)
    .map((c) => [c.slice(0, c.indexOf("=")), c.slice(c.indexOf("=") + 1)]));
  if (url.pathname === "/__fixture/down") {
    downUntil = Date.now() + Number(url.searchParams.get("seconds") || 5) * 1000;
    return send(res, 200, { down_until_ms: downUntil });
  }
  if (url.pathname === "/") {
    const token = url.searchParams.get("token");
    if (token !== null) {
      if (token !== opt.token) return send(res, 401, "<p>wrong token: open the URL rayd start --head printed</p>");
      return send(res, 302, "", { Location: "/",
        "Set-Cookie": `${kCookie}=${opt.token}; HttpOnly; SameSite=Strict; Path=/` });
    }
    if (!opt["open-page"] && cookies[kCookie] !== opt.token) {
      return send(res, 401, "<!doctype html><p>This rayd dashboard needs the cluster token: open the URL that " +
        "<code>rayd start --head</code> printed (it ends in <code>?token=</code>).</p>");
    }
    return send(res, 200, readFileSync(opt.html, "utf8"));
  }
  if (!url.pathname.startsWith("/api/")) return send(res, 404, { error: "not found: " + url.pathname });
  if (Date.now() < downUntil) return req.socket.destroy();
  if (cookies[kCookie] !== opt.token) return send(res, 401, { error: "missing or bad dashboard token" });
  if (url.pathname === "/api/cluster") return send(res, 200, clusterJson());
  if (url.pathname === "/api/shards") {
    const rank = (r, waited) => ({ name: `mlp-asha_00000.rank${r}`, run: "mlp-asha_00000", rank: r, wait_s: waited,
      updated_ms: Date.now(), datasets: { train: { rows: 12800, bytes: 40140800, blocks: 25, wait_s: waited,
        rows_per_s: 2100, blocks_in_flight: 2, held_bytes: 3211264, peak_held_bytes: 6422528, skipped_rows: 0 } } });
    return send(res, 200, { shards: [rank(0, 0.4), rank(1, 2.7)] });
  }
  if (url.pathname === "/api/sweeps") return send(res, 200, { sweeps: sweepsDef.map((d) => sweepJson(d, false)) });
  if (url.pathname.startsWith("/api/sweeps/")) {
    const name = decodeURIComponent(url.pathname.slice("/api/sweeps/".length));
    const def = sweepsDef.find((d) => d.name === name);
    return def ? send(res, 200, sweepJson(def, true)) : send(res, 404, { error: `no sweep named "${name}"` });
  }
  return send(res, 404, { error: "not found: " + url.pathname });
});

server.listen(Number(opt.port), "127.0.0.1", () => {
  const base = `http://127.0.0.1:${server.address().port}`;
  console.log(JSON.stringify({ url: `${base}/?token=${opt.token}`, base,
    nodes: nodes.filter((n) => n.alive).map((n) => n.node_id), sweep: "mlp-asha" }));
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(0));
