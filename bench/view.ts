/**
 * `npm run bench:view -- <runDir>`: `agentrl view` over a real run folder, measured the way a
 * user meets it: the time to open the run (every trajectory summarized, every step record read),
 * the list API's latency for the first page, a filtered page and a late page, and in Debian's
 * chromium the first contentful paint of the list, a trajectory page and a step page.
 * Prints a table and, as its last line, one JSON object with the figures.
 */
import { existsSync } from "node:fs";
import { performance } from "node:perf_hooks";
import puppeteer, { type Browser } from "puppeteer-core";
import { RunView } from "../cli/view/runData.ts";
import { serveViewer } from "../cli/view/server.ts";

const runDir = process.argv[2];
if (!runDir) {
  process.stderr.write("usage: npm run bench:view -- <runDir>   (a run folder, e.g. runs/learning-<time>)\n");
  process.exit(2);
}
const chromium = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
if (!existsSync(chromium)) {
  process.stderr.write(`no Chromium at ${chromium}: apt-get install -y chromium (or set CHROMIUM_PATH)\n`);
  process.exit(2);
}

/** The page's first-contentful-paint (ms since navigation start; -1 if none within 10 s). */
const FIRST_PAINT = `new Promise((resolve) => {
  const started = Date.now();
  (function poll() {
    const entry = performance.getEntriesByName("first-contentful-paint")[0];
    if (entry) resolve(entry.startTime);
    else if (Date.now() - started > 10000) resolve(-1);
    else setTimeout(poll, 20);
  })();
})`;

const opened = performance.now();
const view = await RunView.open(runDir);
const openSeconds = (performance.now() - opened) / 1000;
const server = await serveViewer(view);
let browser: Browser | undefined;
try {
  const apiMs = async (query: string): Promise<number> => {
    const t0 = performance.now();
    const response = await fetch(`${server.url}/api/trajectories${query}`);
    if (!response.ok) throw new Error(`/api/trajectories${query}: HTTP ${response.status}`);
    await response.json();
    return performance.now() - t0;
  };
  const lastPage = Math.max(1, Math.ceil(view.summaries.length / 100));
  const api = {
    first: await apiMs(""),
    filtered: await apiMs("?task=os&sort=reward&dir=desc"),
    last: await apiMs(`?page=${lastPage}`),
  };

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const paintMs = async (path: string): Promise<number> => {
    const page = await (browser as Browser).newPage();
    try {
      await page.goto(`${server.url}${path}`, { waitUntil: "load" });
      // A string, not a function: tsx would wrap a named inner function in a helper the page lacks.
      return Number(await page.evaluate(FIRST_PAINT));
    } finally {
      await page.close();
    }
  };
  const longest = [...view.summaries].sort((a, b) => b.tokens - a.tokens)[0];
  const newestStep = Math.max(0, ...view.steps.keys());
  const paint = {
    list: await paintMs("/"),
    trajectory: longest ? await paintMs(`/trajectories/${longest.trajectoryId}`) : -1,
    step: view.steps.size > 0 ? await paintMs(`/steps/${newestStep}`) : -1,
  };

  const rows = [
    ["run", runDir],
    ["trajectories", String(view.summaries.length)],
    ["step records", String(view.steps.size)],
    ["open the run (s)", openSeconds.toFixed(1)],
    ["list API, first page (ms)", api.first.toFixed(0)],
    ["list API, os by reward (ms)", api.filtered.toFixed(0)],
    [`list API, page ${lastPage} (ms)`, api.last.toFixed(0)],
    ["first paint: list (ms)", paint.list.toFixed(0)],
    [`first paint: longest trajectory, ${longest?.tokens ?? 0} tokens (ms)`, paint.trajectory.toFixed(0)],
    [`first paint: step ${newestStep} (ms)`, paint.step.toFixed(0)],
  ];
  process.stdout.write(`| measure | value |\n|---|---|\n${rows.map(([k, v]) => `| ${k} | ${v} |`).join("\n")}\n`);
  process.stdout.write(
    `${JSON.stringify({
      trajectories: view.summaries.length,
      openSeconds,
      listApiMs: api.first,
      filteredApiMs: api.filtered,
      lastPageApiMs: api.last,
      listPaintMs: paint.list,
      trajectoryPaintMs: paint.trajectory,
      stepPaintMs: paint.step,
    })}\n`,
  );
} finally {
  await browser?.close();
  await server.close();
  await view.close();
}
