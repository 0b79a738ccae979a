import type { Command } from "commander";
import { InvalidArgumentError } from "commander";

/** `agentrl data fetch agentbench`: the published task data the AgentBench tasks read. */
export function register(program: Command): void {
  const data = program.command("data").description("task data sets kept outside the repository");
  data
    .command("fetch")
    .description(
      "download a data set at its pinned commit and check every file's SHA-256 (a failed fetch leaves nothing half-written)",
    )
    .argument("<dataset>", "data set to fetch: agentbench", datasetArgument)
    .option("--dir <dir>", "target folder (AgentBench's layout: <dir>/data/...)", ".agentrl/agentbench")
    .option("--from <path>", "copy from a local folder (AgentBench's root or its data/ folder) instead of downloading")
    .option("--base-url <url>", "download from this mirror: <url>/<commit>/data/<path>")
    .action(async (_dataset: "agentbench", options: { dir: string; from?: string; baseUrl?: string }) => {
      const { fetchAgentBench } = await import("../../shared/agentbench/fetch.ts");
      const { AGENTBENCH_COMMIT, AGENTBENCH_DEFAULT_BASE_URL, AGENTBENCH_DIR_ENV } = await import(
        "../../shared/agentbench/data.ts"
      );
      const source = options.from
        ? ({ kind: "dir", dir: options.from } as const)
        : ({ kind: "url", baseUrl: options.baseUrl ?? AGENTBENCH_DEFAULT_BASE_URL } as const);
      const from = source.kind === "dir" ? source.dir : `${source.baseUrl} at ${AGENTBENCH_COMMIT.slice(0, 7)}`;
      process.stderr.write(`fetching AgentBench data from ${from}\n`);
      const result = await fetchAgentBench({ dir: options.dir, source });
      process.stdout.write(
        `${result.files} files (${(result.bytes / 1e6).toFixed(1)} MB), every SHA-256 checked, in ${result.dir}\n` +
          `use it with: export ${AGENTBENCH_DIR_ENV}=${result.dir}   (or tasks.agentbench.dir in a config)\n`,
      );
    });
}

function datasetArgument(value: string): "agentbench" {
  if (value !== "agentbench") throw new InvalidArgumentError(`unknown data set "${value}"; available: agentbench`);
  return value;
}
