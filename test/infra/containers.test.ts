import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { beforeAll, describe, expect, it } from "vitest";
import {
  type BuiltImage,
  buildImage,
  imageServing,
  type PlannedImage,
  plannedImages,
} from "../../infra/images/build.ts";
import {
  removeContainers,
  runToCompletion,
  startContainer,
  stopContainer,
  waitForLog,
} from "../../infra/images/containers.ts";
import { type ContainerEngine, detectEngine, exec } from "../../infra/images/engine.ts";
import { ensureNodeBase } from "../../infra/images/standInBase.ts";
import {
  REHEARSAL_CONFIG,
  type RehearsalResult,
  type RehearsalRun,
  rehearse,
  synthesizeForRehearsal,
} from "../../infra/rehearse/rehearse.ts";
import { containerRunner } from "../../infra/rehearse/runners.ts";
import type { TaskRoleDefinition } from "../../infra/rehearse/template.ts";
import { CONTAINER_ROLES, parseContainerEnv, resolveContainerConfig } from "../../shared/config/containerEnv.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * Issue 25: the images are built and run, not just parsed. Needs podman (or a Docker daemon);
 * without one this whole file is skipped, by name, and the suite still passes.
 */
// The SDK's Node 20 notice would only clutter the output (as in test/support/moto.ts).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
const engine = await detectEngine();
if (!engine)
  process.stderr.write(
    "containers.test.ts: SKIPPED 'container images, built and run' - neither podman nor a Docker daemon answers " +
      "or AGENTRL_CONTAINER_ENGINE=none (apt-get install podman runc debootstrap to run it)\n",
  );

/** The tasks whose env workers the rehearsal runs as containers (every task runs from the same functions image). */
const CONTAINER_TASKS = ["db", "os"];
/** Files and folders the .dockerignore keeps out of every image's /app. */
const KEPT_OUT = [".git", ".ci", "test", "bench", "cdk.out", "coverage", ".env"];

describe.skipIf(!engine)("container images, built and run (podman or Docker)", () => {
  const docker = engine as ContainerEngine;
  const built = new Map<string, BuiltImage>();
  let plan: PlannedImage[] = [];

  beforeAll(async () => {
    await ensureNodeBase(docker);
    plan = await plannedImages();
    // One at a time: the images share cached layers (and 2 cores).
    for (const image of plan) built.set(image.name, await buildImage(docker, image));
    process.stdout.write(
      `[containers] built ${[...built.values()].map((b) => `${b.image.name} ${b.seconds.toFixed(0)} s ${(b.sizeBytes / 1e6).toFixed(0)} MB`).join(", ")}\n`,
    );
  }, 1_800_000);

  const image = (name: string): string => {
    const found = built.get(name);
    if (!found) throw new Error(`image ${name} was not built (built: ${[...built.keys()].join(", ")})`);
    return found.image.tag;
  };

  it("builds every image the CDK app references (trainer in its CPU variant), each running as the non-root node user", () => {
    expect(plan.map((p) => p.name).sort()).toEqual(["functions", "trainer-cpu"]);
    expect(plan.find((p) => p.name === "trainer-cpu")?.buildArgs).toEqual({ TFJS_BACKEND: "wasm" });
    for (const { image: planned, user } of built.values()) expect(user, planned.name).toBe("node");
    const served = new Set(plan.flatMap((p) => p.roles));
    expect([...served].sort()).toEqual([...CONTAINER_ROLES].sort());
  });

  it("each image holds the app and its production dependencies only: nothing the .dockerignore keeps out", async () => {
    const probe = [
      "cd /app",
      `for p in ${KEPT_OUT.join(" ")} node_modules/vitest node_modules/typescript node_modules/@biomejs node_modules/aws-cdk-lib; do test -e "$p" && echo "LEAKED $p"; done`,
      "find . -name '*.test.ts' -not -path './node_modules/*' | sed 's/^/LEAKED /'",
      "test -f bin/agentrl.mjs && test -f shared/config/containerEnv.ts && echo APP_OK",
      // The local transport's SQLite (libsql) loads its prebuilt binary for the image's platform.
      "node -e \"new (require('libsql'))(':memory:').exec('select 1'); console.log('SQLITE_OK')\"",
      // runs/ and .agentrl/ start empty (nothing of the host's runs) and are the node user's to write.
      'test -z "$(ls -A runs)$(ls -A .agentrl)" && touch runs/probe .agentrl/probe && echo RUNS_EMPTY_WRITABLE',
      // TF.js only where a role runs a model (trainer, policy servers, sweep runner).
      "node -e \"require.resolve('@tensorflow/tfjs'); console.log('TFJS_PRESENT')\" 2>/dev/null; test -e node_modules/core-js && echo COREJS_PRESENT",
      // the CLI's bundle, made at build time, is current: the node user may not write another
      `node --input-type=module -e "const { cliBundle } = await import('/app/bin/cliBundle.mjs'); console.log((await cliBundle()) ? 'BUNDLE_CURRENT' : 'NO_BUNDLE')"`,
      "id -u",
    ].join("; ");
    const results = await Promise.all(
      plan.map((p) =>
        runToCompletion(docker, {
          name: `agentrl-probe-${p.name}-${process.pid}`,
          image: p.tag,
          env: {},
          network: "none",
          command: ["sh", "-c", probe],
        }),
      ),
    );
    results.forEach((result, i) => {
      const name = plan[i]?.name;
      expect(result.stdout, `${name}: ${result.stderr}`).not.toContain("LEAKED");
      expect(result.stdout, name).toContain("APP_OK");
      expect(result.stdout, name).toContain("SQLITE_OK");
      expect(result.stdout, name).toContain("RUNS_EMPTY_WRITABLE");
      expect(result.stdout, name).toContain("BUNDLE_CURRENT");
      const modelImage = plan[i]?.roles.includes("trainer") ?? false;
      expect(result.stdout.includes("TFJS_PRESENT"), `${name}: TF.js`).toBe(modelImage);
      expect(result.stdout.includes("COREJS_PRESENT"), `${name}: core-js`).toBe(modelImage);
      expect(result.stdout.trim().split("\n").at(-1), name).toBe("1000");
    });
  }, 120_000);

  it("a missing or bad variable stops each image's container with a message naming the variable", async () => {
    const resources = {
      AGENTRL_QUEUE_PREFIX: "ctr",
      AGENTRL_TRAJECTORY_BUCKET: "ctr-trajectories",
      AGENTRL_CHECKPOINT_BUCKET: "ctr-checkpoints",
    };
    const cases: Array<{ image: string; env: Record<string, string>; names: RegExp }> = [
      // An env worker without its task.
      {
        image: "functions",
        env: { ...resources, AGENTRL_ROLE: "env", AGENTRL_CONTROLLER_URL: "http://controller:5020" },
        names: /AGENTRL_TASK/,
      },
      {
        image: "functions",
        env: { ...resources, AGENTRL_ROLE: "controller", AGENTRL_PORT: "http" },
        names: /AGENTRL_PORT: must be a port number/,
      },
      {
        image: "trainer-cpu",
        env: { ...resources, AGENTRL_ROLE: "policy", AGENTRL_POLICY_POOL: "warm" },
        names: /AGENTRL_POLICY_POOL: must be current or stale/,
      },
      { image: "trainer-cpu", env: { AGENTRL_ROLE: "trainer" }, names: /AGENTRL_QUEUE_PREFIX/ },
    ];
    const results = await Promise.all(
      cases.map((c, i) =>
        runToCompletion(docker, {
          name: `agentrl-badenv-${i}-${process.pid}`,
          image: image(c.image),
          env: c.env,
          network: "none",
        }),
      ),
    );
    results.forEach((result, i) => {
      expect(result.status, `${cases[i]?.image}: ${result.stdout}${result.stderr}`).toBe(2);
      expect(result.stderr).toMatch(/invalid container environment/);
      expect(result.stderr).toMatch(cases[i]?.names as RegExp);
    });
  }, 120_000);

  it("the env pool starts from the functions image and the sweep runner from the trainer image, each from its environment", async () => {
    const pool = `agentrl-envpool-${process.pid}`;
    try {
      // Launching env workers needs a real ECS; starting does not (its driver is tested against moto's ECS).
      await startContainer(docker, {
        name: pool,
        image: image("functions"),
        network: "none",
        env: {
          AGENTRL_ROLE: "envpool",
          AGENTRL_QUEUE_PREFIX: "ctr",
          AGENTRL_TRAJECTORY_BUCKET: "ctr-trajectories",
          AGENTRL_CHECKPOINT_BUCKET: "ctr-checkpoints",
          AGENTRL_TASK: "db",
          AGENTRL_CONTROLLER_URL: "http://controller.agentrl.local:5020",
          AGENTRL_ECS_CLUSTER: "agentrl",
          AGENTRL_ENV_TASK_DEFINITION: "agentrl-env-db",
          AGENTRL_ENV_SUBNETS: "subnet-1",
          AGENTRL_ENV_SECURITY_GROUPS: "sg-1",
          AWS_REGION: "us-east-1",
        },
      });
      const started = await waitForLog(docker, pool, /"event":"started"/, 120_000);
      expect(JSON.parse(started)).toMatchObject({ role: "envpool", task: "db", driver: "ecs" });
      const stopped = await stopContainer(docker, pool, 30);
      expect(stopped.exitCode, "envpool stops on SIGTERM").toBe(0);
    } finally {
      await removeContainers(docker, [pool]);
    }
    const sweep = await runToCompletion(docker, {
      name: `agentrl-sweep-${process.pid}`,
      image: imageServing(plan, "sweep"),
      network: "none",
      env: {
        AGENTRL_ROLE: "sweep",
        AGENTRL_SWEEP_JSON: JSON.stringify({ name: "ctr", grid: { "trainer.learningRate": [0.001, 0.002] } }),
      },
      command: ["node", "bin/agentrl.mjs", "container", "--", "--dry-run"],
    });
    expect(imageServing(plan, "sweep")).toBe(image("trainer-cpu"));
    expect(sweep.status, sweep.stderr).toBe(0);
    expect(sweep.stdout).toContain("sweep ctr: 2 experiments");
  }, 180_000);

  describe("the deploy rehearsal with every role a container of its image, under enforced IAM", () => {
    let result: RehearsalResult | undefined;
    const seen = { uids: {} as Record<string, string>, workers: "", missingWorkerLogs: "", health: "", evaluation: "" };

    /** Looks into the running pipeline before the teardown: users, registrations, health, then the closing evaluation. */
    const beforeStop = async (run: RehearsalRun): Promise<void> => {
      const name = (definition: TaskRoleDefinition) => run.runner.containerName?.(definition) ?? "";
      const byKey = (key: string) => {
        const found = run.definitions.find((d) => d.key === key);
        if (!found) throw new Error(`no task definition ${key}`);
        return found;
      };
      const inside = async (key: string, script: string) =>
        (await exec(docker.bin, ["exec", name(byKey(key)), "node", "-e", script], { timeoutMs: 30_000 })).stdout;
      for (const definition of run.definitions)
        if (definition.role !== "trainer")
          seen.uids[definition.key] = (
            await exec(docker.bin, ["exec", name(definition), "id", "-u"], { timeoutMs: 30_000 })
          ).stdout.trim();
      // A worker the controller forgot (silent 35 s on a loaded machine) is back with its next
      // heartbeat: wait up to 30 s for every task, and keep the logs of an env role still missing.
      const missing = () => CONTAINER_TASKS.filter((task) => !seen.workers.includes(`"${task}"`));
      for (const deadline = Date.now() + 30_000; ; await sleep(1_000)) {
        seen.workers = await inside(
          "controller",
          "fetch('http://127.0.0.1:5020/api/list_workers').then(r=>r.text()).then(console.log)",
        );
        if (missing().length === 0 || Date.now() > deadline) break;
      }
      for (const task of missing()) {
        const logs = await exec(docker.bin, ["logs", "--tail", "40", name(byKey(`env:${task}`))], {
          timeoutMs: 30_000,
        });
        seen.missingWorkerLogs += `env:${task}'s last lines:\n${logs.stdout}${logs.stderr}\n`;
      }
      seen.health = await inside(
        "policy:current",
        "fetch('http://127.0.0.1:8000/health').then(r=>r.text()).then(console.log)",
      );
      // The closing evaluation needs the env workers alone: the roles that use them stop first.
      await Promise.all(["feeder", "rollout", "policy:current", "policy:stale"].map((key) => run.stopRole(byKey(key))));
      // As the operator runs it: a trainer-image container on the network, with the admin's keys
      // and the experiment config the trainer's task definition resolves to; the newest version
      // (evaluating v0 as well would run the same code on other weights).
      const aws = {
        AGENTRL_AWS_ENDPOINT: run.endpoint,
        AWS_REGION: "us-east-1",
        AWS_ACCESS_KEY_ID: run.admin.accessKeyId,
        AWS_SECRET_ACCESS_KEY: run.admin.secretAccessKey,
      };
      const experiment = await resolveContainerConfig(
        parseContainerEnv({ ...run.environmentOf(byKey("trainer")), ...aws }, "trainer"),
      );
      const configFile = join(tempDir("agentrl-ctr-eval-"), "experiment.json");
      writeFileSync(configFile, JSON.stringify(experiment));
      const evaluation = await runToCompletion(
        docker,
        {
          name: `agentrl-eval-${process.pid}`,
          image: imageServing(plan, "trainer"),
          env: aws,
          network: run.runner.network ?? "none",
          volumes: [`${configFile}:/config/experiment.json:ro`],
          command: [
            "sh",
            "-c",
            "node bin/agentrl.mjs eval --policy newest --controller http://controller.agentrl.local:5020 --config /config/experiment.json --n 1 --out /tmp/eval",
          ],
        },
        300_000,
      );
      if (evaluation.status !== 0) throw new Error(`the closing evaluation failed: ${evaluation.stderr.slice(-3000)}`);
      seen.evaluation = evaluation.stdout;
    };

    beforeAll(async () => {
      // The rehearsal's deployment with the env workers of two tasks and a closing evaluation.
      const config = parseConfig({
        ...REHEARSAL_CONFIG,
        tasks: { ...REHEARSAL_CONFIG.tasks, mix: CONTAINER_TASKS.map((name) => ({ name, concurrency: 4 })) },
        evaluation: { ...REHEARSAL_CONFIG.evaluation, instances: 1 },
      });
      result = await rehearse({
        templates: synthesizeForRehearsal(config),
        runner: containerRunner({ engine: docker, imageOf: (role) => imageServing(plan, role) }),
        timeoutMs: 600_000,
        log: (line) => process.stdout.write(`[containers] ${line}\n`),
        beforeStop,
      });
      process.stdout.write(
        `[containers] rehearsal ${result.seconds.toFixed(0)} s; ready after ${Object.entries(result.readySeconds)
          .map(([key, seconds]) => `${key} ${seconds.toFixed(1)} s`)
          .join(", ")}; stopped (exit code) in ${Object.entries(result.stops)
          .map(([key, stop]) => `${key} ${stop.seconds.toFixed(1)} s (${stop.exitCode})`)
          .join(", ")}\n`,
      );
    }, 1_200_000);

    it("runs every role as a container with its own task role's keys until the trainer publishes v1 and v2, with no denial", () => {
      expect(result?.failure).toBe("");
      expect(result?.denials).toEqual([]);
      expect(result?.versions).toEqual([0, 1, 2]);
      expect(Object.keys(result?.readySeconds ?? {}).sort()).toEqual(
        ["controller", "feeder", "policy:current", "policy:stale", "rollout", "trainer"]
          .concat(CONTAINER_TASKS.map((task) => `env:${task}`))
          .sort(),
      );
      // every role runs as the image's non-root user
      for (const [key, uid] of Object.entries(seen.uids)) expect(uid, key).toBe("1000");
      // the controller knows every env worker (they registered at their own container address)
      for (const task of CONTAINER_TASKS) expect(seen.workers, seen.missingWorkerLogs).toContain(`"${task}"`);
      expect(JSON.parse(seen.health)).toMatchObject({ status: "ok", pool: "current" });
    });

    it("each consumer dead-letters its poison message with the reason, and every grant but the trainer's ListBucket is needed", () => {
      expect(Object.keys(result?.deadLetters ?? {}).sort()).toEqual([
        "policy-events",
        "rollout-requests",
        "trajectories",
      ]);
      for (const letters of Object.values(result?.deadLetters ?? {})) expect(letters).toHaveLength(1);
      expect(result?.unneededGrants.map((g) => [g.role, g.action])).toEqual([["trainer", "s3:ListBucket"]]);
    });

    it("runs the closing evaluation of the newest version in a trainer-image container", () => {
      expect(seen.evaluation).toMatch(/v2/);
    });

    it("every role stops on SIGTERM within its task definition's stop timeout, without being killed", () => {
      const stops = result?.stops ?? {};
      expect(Object.keys(stops).sort()).toEqual(
        Object.keys(result?.readySeconds ?? {})
          .filter((key) => key !== "trainer")
          .sort(),
      );
      for (const [key, stop] of Object.entries(stops)) {
        expect(stop.exitCode, key).toBe(0);
        expect(stop.seconds, key).toBeLessThan(stop.limitSeconds);
      }
    });
  });
});
