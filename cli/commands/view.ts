import { type Command, InvalidArgumentError } from "commander";
import { exitOnStopSignal } from "../stopSignals.ts";
import { intOption } from "./controller.ts";

interface ViewOptions {
  port: number;
  host: string;
  transport?: "local" | "aws";
  endpoint?: string;
}

/** `agentrl view RUN_DIR`: a local web app over a run's trajectories, trainer steps and report. */
export function register(program: Command): void {
  program
    .command("view")
    .description("browse a run: trajectories (filter, sort, page), each one's turns and tokens, trainer steps, report")
    .argument("<run-dir>", "a run folder written by `agentrl train` / `npm start`")
    .option("--port <n>", "port to listen on (0 picks a free one)", intOption("--port", 0, 65535), 8080)
    .option("--host <host>", "interface to listen on", "127.0.0.1")
    .option("--transport <kind>", "where the run's stores are: local (its transport/ folder) or aws", transportOption)
    .option("--endpoint <url>", "AWS-API endpoint of a run made with --transport aws (implies --transport aws)")
    .action(async (dir: string, options: ViewOptions) => {
      const { RunView } = await import("../view/runData.ts");
      const { serveViewer } = await import("../view/server.ts");
      const { createLogger } = await import("../../shared/log.ts");
      const view = await RunView.open(dir, {
        ...(options.endpoint ? { endpoint: options.endpoint } : {}),
        ...(options.transport ? { transport: options.transport } : {}),
        onProgress: (done, total) => process.stderr.write(`\rindexing trajectories ${done}/${total}`),
      });
      process.stderr.write(
        `\n${view.summaries.length} trajectories, ${view.steps.size} step records${view.problems.length ? `; ${view.problems.length} problem(s) shown on every page` : ""}\n`,
      );
      const running = await serveViewer(view, { port: options.port, host: options.host });
      process.stdout.write(`${running.url}\n`);
      exitOnStopSignal(
        async () => {
          await running.close();
          await view.close();
        },
        { log: createLogger({ role: "view" }) },
      );
    });
}

function transportOption(value: string): "local" | "aws" {
  if (value === "local" || value === "aws") return value;
  throw new InvalidArgumentError(`--transport must be "local" or "aws", got "${value}"`);
}
