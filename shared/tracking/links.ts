import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

/**
 * `<run folder>/trackers.json`: the tracker runs this run writes to. The viewer and the report
 * link each step to them, and a restarted trainer continues the same MLflow and W&B runs.
 */
export const TrackerLinks = z.object({
  mlflow: z
    .object({ trackingUri: z.string(), experimentId: z.string(), runId: z.string(), url: z.string() })
    .optional(),
  wandb: z
    .object({ baseUrl: z.string(), entity: z.string(), project: z.string(), runId: z.string(), url: z.string() })
    .optional(),
});
export type TrackerLinks = z.infer<typeof TrackerLinks>;

export const TRACKER_LINKS_FILE = "trackers.json";

/** The run folder's links; `{}` when there are none or the file is unreadable (links are a convenience). */
export function readTrackerLinks(runFolder: string): TrackerLinks {
  try {
    const parsed = TrackerLinks.safeParse(JSON.parse(readFileSync(join(runFolder, TRACKER_LINKS_FILE), "utf8")));
    return parsed.success ? parsed.data : {};
  } catch {
    return {};
  }
}

export function writeTrackerLinks(runFolder: string, links: TrackerLinks): void {
  writeFileSync(join(runFolder, TRACKER_LINKS_FILE), `${JSON.stringify(links, null, 2)}\n`);
}
