import { describe, expect, it } from "vitest";
import { evalLabels } from "../../cli/launch/eval.ts";
import { ValidationError } from "../../shared/errors.ts";

const greedy = { temperature: 0, topP: 1, samples: 1 };

/** How `agentrl eval --policy a b ...` names each policy in its tables and report files. */
describe("evalLabels", () => {
  it("names versions vN and an endpoint by --model, else by its URL", () => {
    expect(evalLabels([{ version: 0 }, { url: "http://127.0.0.1:8000/v1" }], "expert", greedy)).toEqual([
      { label: "v0", fileStem: "eval-v0" },
      { label: "expert", fileStem: "eval-expert" },
    ]);
    expect(evalLabels([{ url: "http://127.0.0.1:8000/v1" }], undefined, greedy)).toEqual([
      { label: "http://127.0.0.1:8000/v1", fileStem: "eval-http_127.0.0.1_8000_v1" },
    ]);
  });

  it("tells apart endpoints by their URLs where another policy has their name", () => {
    const labels = evalLabels(
      [{ url: "http://10.0.0.1:8000/v1" }, { url: "http://10.0.0.2:8000/v1" }, { version: 3 }],
      "qwen",
      greedy,
    );
    expect(labels.map((l) => l.label)).toEqual([
      "qwen (http://10.0.0.1:8000/v1)",
      "qwen (http://10.0.0.2:8000/v1)",
      "v3",
    ]);
    expect(new Set(labels.map((l) => l.fileStem)).size).toBe(3);
    const named = evalLabels([{ version: 0 }, { url: "http://10.0.0.1:8000/v1" }], "v0", greedy);
    expect(named.map((l) => l.label)).toEqual(["v0", "v0 (http://10.0.0.1:8000/v1)"]);
  });

  it("gives report files whose names would clash a number", () => {
    const long = "http://policy-server.internal.example.com:8000/deployments/experiment-a/checkpoints";
    const labels = evalLabels([{ url: `${long}/1/v1` }, { url: `${long}/2/v1` }], undefined, greedy);
    expect(labels[0]?.label).not.toBe(labels[1]?.label);
    expect(labels[1]?.fileStem).toBe(`${labels[0]?.fileStem}-2`);
  });

  it("adds the sampling to every label", () => {
    const sampled = { temperature: 1, topP: 0.9, samples: 4 };
    expect(evalLabels([{ version: 0 }, { version: 2 }], undefined, sampled).map((l) => l.label)).toEqual([
      "v0 T=1 p=0.9 k=4",
      "v2 T=1 p=0.9 k=4",
    ]);
  });

  it("refuses a version or a URL given twice, naming it", () => {
    const twice = (targets: Parameters<typeof evalLabels>[0]) => {
      try {
        evalLabels(targets, "m", greedy);
      } catch (error) {
        expect(error).toBeInstanceOf(ValidationError);
        return (error as ValidationError).message;
      }
      throw new Error("accepted");
    };
    expect(twice([{ version: 1 }, { version: 1 }])).toContain(
      "--policy: names v1 twice (give each version or URL once)",
    );
    expect(twice([{ url: "http://a:1/v1" }, { url: "http://A:1/v1" }])).toContain(
      "--policy: names http://a:1/v1 twice",
    );
  });
});
