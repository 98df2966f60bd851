// End-to-end check of the head's web dashboard in headless Chromium (Debian's /usr/bin/chromium
// driven by playwright-core).
//
//   node check.mjs --url 'http://127.0.0.1:PORT/?token=T' --screenshot OUT.png \
//       --nodes ID1,ID2 --sweep NAME [--timeout-ms 60000] [--expect-live] [--expect-front]
//       [--chromium PATH]
//
// Checks, all within one deadline (no fixed sleeps: every step waits on a condition):
//   1. a fresh browser context opening the bare URL (no ?token, so no cookie) gets the
//      "not authorised" message and no cluster data (or the server's own 401 naming the token);
//   2. with the ?token URL: every --nodes id has a row in the nodes table that shows ALIVE;
//   3. the sweep NAME is in the sweeps list; after clicking it, the detail shows that sweep,
//      the curves SVG has a polyline with data-points >= 2 and the trials table has a row;
//   4. with --expect-live, the curves then gain points without a reload (the 1 s refresh);
//      with --expect-front (a sweep with several objectives), the Pareto front plot shows a mark
//      per trial that reported, at least one of them on the front, and the hypervolume;
//   5. no uncaught exception was thrown in the page.
// Then writes a full-page screenshot to OUT and prints one JSON line of what it saw.
//
// Exit codes: 0 passed; 1 a check failed (the message names what was missing; the screenshot
// goes to OUT with ".fail" before the extension, e.g. shot.fail.png); 2 bad arguments;
// 3 the browser failed to launch; 77 chromium or playwright-core not installed (for CTest's
// SKIP_RETURN_CODE).
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";

const kUsage = "usage: node check.mjs --url URL --screenshot OUT.png --nodes ID1,ID2 --sweep NAME " +
  "[--timeout-ms 60000] [--expect-live] [--expect-front] [--chromium /usr/bin/chromium]";

let opt;
try {
  ({ values: opt } = parseArgs({
    options: {
      url: { type: "string" },
      screenshot: { type: "string" },
      nodes: { type: "string", default: "" },
      sweep: { type: "string" },
      "timeout-ms": { type: "string", default: "60000" },
      "expect-live": { type: "boolean", default: false },
      "expect-front": { type: "boolean", default: false },
      job: { type: "string" },
      "job-log": { type: "string" },
      chromium: { type: "string", default: process.env.CHROMIUM || "/usr/bin/chromium" },
    },
  }));
} catch (e) {
  console.error(`check.mjs: ${e.message}\n${kUsage}`);
  process.exit(2);
}
const timeoutMs = Number(opt["timeout-ms"]);
if (!opt.url || !opt.screenshot || !opt.sweep || !(timeoutMs > 0)) {
  console.error(`check.mjs: --url, --screenshot and --sweep are required, --timeout-ms must be > 0\n${kUsage}`);
  process.exit(2);
}
const nodeIds = opt.nodes.split(",").map((s) => s.trim()).filter(Boolean);
const redact = (u) => String(u).replace(/([?&]token=)[^&#]*/g, "$1***");
let bareUrl;
try {
  const u = new URL(opt.url);
  u.search = ""; u.hash = ""; u.pathname = "/";
  bareUrl = u.toString();
} catch (e) {
  console.error(`check.mjs: bad --url: ${e.message}`);
  process.exit(2);
}

if (!existsSync(opt.chromium)) {
  console.error(`check.mjs: SKIP: no chromium at ${opt.chromium} (apt-get install chromium)`);
  process.exit(77);
}
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (e) {
  console.error(`check.mjs: SKIP: playwright-core is not installed (npm ci in ${import.meta.dirname || "tests/e2e/dashboard"}): ${e.message}`);
  process.exit(77);
}

const started = Date.now();
const deadline = started + timeoutMs;
const left = () => Math.max(1, deadline - Date.now());
const seen = { ok: false, url: redact(opt.url), unauthenticated: null, nodes: [], sweep: opt.sweep,
  sweep_shown: null, trial_rows: 0, polylines: [], page_errors: [] };

class CheckFailed extends Error {}
// Runs one wait; on timeout, fails with `what` (a string, or a function giving one from the page).
async function expect(what, wait) {
  try {
    return await wait();
  } catch (e) {
    if (!/Timeout|timeout/.test(e.message)) throw e;
    throw new CheckFailed(typeof what === "function" ? await what() : what);
  }
}

// What the dashboard shows right now (read by the report and by the failure messages).
const snapshot = (page) => page.evaluate(() => {
  const q = (sel) => [...document.querySelectorAll(sel)];
  return {
    nodes: q('[data-testid="nodes-table"] tr[data-node-id]').map((r) => ({
      node_id: r.getAttribute("data-node-id"),
      state: (r.querySelector('[data-col="state"]') || r).textContent.trim() })),
    sweeps: q('[data-testid="sweeps-list"] [data-sweep]').map((r) => r.getAttribute("data-sweep")),
    sweep_shown: document.querySelector('[data-testid="sweep-detail"]')?.getAttribute("data-sweep") ?? null,
    trial_rows: q('[data-testid="trials-table"] tbody tr[data-trial-id]').length,
    polylines: q('svg[data-testid="curves"] polyline[data-trial-id]').map((p) => ({
      trial_id: p.getAttribute("data-trial-id"), points: Number(p.getAttribute("data-points")) })),
    banner: [...q('[data-testid="auth-required"], [data-testid="head-unreachable"]')]
      .filter((b) => !b.hidden).map((b) => b.textContent.trim().replace(/\s+/g, " ")),
  };
});

async function checkUnauthenticated(browser) {
  const ctx = await browser.newContext();
  try {
    const page = await ctx.newPage();
    const resp = await page.goto(bareUrl, { timeout: left(), waitUntil: "domcontentloaded" });
    if (resp && resp.status() === 401) {
      const body = await page.textContent("body").catch(() => "");
      if (!/token/i.test(body || "")) throw new CheckFailed(`without the cookie ${bareUrl} answered 401 but its body does not mention the token`);
      return "HTTP 401 from the server";
    }
    await expect(async () => `without the cookie the page never showed the "not authorised" message ` +
        `(banners: ${JSON.stringify((await snapshot(page)).banner)})`,
      () => page.locator('[data-testid="auth-required"]').waitFor({ state: "visible", timeout: left() }));
    const text = await page.locator('[data-testid="auth-required"]').textContent();
    if (!text.includes("?token=")) throw new CheckFailed(`the "not authorised" message does not mention ?token=: ${text.trim()}`);
    const rows = await page.locator("[data-node-id], [data-sweep] td").count();
    if (rows) throw new CheckFailed(`without the cookie the page still shows data (${rows} node or sweep rows)`);
    return "auth message shown, no data";
  } finally {
    await ctx.close();
  }
}

async function checkAuthenticated(page) {
  page.on("pageerror", (e) => seen.page_errors.push(String(e.message || e)));
  await page.goto(opt.url, { timeout: left(), waitUntil: "domcontentloaded" });

  if (nodeIds.length) {
    await expect(async () => {
      const s = await snapshot(page);
      const missing = nodeIds.filter((id) => !s.nodes.some((n) => n.node_id === id && n.state === "ALIVE"));
      return `nodes not shown as ALIVE: ${missing.join(", ")} (table has ${JSON.stringify(s.nodes)}; banners ${JSON.stringify(s.banner)})`;
    }, () => page.waitForFunction((ids) => ids.every((id) => {
      const r = [...document.querySelectorAll('[data-testid="nodes-table"] tr[data-node-id]')]
        .find((e) => e.getAttribute("data-node-id") === id);
      return r && (r.querySelector('[data-col="state"]') || r).textContent.trim() === "ALIVE";
    }), nodeIds, { timeout: left(), polling: 200 }));
  }

  const entry = page.locator(`[data-testid="sweeps-list"] [data-sweep="${opt.sweep.replace(/["\\]/g, "\\$&")}"]`);
  await expect(async () => `sweep "${opt.sweep}" is not in the sweeps list (it has ${JSON.stringify((await snapshot(page)).sweeps)})`,
    () => entry.first().waitFor({ state: "visible", timeout: left() }));
  await expect(`could not click sweep "${opt.sweep}" in the list`, () => entry.first().click({ timeout: left() }));

  await expect(async () => {
    const s = await snapshot(page);
    const lacks = [];
    if (s.sweep_shown !== opt.sweep) lacks.push(`the detail shows ${JSON.stringify(s.sweep_shown)}, not the sweep`);
    if (!s.polylines.some((p) => p.points >= 2)) lacks.push(`no curve with >= 2 points (polylines: ${JSON.stringify(s.polylines)})`);
    if (!s.trial_rows) lacks.push("no row in the trials table");
    return `sweep "${opt.sweep}": ${lacks.join("; ") || "condition not met"}`;
  }, () => page.waitForFunction((name) => {
    const d = document.querySelector('[data-testid="sweep-detail"]');
    return d && d.getAttribute("data-sweep") === name &&
      [...document.querySelectorAll('svg[data-testid="curves"] polyline[data-trial-id]')]
        .some((p) => Number(p.getAttribute("data-points")) >= 2) &&
      document.querySelectorAll('[data-testid="trials-table"] tbody tr[data-trial-id]').length > 0;
  }, opt.sweep, { timeout: left(), polling: 200 }));

  if (opt["expect-live"]) {
    const total = () => page.evaluate(() => [...document.querySelectorAll('svg[data-testid="curves"] polyline[data-points]')]
      .reduce((n, p) => n + Number(p.getAttribute("data-points")), 0));
    const before = await total();
    await expect(`the curves did not grow past ${before} points without a reload (is the sweep still running?)`,
      () => page.waitForFunction((n) => [...document.querySelectorAll('svg[data-testid="curves"] polyline[data-points]')]
        .reduce((m, p) => m + Number(p.getAttribute("data-points")), 0) > n, before, { timeout: left(), polling: 200 }));
    seen.live = { points_before: before, points_after: await total() };
  }
  if (opt["expect-front"]) await checkFront(page);
  if (opt.job) await checkSubmittedJob(page);
  if (seen.page_errors.length) throw new CheckFailed(`uncaught exception in the page: ${seen.page_errors[0]}`);
}

// A sweep with several objectives: its front plot has marks, one or more on the front, and the
// hypervolume line.
async function checkFront(page) {
  const front = () => page.evaluate(() => {
    const svg = document.querySelector('svg[data-testid="pareto-front"]');
    const marks = svg ? [...svg.querySelectorAll("[data-trial-id]")] : [];
    return { kind: svg?.getAttribute("data-kind") ?? null, marks: marks.length,
      on_front: marks.filter((m) => m.getAttribute("data-on-front") === "true").length,
      hypervolume: document.querySelector('[data-testid="hypervolume"]')?.textContent ?? null };
  });
  await expect(async () => `the Pareto front plot never showed a trial on the front (it shows ${JSON.stringify(await front())})`,
    () => page.waitForFunction(() => {
      const svg = document.querySelector('svg[data-testid="pareto-front"]');
      const hv = document.querySelector('[data-testid="hypervolume"]');
      return svg && svg.querySelector('[data-on-front="true"]') && hv && hv.textContent.includes("hypervolume");
    }, null, { timeout: left(), polling: 200 }));
  seen.front = await front();
}

// A job submitted with `rayd job submit` is listed; a click shows its log (--job-log in it).
async function checkSubmittedJob(page) {
  const row = page.locator(`[data-testid="submissions-table"] tr[data-submission-id="${opt.job.replace(/["\\]/g, "\\$&")}"]`);
  await expect(async () => `job "${opt.job}" is not in the submitted jobs table (it has ${JSON.stringify(await page.evaluate(() =>
      [...document.querySelectorAll('[data-testid="submissions-table"] tr[data-submission-id]')].map((r) => r.getAttribute("data-submission-id"))))})`,
    () => row.first().waitFor({ state: "visible", timeout: left() }));
  await expect(`could not click job "${opt.job}"`, () => row.first().click({ timeout: left() }));
  await expect(async () => `job "${opt.job}"'s log never showed ${JSON.stringify(opt["job-log"] || "")} (it shows ` +
      `${JSON.stringify(await page.evaluate(() => document.querySelector('[data-testid="submission-logs"]')?.textContent ?? null))})`,
    () => page.waitForFunction(([id, text]) => {
      const logs = document.querySelector('[data-testid="submission-logs"]');
      return logs && logs.querySelector(`[data-submission-id="${id}"]`) && logs.textContent.includes(text);
    }, [opt.job, opt["job-log"] || ""], { timeout: left(), polling: 200 }));
  seen.job = { submission_id: opt.job, log_shown: true };
}

function failPath(p) {
  const m = /^(.*?)(\.[^./\\]+)?$/.exec(p);
  return `${m[1]}.fail${m[2] || ".png"}`;
}

let browser, page, code = 0;
try {
  try {
    browser = await chromium.launch({ executablePath: opt.chromium, headless: true, args: ["--no-sandbox"], timeout: left() });
  } catch (e) {
    console.error(`check.mjs: could not launch ${opt.chromium}: ${e.message}`);
    process.exit(3);
  }
  seen.unauthenticated = await checkUnauthenticated(browser);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await ctx.newPage();
  await checkAuthenticated(page);
  Object.assign(seen, await snapshot(page));
  delete seen.sweeps; delete seen.banner;
  await page.screenshot({ path: opt.screenshot, fullPage: true });
  seen.ok = true;
  seen.screenshot = opt.screenshot;
} catch (e) {
  code = 1;
  const msg = e instanceof CheckFailed ? e.message : `error: ${e.stack || e.message}`;
  console.error(`check.mjs: FAILED: ${redact(msg)}`);
  seen.error = redact(msg);
  if (page) {
    try {
      Object.assign(seen, await snapshot(page));
      delete seen.sweeps;
      seen.screenshot = failPath(opt.screenshot);
      await page.screenshot({ path: seen.screenshot, fullPage: true, timeout: 10000 });
    } catch (e2) {
      console.error(`check.mjs: could not take the failure screenshot: ${e2.message}`);
    }
  }
} finally {
  seen.elapsed_ms = Date.now() - started;
  console.log(JSON.stringify(seen));
  if (browser) await browser.close().catch(() => {});
}
process.exit(code);
