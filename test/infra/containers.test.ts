import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CloudFormationClient,
  CreateStackCommand,
  DescribeStacksCommand,
  ListExportsCommand,
} from "@aws-sdk/client-cloudformation";
import { Template } from "aws-cdk-lib/assertions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { taskAddress } from "../../cli/commands/container.ts";
import { BASE_CHECKPOINT_DIR } from "../../cli/launch/pipeline.ts";
import { buildAgentRlApp } from "../../infra/agentRlApp.ts";
import { type BuiltImage, buildImage, type PlannedImage, plannedImages } from "../../infra/images/build.ts";
import { type ContainerEngine, detectEngine, exec } from "../../infra/images/engine.ts";
import { ensureNodeBase } from "../../infra/images/standInBase.ts";
import { CONTAINER_ROLES, parseContainerEnv, resolveContainerConfig } from "../../shared/config/containerEnv.ts";
import { loadConfig, parseConfig } from "../../shared/config/index.ts";
import { copyVersion, listVersions } from "../../shared/protocol/checkpoints.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";
import { tempDir } from "../support/tmp.ts";
import {
  type ContainerSpec,
  containerLogs,
  removeContainers,
  runToCompletion,
  startContainer,
  stopContainer,
  waitForExit,
  waitForLog,
} from "./containerHelpers.ts";
import { testApp } from "./synth.ts";
import { type TaskEnvironment, type TemplateJson, taskEnvironments, withoutBootstrapRule } from "./taskEnvironments.ts";

/**
 * Issue 25: the images are built and run, not just parsed. Needs podman (or a Docker daemon);
 * without one this whole file is skipped, by name, and the suite still passes.
 */
const engine = await detectEngine();
if (!engine)
  process.stderr.write(
    "containers.test.ts: SKIPPED 'container images, built and run' - neither podman nor a Docker daemon answers " +
      "or AGENTRL_CONTAINER_ENGINE=none (apt-get install podman runc debootstrap to run it)\n",
  );

/** Files and folders the .dockerignore keeps out of every image's /app. */
/** The quickstart tasks the pipeline test runs as env containers. */
const CONTAINER_TASKS = ["db", "os"];
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
      `for p in ${KEPT_OUT.join(" ")} node_modules/vitest node_modules/typescript node_modules/@biomejs node_modules/aws-cdk-lib node_modules/pino/test; do test -e "$p" && echo "LEAKED $p"; done`,
      "find . -name '*.test.ts' -not -path './node_modules/*' | sed 's/^/LEAKED /'",
      "test -f bin/agentrl.mjs && test -f shared/config/containerEnv.ts && echo APP_OK",
      // better-sqlite3 is compiled in the build (against the image's own node headers).
      "node -e \"new (require('better-sqlite3'))(':memory:').exec('select 1'); console.log('SQLITE_OK')\"",
      // runs/ and .agentrl/ start empty (nothing of the host's runs) and are the node user's to write.
      'test -z "$(ls -A runs)$(ls -A .agentrl)" && touch runs/probe .agentrl/probe && echo RUNS_EMPTY_WRITABLE',
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

  describe("the quickstart pipeline as containers against moto, each with its ECS task definition's environment", () => {
    const suffix = `${process.pid}`;
    const network = `agentrl-pipeline-${suffix}`;
    const started: string[] = [];
    let moto: MotoServer | undefined;
    let tasks: TaskEnvironment[] = [];
    /** What a task definition cannot say: the AWS-API endpoint (moto) and the credentials ECS would hand the task. */
    let awsEnv: Record<string, string> = {};
    const readySeconds = new Map<string, number>();
    const stops = new Map<string, { seconds: number; exitCode: number }>();

    const container = (task: TaskEnvironment): ContainerSpec => ({
      name: `agentrl-${task.name}-${suffix}`,
      image: image(task.role === "policy" || task.role === "trainer" ? "trainer-cpu" : "functions"),
      env: { ...task.environment, ...awsEnv },
      network,
      // Cloud Map names of the ECS services (controller.agentrl.local, policy-current.agentrl.local).
      aliases: [`${task.name}.agentrl.local`],
    });
    const byName = (name: string): TaskEnvironment => {
      const task = tasks.find((t) => t.name === name);
      if (!task) throw new Error(`no task definition for ${name} (have ${tasks.map((t) => t.name).join(", ")})`);
      return task;
    };
    const startRole = async (task: TaskEnvironment, ready: RegExp): Promise<void> => {
      const spec = container(task);
      const t0 = Date.now();
      await startContainer(docker, spec);
      started.push(spec.name);
      await waitForLog(docker, spec.name, ready, 240_000);
      readySeconds.set(task.name, (Date.now() - t0) / 1000);
    };

    /** SIGTERM as ECS sends it, SIGKILL after the task definition's stopTimeout; records how it went. */
    const stopRoles = async (names: readonly string[]): Promise<void> => {
      await Promise.all(
        names.map(async (name) => {
          const task = byName(name);
          stops.set(name, await stopContainer(docker, container(task).name, task.stopTimeoutSeconds));
        }),
      );
    };

    beforeAll(async () => {
      // The quickstart experiment, shortened: two of its tasks (every task runs from the same
      // functions image, so more env containers would test nothing new), its model and base
      // checkpoint, two trainer steps.
      const quickstart = await loadConfig(join(import.meta.dirname, "../../configs/quickstart.yaml"));
      const config = parseConfig({
        ...quickstart,
        experimentId: "containers",
        tasks: { ...quickstart.tasks, mix: quickstart.tasks.mix.filter((t) => CONTAINER_TASKS.includes(t.name)) },
        transport: { ...quickstart.transport, queuePrefix: `ctr${suffix}`, visibilityTimeoutSeconds: 60 },
        rollout: { ...quickstart.rollout, groupSize: 2, maxTurns: 3, maxTokensPerTurn: 24, concurrency: 4 },
        trainer: { ...quickstart.trainer, batchSize: 2, maxSteps: 2, warmupFactor: 1 },
        evaluation: { ...quickstart.evaluation, instances: 1 },
      });
      const app = testApp();
      const stacks = buildAgentRlApp(app, { config, repositoryRoot: join(import.meta.dirname, "../..") });
      const templates = {
        stores: Template.fromStack(stacks.stores).toJSON() as TemplateJson,
        messaging: Template.fromStack(stacks.messaging).toJSON() as TemplateJson,
        compute: Template.fromStack(stacks.compute).toJSON() as TemplateJson,
      };

      // moto on this machine's own address: containers on the bridge network reach it there.
      const hostAddress = taskAddress();
      expect(hostAddress, "a non-internal IPv4 address containers can reach").not.toBe("127.0.0.1");
      moto = await startMoto(55_000, hostAddress);
      const cfn = new CloudFormationClient({ endpoint: moto.endpoint, region: "us-east-1" });
      const exports = new Map<string, string>();
      try {
        for (const [name, template] of [
          [stacks.stores.stackName, templates.stores],
          [stacks.messaging.stackName, templates.messaging],
        ] as const) {
          await cfn.send(
            new CreateStackCommand({ StackName: name, TemplateBody: JSON.stringify(withoutBootstrapRule(template)) }),
          );
          const described = await cfn.send(new DescribeStacksCommand({ StackName: name }));
          expect(described.Stacks?.[0]?.StackStatus).toBe("CREATE_COMPLETE");
        }
        for (const exported of (await cfn.send(new ListExportsCommand({}))).Exports ?? [])
          if (exported.Name && exported.Value) exports.set(exported.Name, exported.Value);
      } finally {
        cfn.destroy();
      }
      // Env workers start here as their pool would launch them; the pools themselves need a real ECS
      // (their drivers are tested against moto's ECS in test/envpool/ecs.test.ts).
      tasks = taskEnvironments(templates.compute, { exports, pseudoParameters: { "AWS::Region": "us-east-1" } }, [
        "envpool",
      ]);
      awsEnv = {
        AGENTRL_AWS_ENDPOINT: moto.endpoint,
        AWS_REGION: "us-east-1",
        AWS_ACCESS_KEY_ID: "testing",
        AWS_SECRET_ACCESS_KEY: "testing",
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
      };

      // The base policy as v0 in the deployed checkpoint bucket (what an operator seeds before a run).
      const trainerConfig = await resolveContainerConfig(
        parseContainerEnv({ ...byName("trainer").environment, ...awsEnv }, "trainer"),
        {},
      );
      const transport = await createTransport(trainerConfig.transport);
      try {
        await copyVersion(new LocalObjectStore(BASE_CHECKPOINT_DIR), transport.store("checkpoints"), 0);
      } finally {
        await transport.close();
      }
      await exec(docker.bin, ["network", "create", network], { timeoutMs: 60_000 });
    }, 300_000);

    afterAll(async () => {
      if (!engine) return;
      await removeContainers(docker, started);
      await exec(docker.bin, ["network", "rm", "-f", network], { timeoutMs: 60_000 }).catch(() => undefined);
      await moto?.stop();
    }, 180_000);

    it("runs every role as a container until the trainer publishes its versions, then the closing evaluation", async () => {
      const names = tasks.map((t) => t.name).sort();
      expect(names).toEqual(
        ["controller", "feeder", "policy-current", "policy-stale", "rollout", "trainer"]
          .concat(CONTAINER_TASKS.map((t) => `env-${t}`))
          .sort(),
      );
      await startRole(byName("controller"), /"event":"listening"/);
      await Promise.all([
        ...tasks.filter((t) => t.role === "env").map((t) => startRole(t, /"event":"listening"/)),
        startRole(byName("policy-current"), /"event":"listening"/),
        startRole(byName("policy-stale"), /"event":"listening"/),
      ]);
      await Promise.all(["trainer", "feeder", "rollout"].map((n) => startRole(byName(n), /"event":"started"/)));

      // Every role runs as the image's non-root user.
      for (const name of started) {
        const id = await exec(docker.bin, ["exec", name, "id", "-u"], { timeoutMs: 30_000 });
        expect(id.stdout.trim(), name).toBe("1000");
      }
      // The controller knows every env worker (they registered at their own task address).
      const workers = await exec(
        docker.bin,
        [
          "exec",
          `agentrl-controller-${suffix}`,
          "node",
          "-e",
          "fetch('http://127.0.0.1:5020/api/list_workers').then(r=>r.text()).then(console.log)",
        ],
        { timeoutMs: 30_000 },
      );
      for (const task of CONTAINER_TASKS) expect(workers.stdout).toContain(`"${task}"`);

      const trainer = `agentrl-trainer-${suffix}`;
      expect(await waitForExit(docker, trainer, 600_000), await containerLogs(docker, trainer)).toBe(0);
      const trainerLog = await containerLogs(docker, trainer);
      expect(trainerLog).toMatch(/"event":"step","step":2,"version":2/);

      const policyHealth = await exec(
        docker.bin,
        [
          "exec",
          `agentrl-policy-current-${suffix}`,
          "node",
          "-e",
          "fetch('http://127.0.0.1:8000/health').then(r=>r.text()).then(console.log)",
        ],
        { timeoutMs: 30_000 },
      );
      expect(JSON.parse(policyHealth.stdout)).toMatchObject({ status: "ok", pool: "current" });

      await stopRoles(["feeder", "rollout", "policy-current", "policy-stale"]);

      // The closing evaluation, as a container of the trainer image on the same network (the newest
      // version; evaluating v0 as well would run the same code on other weights).
      const evalConfig = await resolveContainerConfig(
        parseContainerEnv({ ...byName("trainer").environment, ...awsEnv }, "trainer"),
      );
      const configFile = join(tempDir("agentrl-ctr-eval-"), "experiment.json");
      writeFileSync(configFile, JSON.stringify(evalConfig));
      const evaluate = (policy: string) =>
        `node bin/agentrl.mjs eval --policy ${policy} --controller http://controller.agentrl.local:5020 --config /config/experiment.json --n 1 --out /tmp/eval`;
      const evaluation = await runToCompletion(
        docker,
        {
          name: `agentrl-eval-${suffix}`,
          image: image("trainer-cpu"),
          env: awsEnv,
          network,
          volumes: [`${configFile}:/config/experiment.json:ro`],
          command: ["sh", "-c", evaluate("newest")],
        },
        300_000,
      );
      expect(evaluation.status, evaluation.stderr).toBe(0);
      expect(evaluation.stdout).toMatch(/v2/);

      const transport = await createTransport(evalConfig.transport);
      try {
        expect([...(await listVersions(transport.store("checkpoints")))].sort()).toEqual([0, 1, 2]);
      } finally {
        await transport.close();
      }
    }, 900_000);

    it("every role stops on SIGTERM within its task definition's stop timeout, without being killed", async () => {
      // The env workers and the controller, last (the other roles were stopped before the evaluation).
      await stopRoles([...tasks.filter((t) => t.role === "env").map((t) => t.name), "controller"]);
      expect([...stops.keys()].sort()).toEqual(
        tasks
          .map((t) => t.name)
          .filter((n) => n !== "trainer")
          .sort(),
      );
      for (const [name, stop] of stops) {
        expect(stop.exitCode, name).not.toBe(137);
        expect(stop.seconds, name).toBeLessThan(byName(name).stopTimeoutSeconds);
      }
      process.stdout.write(
        `[containers] ready after ${[...readySeconds].map(([n, s]) => `${n} ${s.toFixed(1)} s`).join(", ")}; ` +
          `stopped (exit code) in ${[...stops].map(([n, s]) => `${n} ${s.seconds.toFixed(1)} s (${s.exitCode})`).join(", ")}\n`,
      );
    }, 300_000);
  });
});
