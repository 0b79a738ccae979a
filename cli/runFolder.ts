import { existsSync, statSync } from "node:fs";
import { isAbsolute, join, relative, resolve } from "node:path";
import { type ExperimentConfig, loadConfig } from "../shared/config/index.ts";
import { ValidationError } from "../shared/errors.ts";

/** What a run folder holds, said wherever one is refused. */
export const RUN_FOLDER_HOLDS = "a run folder holds config.json, metrics.jsonl, transport/ and report.html";

/**
 * A path as the user should type it next: relative to the working folder when it lies inside it
 * (`runs/quickstart-…`), absolute otherwise.
 */
export function displayPath(path: string, cwd: string = process.cwd()): string {
  const rel = relative(cwd, resolve(path));
  return rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : resolve(path);
}

/**
 * The config a finished run ran with (`<run>/config.json`), `--set` applied on top. A local run's
 * stores are read from its own transport/ folder, so a run folder that was moved or copied still
 * evaluates the versions it trained.
 */
export async function runFolderConfig(dir: string, overrides: readonly string[] = []): Promise<ExperimentConfig> {
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new ValidationError("options", [
      {
        path: "--run",
        message: `${dir} does not exist or is not a folder; give the run folder \`agentrl train\` or \`npm start\` printed`,
      },
    ]);
  const configFile = join(dir, "config.json");
  if (!existsSync(configFile))
    throw new ValidationError("options", [
      { path: "--run", message: `${dir} is not a run folder: it has no config.json (${RUN_FOLDER_HOLDS})` },
    ]);
  const transportDir = join(dir, "transport");
  const ownTransport = existsSync(transportDir) ? [`transport.localDir=${resolve(transportDir)}`] : [];
  const config = await loadConfig(configFile, { overrides: [...ownTransport, ...overrides] });
  return config;
}

/** The lines `agentrl train` / `npm start` end with: the run folder and what to run next. */
export function nextStepsText(runDir: string, options: { configFile?: string; evalN: number }): string {
  const run = displayPath(runDir);
  const config = options.configFile ? displayPath(options.configFile) : undefined;
  const lines = [
    `run folder: ${run}`,
    "",
    "next:",
    `  npx agentrl view ${run}    # trajectories, tokens, trainer steps and the report in a browser`,
    `  npx agentrl eval --run ${run} --policy 0 newest --n ${options.evalN}    # evaluate again: the newest version against its base, instance by instance`,
  ];
  if (config)
    lines.push(`  npx agentrl train -c ${config} --set trainer.maxSteps=20    # train longer (a new run folder)`);
  return lines.join("\n");
}
