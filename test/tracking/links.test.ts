import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { renderReport } from "../../cli/report/report.ts";
import { trackerRunHtml } from "../../cli/view/pages.ts";
import { readTrackerLinks, writeTrackerLinks } from "../../shared/tracking/links.ts";
import { tempDir } from "../support/tmp.ts";

/** The report and the viewer's step page link to the MLflow and W&B runs that hold the same steps. */
describe("tracker links", () => {
  const mlflow = {
    trackingUri: "http://mlflow:5000",
    experimentId: "3",
    runId: "ab12",
    url: "http://mlflow:5000/#/experiments/3/runs/ab12",
  };

  it("round-trip through trackers.json; a missing or broken file is no links", () => {
    const dir = tempDir("agentrl-links-");
    expect(readTrackerLinks(dir)).toEqual({});
    writeTrackerLinks(dir, { mlflow });
    expect(readTrackerLinks(dir)).toEqual({ mlflow });
    writeFileSync(join(dir, "trackers.json"), "{not json");
    expect(readTrackerLinks(dir)).toEqual({});
  });

  it("appear in the report and on a step's page only when a tracker run exists", () => {
    const linked = renderReport({ title: "t", records: [], evals: [], facts: [], trackers: { mlflow } });
    expect(linked).toContain(`<a href="${mlflow.url}">run ab12</a>`);
    expect(renderReport({ title: "t", records: [], evals: [], facts: [] })).not.toContain("tracker-run");
    expect(trackerRunHtml({ mlflow }, 7)).toMatch(
      /step 7.*<a href="http:\/\/mlflow:5000\/#\/experiments\/3\/runs\/ab12">/,
    );
    expect(trackerRunHtml({}, 7)).toBe("");
  });

  it("link the W&B run beside the MLflow one", () => {
    const wandb = {
      baseUrl: "https://api.wandb.ai",
      entity: "team",
      project: "agentrl",
      runId: "k3x9a0b1",
      url: "https://wandb.ai/team/agentrl/runs/k3x9a0b1",
    };
    const dir = tempDir("agentrl-links-");
    writeTrackerLinks(dir, { mlflow, wandb });
    expect(readTrackerLinks(dir)).toEqual({ mlflow, wandb });
    const both = renderReport({ title: "t", records: [], evals: [], facts: [], trackers: { mlflow, wandb } });
    expect(both).toContain(`in MLflow: <a href="${mlflow.url}">run ab12</a>`);
    expect(both).toContain(`in W&amp;B: <a href="${wandb.url}">run k3x9a0b1</a>`);
    expect(trackerRunHtml({ wandb }, 3)).toBe(
      `<p id="tracker-run">step 3's metrics in W&amp;B: <a href="${wandb.url}">run k3x9a0b1</a> (step axis 3)</p>`,
    );
  });
});
