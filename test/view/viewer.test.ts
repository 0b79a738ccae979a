import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, ConsoleMessage, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunFolderError, RunView, SUCCESS_REWARD } from "../../cli/view/runData.ts";
import { serveViewer } from "../../cli/view/server.ts";
import { parseConfig } from "../../shared/config/index.ts";
import type { RunningServer } from "../../shared/http.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { StepRecord, stepRecordKey } from "../../shared/protocol/stepRecord.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { startMoto } from "../support/moto.ts";
import { chromiumMissing, requireOrSkip } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";
import { ARTIFACTS, launchChromium } from "./browser.ts";
import { makeTestRun, type TestRun } from "./run.ts";

/**
 * One run made here (the real trainer, 2 steps, plus 1,500 delivered-but-untrained trajectories),
 * then: the step records against the model itself, the viewer's HTTP answers, and the pages in
 * headless Chromium (list, filter, paging, tokens coloured by the recorded values, step page,
 * report charts). Screenshots land in test-artifacts/view/.
 */

/** The page's own function, inside `$$eval` callbacks (the project compiles without the DOM lib). */
declare const getComputedStyle: (element: unknown) => { backgroundColor: string };
declare const document: { documentElement: { scrollWidth: number } };

const hasChromium = requireOrSkip("viewer.test.ts", "the viewer in Chromium", chromiumMissing());

let run: TestRun;
let view: RunView;
let server: RunningServer;
let browser: Browser;
let trajectories: LocalObjectStore;

beforeAll(async () => {
  run = await makeTestRun(tempDir("view-"), { steps: 2, extra: 1500 });
  trajectories = new LocalObjectStore(join(run.runDir, "transport", "objects", "trajectories"));
  [view, browser] = await Promise.all([
    RunView.open(run.runDir),
    hasChromium ? launchChromium() : Promise.resolve(undefined as unknown as Browser),
  ]);
  server = await serveViewer(view);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await view?.close();
});

async function record(step: number): Promise<StepRecord> {
  return StepRecord.parse(JSON.parse((await trajectories.getText(stepRecordKey("viewtest", step))) ?? ""));
}

describe("trainer step records", () => {
  it("hold the pre-step weights' log-probs, the ratios, clip flags and loss shares the step's metrics add up to", async () => {
    const first = await record(1);
    const metrics = (await import("../../cli/report/report.ts")).readMetrics(join(run.runDir, "metrics.jsonl"));
    const line = (await metrics)[0]!.metrics;
    expect(first.trajectories.map((t) => t.trajectoryId).sort()).toEqual(
      run.trained
        .slice(0, 4)
        .map((t) => t.trajectoryId)
        .sort(),
    );
    // step 1 trained v0: its log-probs are v0's, recomputed here from the checkpoint
    const v0 = (await loadCheckpoint(new LocalObjectStore(join(run.runDir, "transport/objects/checkpoints")), 0))
      .policy;
    for (const entry of first.trajectories) {
      const t = run.trained.find((x) => x.trajectoryId === entry.trajectoryId)!;
      const trained = t.lossMask.flatMap((m, i) => (m && i > 0 ? [i] : []));
      expect(entry.spans.flatMap(([a, b]) => Array.from({ length: b - a }, (_, k) => a + k))).toEqual(trained);
      const [logp] = v0.logProbs([Int32Array.from(t.tokenIds)], run.config.rollout.temperature);
      trained.forEach((i, k) => {
        expect(entry.newLogp[k]).toBeCloseTo(logp![i]!, 3);
        expect(entry.ratio[k]).toBeCloseTo(Math.exp(entry.newLogp[k]! - t.logprobs[i]!), 2);
      });
      expect(entry.clippedAt).toEqual(trained.filter((_, k) => Math.abs(entry.ratio[k]! - 1) > 0.2));
    }
    v0.dispose();
    const sum = (f: (t: StepRecord["trajectories"][number]) => number) =>
      first.trajectories.reduce((s, t) => s + f(t), 0);
    expect(sum((t) => t.policyLoss)).toBeCloseTo(line["loss/policy"]!, 4);
    expect(sum((t) => t.clippedTokens) / first.tokens).toBeCloseTo(line["policy/clip_frac"]!, 6);
    // GRPO then task normalization: per task, token-weighted mean 0 and std 1 of the advantages
    for (const task of ["db", "os"]) {
      const members = first.trajectories.filter((t) => t.task === task);
      const tokens = members.flatMap((t) => t.newLogp.map(() => t.normalizedAdvantage!));
      const mean = tokens.reduce((s, x) => s + x, 0) / tokens.length;
      expect(mean).toBeCloseTo(0, 5);
      expect(Math.sqrt(tokens.reduce((s, x) => s + (x - mean) ** 2, 0) / tokens.length)).toBeCloseTo(1, 4);
      expect(members.map((t) => Math.sign(t.advantage))).toEqual(members.map((t) => (t.reward > 0 ? 1 : -1)));
    }
    expect(line["time/step_record_seconds"]).toBeGreaterThan(0);
    const bytes = Buffer.byteLength((await trajectories.getText(stepRecordKey("viewtest", 1)))!);
    mkdirSync(ARTIFACTS, { recursive: true });
    writeFileSync(
      join(ARTIFACTS, "step-record-cost.json"),
      JSON.stringify({
        bytes,
        trainedTokens: first.tokens,
        bytesPerToken: bytes / first.tokens,
        recordSeconds: line["time/step_record_seconds"],
        stepSeconds: line["time/step_seconds"],
      }),
    );
  });
});

describe("viewer over HTTP", () => {
  it("indexes every stored trajectory, joined with the step that consumed it", () => {
    expect(view.summaries).toHaveLength(run.trained.length + run.extra);
    expect(view.problems).toEqual([]);
    const trained = view.summary(run.trained[5]!.trajectoryId)!;
    expect(trained).toMatchObject({ step: 2, staleness: 1, dropped: null, minVersion: 0 });
    expect(view.summaries.filter((s) => s.step === null)).toHaveLength(run.extra);
  });

  it("answers unknown ids with 404 and a bad query with 400 naming the field", async () => {
    const status = async (path: string) => (await fetch(`${server.url}${path}`)).status;
    expect(await status("/trajectories/no-such-id")).toBe(404);
    expect(await status("/steps/99")).toBe(404);
    expect(await status("/steps/x")).toBe(400);
    expect(await status("/nowhere")).toBe(404);
    const bad = await fetch(`${server.url}/api/trajectories?per=0&sort=colour`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { issues: Array<{ path: string }> }).issues.map((i) => i.path).sort()).toEqual([
      "per",
      "sort",
    ]);
    const page = (await (await fetch(`${server.url}/api/trajectories?step=2&sort=reward&dir=desc&per=3`)).json()) as {
      rows: Array<{ step: number; reward: number }>;
      matching: number;
    };
    expect(page.matching).toBe(4);
    expect(page.rows.map((r) => r.reward)).toEqual([1, 1, 0]);
  });
});

describe.skipIf(!hasChromium)("viewer in Chromium", () => {
  const errors: string[] = [];
  const open = async (path: string): Promise<Page> => {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    page.on("console", (m: ConsoleMessage) => {
      if (m.type() === "error") errors.push(m.text());
    });
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${server.url}${path}`, { waitUntil: "load" });
    return page;
  };

  it("lists, filters and pages thousands of trajectories; first paint measured", async () => {
    const page = await open("/");
    // first-contentful-paint since navigation start (the request to the server included)
    const firstPaint = await page.evaluate(
      () =>
        new Promise<number>((resolve) => {
          // the entry is queued a frame or two after load
          const started = Date.now();
          const poll = () => {
            const entry = performance.getEntriesByName("first-contentful-paint")[0];
            if (entry) resolve(entry.startTime);
            else if (Date.now() - started > 5_000) resolve(-1);
            else setTimeout(poll, 20);
          };
          poll();
        }),
    );
    expect(firstPaint).toBeGreaterThan(0);
    writeFileSync(join(ARTIFACTS, "list-first-paint.json"), JSON.stringify({ ms: firstPaint, rows: 1508 }));
    expect(await page.$$eval("#trajectories tbody tr", (rows) => rows.length)).toBe(100);
    expect(await page.$eval("#matching", (e) => e.textContent)).toBe(
      `${view.summaries.length} of ${view.summaries.length} trajectories`,
    );
    await page.screenshot({ path: join(ARTIFACTS, "list.png") });

    await page.select('select[name="task"]', "os");
    await page.select('select[name="step"]', "2");
    await Promise.all([page.waitForNavigation(), page.click('#filter button[type="submit"]')]);
    const tasks = await page.$$eval("#trajectories tbody tr td:nth-child(2)", (cells) =>
      cells.map((c) => c.textContent),
    );
    const expected = run.trained.slice(4).filter((t) => t.task === "os");
    expect(tasks).toEqual(expected.map(() => "os"));
    expect(await page.$eval("#matching", (e) => e.textContent)).toBe(
      `${expected.length} of ${view.summaries.length} trajectories match the filter`,
    );

    await page.goto(`${server.url}/?step=none&sort=reward&dir=desc`);
    await Promise.all([page.waitForNavigation(), page.click(".pager a")]);
    expect(await page.$eval("#page", (e) => e.textContent)).toBe(`page 2 of ${Math.ceil(run.extra / 100)}`);
    await page.close();
  });

  it("shows a trajectory's turns and its tokens coloured by the step record's values", async () => {
    const t = run.trained[0]!;
    const entry = (await record(1)).trajectories.find((x) => x.trajectoryId === t.trajectoryId)!;
    const page = await open(`/trajectories/${t.trajectoryId}`);
    expect(await page.$$eval(".turn", (s) => s.map((e) => e.className))).toEqual(
      t.messages.map((m) => `turn ${m.role}`),
    );
    const generated = t.lossMask.reduce<number>((s, m) => s + m, 0);
    expect(await page.$$eval(".tok", (s) => s.length)).toBe(generated);

    await page.select("#measure", "ratio");
    const tokens = await page.$$eval(".tok", (spans) =>
      spans.map((s) => ({
        i: Number(s.getAttribute("data-i")),
        value: s.getAttribute("data-value"),
        colour: getComputedStyle(s).backgroundColor,
        title: s.getAttribute("title") ?? "",
      })),
    );
    const rgb = (c: string) => c.match(/\d+/g)!.map(Number) as [number, number, number];
    let k = 0;
    let above = 0;
    let below = 0;
    for (const [start, end] of entry.spans)
      for (let i = start; i < end; i++, k++) {
        const token = tokens.find((x) => x.i === i)!;
        const ratio = entry.ratio[k]!;
        expect(Number(token.value)).toBe(ratio);
        expect(token.title).toContain(`ratio ${ratio} ·`);
        expect(token.title).toContain(`trainer logp ${entry.newLogp[k]} ·`);
        const [r, , b] = rgb(token.colour);
        if (ratio > 1.001) {
          above += 1;
          expect(r).toBeGreaterThan(b);
        }
        if (ratio < 0.999) {
          below += 1;
          expect(b).toBeGreaterThan(r);
        }
      }
    expect(above).toBeGreaterThan(0);
    expect(below).toBeGreaterThan(0);
    // position 0 of the run is never trained (no log-prob precedes it): no ratio, no colour
    await page.select("#measure", "clipped");
    const clipped = await page.$$eval(".tok", (s) =>
      s
        .filter((e) => getComputedStyle(e).backgroundColor === "rgb(245, 158, 11)")
        .map((e) => Number(e.getAttribute("data-i"))),
    );
    expect(clipped).toEqual(entry.clippedAt);
    await page.select("#measure", "ratio");
    await page.screenshot({ path: join(ARTIFACTS, "trajectory.png"), fullPage: true });

    await Promise.all([page.waitForNavigation(), page.click("#group a")]);
    expect(page.url()).toContain(encodeURIComponent(run.trained[1]!.trajectoryId));
    await page.close();
  });

  it("shows a step's groups with advantages before and after task normalization", async () => {
    const page = await open("/steps/1");
    const rows = await page.$$eval("#groups tr", (r) => r.length);
    expect(rows).toBe(1 + 4);
    expect(await page.$eval("#losses", (e) => e.textContent)).toMatch(/loss -?\d+\.\d{4} \(policy/);
    await page.screenshot({ path: join(ARTIFACTS, "step.png"), fullPage: true });
    await page.close();
  });

  it("draws the report's charts with uPlot and no console error", async () => {
    const page = await open("/report");
    await page.waitForSelector("body[data-charts-drawn]");
    expect(await page.$eval("body", (b) => b.getAttribute("data-charts-drawn"))).toBe("6");
    expect(await page.$$eval(".chart canvas", (c) => c.length)).toBe(6);
    // x ticks of the step charts are whole steps
    const ticks = await page.$eval("#chart-success", (el) => el.textContent ?? "");
    expect(ticks).toContain("trainer step");
    await page.screenshot({ path: join(ARTIFACTS, "report.png"), fullPage: true });
    await page.close();
    expect(errors).toEqual([]);
  });
});

describe.skipIf(!hasChromium)("viewer navigation, width and success", () => {
  it("puts the same navigation on every page, the report and error pages included", async () => {
    const t = run.trained[0]!;
    for (const path of ["/", "/steps", "/steps/1", `/trajectories/${t.trajectoryId}`, "/report", "/no-such-page"]) {
      const page = await browser.newPage();
      await page.goto(`${server.url}${path}`, { waitUntil: "load" });
      const links = await page.$$eval("#nav a", (as) => as.map((a) => [a.getAttribute("href"), a.textContent]));
      expect(links, path).toEqual([
        ["/", "trajectories"],
        ["/steps", "steps"],
        ["/report", "report"],
      ]);
      await page.close();
    }
  });

  it("fits the trajectory list in a 1400 px wide window", async () => {
    const page = await browser.newPage();
    await page.setViewport({ width: 1400, height: 900 });
    // the widest rows come first in these orders: most tokens, multi-version, dropped reasons
    const widths: Record<string, number> = {};
    for (const path of ["/", "/?sort=tokens&dir=desc", "/?sort=minVersion&dir=desc", "/?sort=step&dir=desc"]) {
      await page.goto(`${server.url}${path}`, { waitUntil: "load" });
      widths[path] = await page.evaluate(() => document.documentElement.scrollWidth);
    }
    writeFileSync(join(ARTIFACTS, "list-width-1400.json"), JSON.stringify(widths));
    await page.screenshot({ path: join(ARTIFACTS, "list-1400.png") });
    for (const width of Object.values(widths)) expect(width).toBeLessThanOrEqual(1400);
    await page.close();
  });

  it("shows success (completed at the task's full reward) apart from status", async () => {
    const completed = view.summaries.filter((s) => s.status === "completed");
    expect(completed.length).toBeGreaterThan(0);
    for (const s of view.summaries) {
      const t = run.trained.find((x) => x.trajectoryId === s.trajectoryId);
      if (t) expect(s.success, s.trajectoryId).toBe(t.status === "completed" && t.envReward >= SUCCESS_REWARD);
      if (s.status !== "completed") expect(s.success).toBe(false);
    }
    const page = await browser.newPage();
    await page.goto(`${server.url}/?status=completed&success=no`, { waitUntil: "load" });
    const header = await page.$$eval("#trajectories thead th", (ths) => ths.map((th) => th.textContent?.trim()));
    const column = header.findIndex((h) => h?.startsWith("success")) + 1;
    expect(column).toBeGreaterThan(0);
    const cells = await page.$$eval(`#trajectories tbody td:nth-child(${column})`, (tds) =>
      tds.map((td) => td.textContent),
    );
    const failedCompletions = completed.filter((s) => !s.success).length;
    expect(cells).toEqual(new Array(Math.min(100, failedCompletions)).fill("no"));
    await page.close();
  });
});

describe("a run on the aws transport (a real moto server)", () => {
  it("is read from S3 with --endpoint: trajectories and step records", async () => {
    const moto = await startMoto();
    try {
      const dir = tempDir("aws-run-");
      const transportConfig = parseConfig({
        experimentId: "viewtest",
        transport: { kind: "aws", endpoint: moto.endpoint, queuePrefix: "view" },
      }).transport;
      writeFileSync(join(dir, "config.json"), JSON.stringify({ experimentId: "viewtest", transport: transportConfig }));
      const aws = await createTransport(transportConfig);
      const t = run.trained[0]!;
      await aws
        .store("trajectories")
        .put(`trajectories/viewtest/${t.groupId}/${t.trajectoryId}.json`, JSON.stringify(t));
      await aws.store("trajectories").put(stepRecordKey("viewtest", 1), JSON.stringify(await record(1)));
      await aws.close();
      const remote = await RunView.open(dir, { endpoint: moto.endpoint });
      try {
        expect(remote.summaries.map((s) => [s.trajectoryId, s.step])).toEqual([[t.trajectoryId, 1]]);
        expect(remote.problems).toEqual(["no tokenizer.json in the checkpoint store; tokens are shown as ids"]);
      } finally {
        await remote.close();
      }
    } finally {
      await moto.stop();
    }
  }, 90_000);
});

describe("bad run folders", () => {
  it("a missing folder or one without config.json is refused with what a run folder holds", async () => {
    await expect(RunView.open(join(tempDir("none-"), "nope"))).rejects.toThrow(/does not exist/);
    await expect(RunView.open(tempDir("empty-"))).rejects.toThrow(RunFolderError);
    await expect(RunView.open(tempDir("empty-"))).rejects.toThrow(/no config.json/);
  });

  it("a partial or older-schema folder opens with its problems on every page, never blank", async () => {
    const dir = tempDir("partial-");
    writeFileSync(join(dir, "config.json"), JSON.stringify({ experimentId: "old", transport: { kind: "local" } }));
    const store = new LocalObjectStore(join(dir, "transport", "objects", "trajectories"));
    await store.put("trajectories/old/g/a.json", JSON.stringify({ schemaVersion: 0, trajectoryId: "a" }));
    const partial = await RunView.open(dir);
    expect(partial.problems.join("\n")).toMatch(/no trainer step records/);
    expect(partial.problems.join("\n")).toMatch(/1 stored trajectory object\(s\) could not be read.*schemaVersion/);
    const running = await serveViewer(partial);
    try {
      const html = await (await fetch(`${running.url}/`)).text();
      expect(html).toContain("This run folder is incomplete");
      expect(html).toContain("0 of 0 trajectories");
      const report = await fetch(`${running.url}/report`);
      expect(report.status).toBe(404);
      expect(await report.text()).toContain("no report.html yet");
    } finally {
      await running.close();
    }
  });
});
