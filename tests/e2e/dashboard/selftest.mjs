// Runs check.mjs against fixture_server.mjs: the page and the check, with no cluster.
//   node selftest.mjs [OUT.png]     (npm run selftest)
// Exits with check.mjs's code.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || join(here, "dashboard.png");
// Twice: once with "/" answering 401 without the cookie (as the head does), once with the
// page served and its own banner answering the API's 401 (--open-page).
let code = 0;
for (const extra of [[], ["--open-page"]]) {
  const fixture = spawn(process.execPath, [join(here, "fixture_server.mjs"), "--port", "0", ...extra],
    { stdio: ["ignore", "pipe", "inherit"] });
  const first = await new Promise((ok, fail) => {
    createInterface({ input: fixture.stdout }).once("line", ok);
    fixture.once("exit", (c) => fail(new Error(`fixture_server.mjs exited with ${c}`)));
  });
  const fx = JSON.parse(first);
  const check = spawn(process.execPath, [join(here, "check.mjs"), "--url", fx.url, "--screenshot", out,
    "--nodes", fx.nodes.join(","), "--sweep", fx.sweep, "--timeout-ms", "30000", "--expect-live"],
    { stdio: "inherit" });
  code = code || await new Promise((ok) => check.once("exit", (c) => ok(c ?? 1)));
  fixture.kill("SIGTERM");
}
process.exit(code);
