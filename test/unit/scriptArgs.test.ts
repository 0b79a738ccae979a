import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { readScriptArgs, validateScriptArgs } from "../../shared/commandLine.ts";
import { waitFor } from "../env/helpers.ts";
import { runProcess } from "../support/cli.ts";

/** process.exit, stubbed to end the call the way it ends the script, with what was printed. */
class Exited extends Error {
  constructor(readonly code: number | undefined) {
    super(`exit ${code}`);
  }
}

function run(call: () => unknown): { code: number | undefined; out: string; err: string; returned?: unknown } {
  let out = "";
  let err = "";
  vi.spyOn(process, "exit").mockImplementation((code) => {
    throw new Exited(code === undefined ? undefined : Number(code));
  });
  vi.spyOn(process.stdout, "write").mockImplementation((text) => {
    out += String(text);
    return true;
  });
  vi.spyOn(process.stderr, "write").mockImplementation((text) => {
    err += String(text);
    return true;
  });
  try {
    const returned = call();
    return { code: undefined, out, err, returned };
  } catch (error) {
    if (error instanceof Exited) return { code: error.code, out, err };
    throw error;
  } finally {
    vi.restoreAllMocks();
  }
}

const SCRIPT = { command: "npm run thing --", usage: "[--runs N] [--keep]" };
const OPTIONS = {
  options: { runs: { type: "string", default: "3" }, keep: { type: "boolean", default: false } },
} as const;

describe("a script's command line (shared/commandLine.ts)", () => {
  afterEach(() => vi.restoreAllMocks());

  it("reads the flags it knows", () => {
    const { code, returned } = run(() => readScriptArgs(SCRIPT, OPTIONS, ["--runs", "5", "--keep"]));
    expect(code).toBeUndefined();
    expect(returned).toMatchObject({ values: { runs: "5", keep: true } });
  });

  it("answers --help and -h with the usage line on stdout and exit 0", () => {
    for (const flag of ["--help", "-h"]) {
      const { code, out, err } = run(() => readScriptArgs(SCRIPT, OPTIONS, ["--runs", "5", flag]));
      expect(code).toBe(0);
      expect(out).toBe("usage: npm run thing -- [--runs N] [--keep]\n");
      expect(err).toBe("");
    }
  });

  it("leaves a --help after -- to what the script passes on", () => {
    const { code, returned } = run(() =>
      readScriptArgs(SCRIPT, { ...OPTIONS, allowPositionals: true }, ["--", "--help"]),
    );
    expect(code).toBeUndefined();
    expect(returned).toMatchObject({ positionals: ["--help"] });
  });

  it("answers an unknown flag, a missing value or a stray argument with what was wrong, the usage line and exit 2", () => {
    const cases: Array<[string[], string]> = [
      [["--rusn", "5"], "npm run thing: Unknown option '--rusn'\n"],
      [["--runs"], "npm run thing: Option '--runs <value>' argument missing\n"],
      [["extra"], "npm run thing: Unexpected argument 'extra'"],
    ];
    for (const [argv, message] of cases) {
      const { code, out, err } = run(() => readScriptArgs(SCRIPT, OPTIONS, argv));
      expect(code, argv.join(" ")).toBe(2);
      expect(out).toBe("");
      expect(err.startsWith(message), err).toBe(true);
      expect(err).toMatch(/\nusage: npm run thing -- \[--runs N\] \[--keep\]\n$/);
      expect(err).not.toMatch(/\n\s+at /);
    }
  });

  it("checks values with a zod schema and names each refused flag", () => {
    const schema = z.object({ runs: z.coerce.number().int().min(1), keep: z.boolean() });
    expect(run(() => validateScriptArgs(SCRIPT, schema, { runs: "4", keep: false })).returned).toEqual({
      runs: 4,
      keep: false,
    });
    const refused = run(() => validateScriptArgs(SCRIPT, schema, { runs: "0", keep: "yes" }));
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/^npm run thing: --runs: .*>=1; --keep: .*boolean[^\n]*\nusage: npm run thing -- /);
    // a list flag is named as the flag, not by the item's place in it
    const list = z.object({
      widths: z
        .string()
        .transform((s) => s.split(",").map(Number))
        .pipe(z.array(z.number().min(1))),
    });
    expect(run(() => validateScriptArgs(SCRIPT, list, { widths: "4,0" })).err).toMatch(/^npm run thing: --widths: /);
  });
});

describe("a script stopped by a signal (abortOnStopSignals)", () => {
  it("aborts on the first SIGTERM or SIGINT, saying so, and exits 1 on the second", async () => {
    const program = [
      `const { abortOnStopSignals } = await import(${JSON.stringify(fileURLToPath(new URL("../../shared/commandLine.ts", import.meta.url)))});`,
      `const stopped = abortOnStopSignals({ command: "npm run thing --", usage: "" }, "the run");`,
      `stopped.addEventListener("abort", () => console.log("aborted by " + stopped.reason));`,
      `console.log("ready");`,
      "setInterval(() => {}, 1000);",
    ].join("\n");
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", program], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString();
    });
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    await waitFor(() => out.includes("ready"), 20_000, "the script to start", 50);
    child.kill("SIGTERM");
    await waitFor(() => out.includes("aborted by"), 20_000, "the script to abort", 50).catch(() => undefined);
    expect(out, err).toContain("aborted by SIGTERM");
    expect(err).toBe("npm run thing: SIGTERM: stopping the run\n");
    expect(child.exitCode).toBe(null); // the script ends its run itself
    child.kill("SIGINT");
    expect(await exited).toBe(1);
  }, 30_000);
});

/** Every script package.json runs (and scale-table, which the docs run with tsx), by its entry file. */
const SCRIPTS: ReadonlyArray<[string, string]> = [
  ["bench/chaos.ts", "npm run chaos --"],
  ["bench/controller.ts", "npm run bench:controller --"],
  ["bench/copy.ts", "npm run bench:copy --"],
  ["bench/os.ts", "npm run bench:os --"],
  ["bench/osThreads.ts", "npm run bench:os-threads --"],
  ["bench/pipeline.ts", "npm run bench:pipeline --"],
  ["bench/policy.ts", "npm run bench:policy --"],
  ["bench/repeat.ts", "npm run bench:repeat --"],
  ["bench/train.ts", "npm run bench:train --"],
  ["bench/transport.ts", "npm run bench:transport --"],
  ["infra/images/cli.ts", "npm run images --"],
  ["infra/rehearse/main.ts", "npm run rehearse --"],
  ["scripts/calibrate.ts", "npm run calibrate --"],
  ["scripts/gpu-check.ts", "npm run gpu-check --"],
  ["scripts/learning.ts", "npm run learning --"],
  ["scripts/scale-table.ts", "npx tsx scripts/scale-table.ts"],
];

describe("the npm scripts", () => {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  it.each(SCRIPTS)("%s answers --help with its usage line and runs nothing", async (entry, command) => {
    const result = await runProcess(process.execPath, ["--import", "tsx", entry, "--help"], {
      cwd: root,
      timeoutMs: 60_000,
    });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout.startsWith(`usage: ${command} `), result.stdout).toBe(true);
    expect(result.stdout.trim().split("\n")).toHaveLength(1);
  });
});
