import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { roleArgv } from "../../cli/commands/container.ts";
import { concurrencyOf } from "../../cli/commands/env.ts";
import {
  type ContainerEnv,
  parseContainerEnv,
  resolveContainerConfig,
  startContainer,
} from "../../shared/config/containerEnv.ts";
import { ValidationError } from "../../shared/errors.ts";
import { tempDir } from "../support/tmp.ts";

const resources = {
  AGENTRL_QUEUE_PREFIX: "exp1",
  AGENTRL_TRAJECTORY_BUCKET: "traj-bucket",
  AGENTRL_CHECKPOINT_BUCKET: "ckpt-bucket",
};

function validationMessage(fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return (error as ValidationError).message;
  }
  throw new Error("expected a ValidationError");
}

describe("parseContainerEnv", () => {
  it("parses a rollout worker's environment with typed fields", () => {
    const env = parseContainerEnv(
      {
        AGENTRL_ROLE: "rollout",
        ...resources,
        AGENTRL_CONTROLLER_URL: "http://controller.agentrl.local:5020",
        AGENTRL_POLICY_CURRENT_URL: "http://policy-current.agentrl.local:8000",
        AGENTRL_POLICY_STALE_URL: "http://policy-stale.agentrl.local:8000",
        PATH: "/usr/bin",
      },
      "rollout",
    );
    expect(env.AGENTRL_POLICY_STALE_URL).toBe("http://policy-stale.agentrl.local:8000");
    expect(env.AGENTRL_QUEUE_PREFIX).toBe("exp1");
  });

  it("names a missing variable", () => {
    const message = validationMessage(() =>
      parseContainerEnv({ AGENTRL_ROLE: "env", ...resources, AGENTRL_CONTROLLER_URL: "http://c:5020" }),
    );
    expect(message).toContain("AGENTRL_TASK");
    expect(message).not.toContain("AGENTRL_CONTROLLER_URL");
  });

  it("names a malformed variable and what is allowed", () => {
    const message = validationMessage(() =>
      parseContainerEnv({ AGENTRL_ROLE: "controller", ...resources, AGENTRL_PORT: "70000" }),
    );
    expect(message).toMatch(/AGENTRL_PORT: must be 1\.\.65535/);
    const pool = validationMessage(() =>
      parseContainerEnv({ AGENTRL_ROLE: "policy", ...resources, AGENTRL_POLICY_POOL: "newest" }),
    );
    expect(pool).toMatch(/AGENTRL_POLICY_POOL: must be current or stale/);
  });

  it("rejects an unknown role and a role other than the expected one", () => {
    expect(validationMessage(() => parseContainerEnv({ AGENTRL_ROLE: "evaluatorx" }))).toMatch(
      /AGENTRL_ROLE: must be one of controller, env/,
    );
    expect(validationMessage(() => parseContainerEnv({ AGENTRL_ROLE: "feeder", ...resources }, "trainer"))).toMatch(
      /AGENTRL_ROLE: is "feeder"; this process is the trainer role/,
    );
    expect(validationMessage(() => parseContainerEnv({}, "trainer"))).toMatch(/AGENTRL_ROLE: is not set/);
  });

  it("applies defaults to optional variables", () => {
    const env = parseContainerEnv({ AGENTRL_ROLE: "controller", ...resources }, "controller");
    expect(env.AGENTRL_PORT).toBe(5020);
  });
});

describe("resolveContainerConfig / startContainer", () => {
  it("takes the config from JSON and overrides its transport with the deployment's resource names", async () => {
    const { env, config } = await startContainer("trainer", {
      AGENTRL_ROLE: "trainer",
      ...resources,
      AWS_REGION: "eu-west-1",
      AGENTRL_CONFIG_JSON: JSON.stringify({
        experimentId: "e1",
        trainer: { maxSteps: 7 },
        transport: { kind: "local" },
      }),
      AGENTRL__trainer__batchSize: "3",
    });
    expect(env.AGENTRL_ROLE).toBe("trainer");
    expect(config.experimentId).toBe("e1");
    expect(config.trainer.maxSteps).toBe(7);
    expect(config.trainer.batchSize).toBe(3);
    expect(config.transport).toMatchObject({
      kind: "aws",
      queuePrefix: "exp1",
      trajectoryBucket: "traj-bucket",
      checkpointBucket: "ckpt-bucket",
      region: "eu-west-1",
    });
  });

  it("reads the config from S3 through the injected reader", async () => {
    const reads: string[] = [];
    const { config } = await startContainer(
      "feeder",
      { AGENTRL_ROLE: "feeder", ...resources, AGENTRL_CONFIG_S3_URI: "s3://cfg-bucket/experiments/e2.yaml" },
      {
        readS3Text: async ({ bucket, key }) => {
          reads.push(`${bucket}/${key}`);
          return "experimentId: e2\nrollout:\n  groupSize: 4\n";
        },
      },
    );
    expect(reads).toEqual(["cfg-bucket/experiments/e2.yaml"]);
    expect(config.rollout.groupSize).toBe(4);
  });

  it("names the variable whose config is invalid, with the failing field", async () => {
    const bad = startContainer("trainer", {
      AGENTRL_ROLE: "trainer",
      ...resources,
      AGENTRL_CONFIG_JSON: JSON.stringify({ trainer: { maxSteps: 0 } }),
    });
    await expect(bad).rejects.toThrow(/trainer\.maxSteps/);
    const notJson = startContainer("trainer", { AGENTRL_ROLE: "trainer", ...resources, AGENTRL_CONFIG_JSON: "[1, 2" });
    await expect(notJson).rejects.toThrow(/AGENTRL_CONFIG_JSON: is not valid JSON\/YAML/);
  });

  it("requires an env worker's task to be in the config's mix, and sets the controller URL", async () => {
    const env = parseContainerEnv(
      {
        AGENTRL_ROLE: "env",
        ...resources,
        AGENTRL_TASK: "os",
        AGENTRL_CONTROLLER_URL: "http://controller.agentrl.local:5020",
      },
      "env",
    );
    const config = await resolveContainerConfig(env);
    expect(config.tasks.controllerUrl).toBe("http://controller.agentrl.local:5020");
    const missing = resolveContainerConfig({ ...env, AGENTRL_CONFIG_JSON: '{"tasks":{"mix":[{"name":"db"}]}}' });
    await expect(missing).rejects.toThrow(/AGENTRL_TASK: "os" is not in the config's task mix \(db\)/);
  });
});

describe("roleArgv", () => {
  const files = { configFile: "/tmp/c.json", sweepFile: "/tmp/s.json" };
  it("maps each role to its agentrl subcommand and flags", () => {
    const env = (raw: Record<string, string>): ContainerEnv => parseContainerEnv({ ...resources, ...raw });
    expect(roleArgv(env({ AGENTRL_ROLE: "controller", AGENTRL_PORT: "5020" }), files)).toEqual([
      "controller",
      "--host",
      "0.0.0.0",
      "--port",
      "5020",
    ]);
    const worker = roleArgv(
      env({ AGENTRL_ROLE: "env", AGENTRL_TASK: "db", AGENTRL_CONTROLLER_URL: "http://c:5020", AGENTRL_PORT: "5021" }),
      files,
    );
    // the config travels too: the worker takes its sessions from tasks.mix[].concurrency
    expect(worker.slice(0, 7)).toEqual([
      "env",
      "serve",
      "db",
      "--config",
      "/tmp/c.json",
      "--controller",
      "http://c:5020",
    ]);
    expect(worker[worker.indexOf("--address") + 1]).toMatch(/^http:\/\/\d+\.\d+\.\d+\.\d+:5021\/api$/);
    expect(roleArgv(env({ AGENTRL_ROLE: "trainer" }), files)).toEqual(["trainer", "--config", "/tmp/c.json"]);
    expect(
      roleArgv(
        env({
          AGENTRL_ROLE: "rollout",
          AGENTRL_CONTROLLER_URL: "http://c:5020",
          AGENTRL_POLICY_CURRENT_URL: "http://p1:8000",
          AGENTRL_POLICY_STALE_URL: "http://p2:8000",
        }),
        files,
      ),
    ).toEqual([
      "rollout",
      "--config",
      "/tmp/c.json",
      "--controller-url",
      "http://c:5020",
      "--current-url",
      "http://p1:8000",
      "--stale-url",
      "http://p2:8000",
    ]);
    expect(roleArgv(parseContainerEnv({ AGENTRL_ROLE: "sweep", AGENTRL_SWEEP_JSON: "{}" }), files)).toEqual([
      "sweep",
      "/tmp/s.json",
    ]);
  });
});

describe("env worker sessions from the config", () => {
  it("serves tasks.mix[].concurrency of its task, names the mix when the task is missing", async () => {
    const dir = tempDir("env-concurrency-");
    const file = join(dir, "config.json");
    writeFileSync(file, JSON.stringify({ tasks: { mix: [{ name: "db", concurrency: 5 }, { name: "os" }] } }));
    expect(await concurrencyOf("db", { config: file })).toBe(5);
    expect(await concurrencyOf("os", { config: file })).toBe(16);
    expect(await concurrencyOf("db", {})).toBe(32);
    await expect(concurrencyOf("kg", { config: file })).rejects.toThrow(
      /"kg" is not in the config's tasks.mix \(db, os\)/,
    );
  });
});
