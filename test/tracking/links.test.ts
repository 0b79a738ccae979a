import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { renderReport } from "../../cli/report/report.ts";
import { trackerRunHtml } from "../../cli/view/pages.ts";
import { readTrackerLinks, writeTrackerLinks } from "../../shared/tracking/links.ts";
import { tempDir } from "../support/tmp.ts";

/** The report and the viewer's step page link to the MLflow run that holds the same steps. */
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
});
