import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Stack } from "aws-cdk-lib";
import { afterAll, describe, expect, it } from "vitest";
import { RoleImages } from "../../infra/constructs/images.ts";
import { CONTAINER_COMMAND } from "../../infra/constructs/roleService.ts";
import { plannedImages } from "../../infra/images/build.ts";
import { CONTAINER_ROLES } from "../../shared/config/containerEnv.ts";
import { freePort } from "../../shared/net.ts";
import { type CliResult, runProcess } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";
import { REPOSITORY_ROOT, testApp } from "./synth.ts";

/** The CMD (exec form) and the roles label of a Dockerfile's final stage. */
function parseDockerfile(file: string): { cmd: string[]; roles: string[] } {
  const text = readFileSync(join(REPOSITORY_ROOT, file), "utf8");
  const cmds = [...text.matchAll(/^CMD\s+(\[.*\])\s*$/gm)];
  const last = cmds[cmds.length - 1];
  if (!last?.[1]) throw new Error(`${file} has no exec-form CMD`);
  const roles = /^LABEL\s+org\.agentrl\.roles="([^"]*)"/m.exec(text)?.[1]?.split(/\s+/) ?? [];
  return { cmd: JSON.parse(last[1]) as string[], roles };
}

const CORE_IMAGES = ["functions/Dockerfile", "trainer-image/Dockerfile"];

const resources = {
  AGENTRL_QUEUE_PREFIX: "imgtest",
  AGENTRL_TRAJECTORY_BUCKET: "imgtest-trajectories",
  AGENTRL_CHECKPOINT_BUCKET: "imgtest-checkpoints",
  AGENTRL_CONFIG_JSON: JSON.stringify({ tasks: { mix: [{ name: "example" }] } }),
  AGENTRL_LOG_LEVEL: "warn",
};

const children: ChildProcess[] = [];
afterAll(async () => {
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
          setTimeout(() => {
            child.kill("SIGKILL");
            resolve();
          }, 5000).unref();
        }),
    ),
  );
});

/** The containers' temp dir (each writes its resolved config there), removed after this file. */
const containerTmp = tempDir("agentrl-images-");

/** Runs an image's CMD here under plain node and resolves with the first stdout line matching `ready`. */
function startCmd(cmd: string[], env: Record<string, string>, extraArgs: string[], ready: RegExp): Promise<string> {
  const [command, ...args] = cmd;
  const child = spawn(command === "node" ? process.execPath : (command as string), [...args, ...extraArgs], {
    cwd: REPOSITORY_ROOT,
    env: { ...process.env, ...env, TMPDIR: containerTmp },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stdout = "";
  let stderr = "";
  return new Promise((resolve, reject) => {
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split("\n").find((l) => ready.test(l));
      if (line) resolve(line);
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.once("exit", (code) => reject(new Error(`${cmd.join(" ")} exited ${code} before ready: ${stderr}${stdout}`)));
  });
}

/** Runs an image's CMD to completion (asynchronously, so several can run side by side). */
function runCmd(cmd: string[], env: Record<string, string>, extraArgs: string[]): Promise<CliResult> {
  const [command, ...args] = cmd;
  return runProcess(command === "node" ? process.execPath : (command as string), [...args, ...extraArgs], {
    cwd: REPOSITORY_ROOT,
    env: { ...env, TMPDIR: containerTmp },
  });
}

// Each test starts several Node processes (tsx + a role) side by side; on a contended 2-core
// machine that alone can take a minute, hence the longer per-test limits below.
describe("images", () => {
  it("the core images exist, start the launcher that infra runs, and together serve every role", () => {
    const served = new Set<string>();
    for (const file of CORE_IMAGES) {
      expect(existsSync(join(REPOSITORY_ROOT, file)), file).toBe(true);
      const { cmd, roles } = parseDockerfile(file);
      expect(cmd, file).toEqual(CONTAINER_COMMAND);
      expect(existsSync(join(REPOSITORY_ROOT, cmd[1] as string)), `${file}: ${cmd[1]}`).toBe(true);
      for (const role of roles) {
        expect(CONTAINER_ROLES as readonly string[], `${file} label`).toContain(role);
        served.add(role);
      }
    }
    expect([...served].sort()).toEqual([...CONTAINER_ROLES].sort());
    expect(readFileSync(join(REPOSITORY_ROOT, "trainer-image/Dockerfile"), "utf8")).toMatch(
      /npm install --no-save[^\n]*@tensorflow\/tfjs-node-gpu/,
    );
  });

  it("a bad or missing variable stops a container with a message naming it", async () => {
    const { cmd } = parseDockerfile("functions/Dockerfile");
    const [missing, bad] = await Promise.all([
      runCmd(cmd, { ...resources, AGENTRL_ROLE: "env", AGENTRL_CONTROLLER_URL: "http://127.0.0.1:1" }, []),
      runCmd(cmd, { ...resources, AGENTRL_ROLE: "controller", AGENTRL_PORT: "http" }, []),
    ]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/invalid container environment: AGENTRL_TASK/);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/AGENTRL_PORT: must be a port number/);
  });

  it("the sweep runner, policy servers, trainer, feeder and rollout workers start from their environment", async () => {
    const sweep = JSON.stringify({ name: "img", grid: { "trainer.learningRate": [0.001, 0.002] } });
    const extra: Record<string, Record<string, string>> = {
      policy: { AGENTRL_POLICY_POOL: "stale" },
      trainer: {},
      feeder: {},
      rollout: {
        AGENTRL_CONTROLLER_URL: "http://127.0.0.1:1",
        AGENTRL_POLICY_CURRENT_URL: "http://127.0.0.1:2",
        AGENTRL_POLICY_STALE_URL: "http://127.0.0.1:3",
      },
    };
    const imageOf = (role: string) =>
      role === "policy" || role === "trainer" ? "trainer-image/Dockerfile" : "functions/Dockerfile";
    expect(parseDockerfile("trainer-image/Dockerfile").roles).toContain("sweep");
    const runs = await Promise.all([
      runCmd(parseDockerfile("trainer-image/Dockerfile").cmd, { AGENTRL_ROLE: "sweep", AGENTRL_SWEEP_JSON: sweep }, [
        "--",
        "--dry-run",
      ]),
      // `--help` after the role's own arguments: the subcommand and every flag the launcher passes must exist.
      ...Object.entries(extra).map(([role, env]) => {
        const { cmd, roles } = parseDockerfile(imageOf(role));
        expect(roles).toContain(role);
        return runCmd(cmd, { ...resources, ...env, AGENTRL_ROLE: role }, ["--", "--help"]);
      }),
    ]);
    const [sweepRun, ...roleRuns] = runs;
    expect(sweepRun?.stderr).toBe("");
    expect(sweepRun?.stdout).toContain("sweep img: 2 experiments");
    Object.keys(extra).forEach((role, i) => {
      const run = roleRuns[i];
      expect(run?.stdout, `${role}: ${run?.stderr}`).toMatch(new RegExp(`Usage: agentrl ${role} `));
      expect(run?.status, role).toBe(0);
      expect(run?.stdout, role).toContain("--config");
    });
  }, 120_000);

  it("the controller, an env worker of every shipped task and an env pool (all from the functions image) start without TF.js, and the workers register", async () => {
    const functions = parseDockerfile("functions/Dockerfile").cmd;
    // Module resolution as in the functions image, which leaves TF.js out: a role that imported it would fail here.
    const withoutTfjs = { NODE_OPTIONS: `--import ${join(REPOSITORY_ROOT, "test/support/withoutTfjs.mjs")}` };
    const refused = await runProcess(
      process.execPath,
      ["-e", 'import("@tensorflow/tfjs").catch((e) => { console.log(e.code); })'],
      {
        cwd: REPOSITORY_ROOT,
        env: withoutTfjs,
      },
    );
    expect(refused.stdout.trim()).toBe("ERR_MODULE_NOT_FOUND");
    const controllerPort = await freePort();
    const line = await startCmd(
      functions,
      {
        ...resources,
        ...withoutTfjs,
        AGENTRL_ROLE: "controller",
        AGENTRL_HOST: "127.0.0.1",
        AGENTRL_PORT: String(controllerPort),
      },
      [],
      /"event":"listening"/,
    );
    expect((JSON.parse(line) as { url: string }).url).toContain(String(controllerPort));
    const controllerUrl = `http://127.0.0.1:${controllerPort}`;
    const tasks = ["example", "db"];
    await Promise.all(
      tasks.map(async (task) =>
        // An env worker of the functions image, configured only through the typed environment.
        startCmd(
          functions,
          {
            ...resources,
            ...withoutTfjs,
            AGENTRL_CONFIG_JSON: JSON.stringify({ tasks: { mix: tasks.map((name) => ({ name })) } }),
            AGENTRL_ROLE: "env",
            AGENTRL_TASK: task,
            AGENTRL_CONTROLLER_URL: controllerUrl,
            AGENTRL_HOST: "127.0.0.1",
            AGENTRL_ADVERTISE_HOST: "127.0.0.1",
            AGENTRL_PORT: String(await freePort()),
          },
          [],
          /"event":"listening"/,
        ),
      ),
    );
    let workers = "";
    for (let attempt = 0; attempt < 100 && !tasks.every((task) => workers.includes(`"${task}"`)); attempt++) {
      workers = await (await fetch(`${controllerUrl}/api/list_workers`)).text();
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const task of tasks) expect(workers).toContain(`"${task}"`);
    // An env pool with its ECS driver (launching needs a real ECS; starting does not).
    const pool = await startCmd(
      functions,
      {
        ...resources,
        ...withoutTfjs,
        AGENTRL_ROLE: "envpool",
        AGENTRL_TASK: "example",
        AGENTRL_CONTROLLER_URL: controllerUrl,
        AGENTRL_ECS_CLUSTER: "agentrl",
        AGENTRL_ENV_TASK_DEFINITION: "agentrl-env-example",
        AGENTRL_ENV_SUBNETS: "subnet-1",
        AGENTRL_ENV_SECURITY_GROUPS: "sg-1",
        AGENTRL_AWS_ENDPOINT: "http://127.0.0.1:1",
        AWS_REGION: "us-east-1",
      },
      [],
      /"event":"started"/,
    );
    expect(JSON.parse(pool)).toMatchObject({ role: "envpool", task: "example", driver: "ecs" });
  }, 180_000);
});

describe("which images the app builds (issue 25: one image for every task)", () => {
  it("serves every task's env worker from the functions image unless the task ships its own Dockerfile", () => {
    // A repository with a task that needs its own image (system packages, a simulator).
    const root = tempDir("agentrl-images-root-");
    for (const file of ["functions/Dockerfile", "trainer-image/Dockerfile", RoleImages.envDockerfile("sim")]) {
      mkdirSync(join(root, file, ".."), { recursive: true });
      writeFileSync(join(root, file), "FROM scratch\n");
    }
    const images = new RoleImages(new Stack(testApp(), "Images"), "Images", { repositoryRoot: root });
    expect(images.env("db")).toBe(images.functions);
    expect(images.env("os")).toBe(images.functions);
    expect(images.env("sim")).not.toBe(images.functions);
    expect(images.env("sim")).toBe(images.env("sim"));
    expect(images.builds.map((b) => b.file)).toEqual([
      "functions/Dockerfile",
      "trainer-image/Dockerfile",
      "env-images/sim/Dockerfile",
    ]);
    // A sweep asks for the trainer's CPU variant: one more build of the same Dockerfile, made once.
    expect(images.trainerCpu).toBe(images.trainerCpu);
    expect(images.trainerCpu).not.toBe(images.trainer);
    expect(images.builds.at(-1)).toEqual({ file: "trainer-image/Dockerfile", buildArgs: { TFJS_BACKEND: "wasm" } });
    expect(images.builds).toHaveLength(4);
  });

  it("the shipped tasks need no image of their own, and the build context leaves out what images must not hold", async () => {
    // The quickstart app runs all five tasks.
    const planned = await plannedImages();
    expect(planned.map((b) => [b.name, b.file])).toEqual([
      ["functions", "functions/Dockerfile"],
      ["trainer-cpu", "trainer-image/Dockerfile"],
    ]);
    const ignored = readFileSync(join(REPOSITORY_ROOT, ".dockerignore"), "utf8")
      .split("\n")
      .filter((line) => line.trim() !== "" && !line.startsWith("#"));
    for (const pattern of ["node_modules", "**/node_modules", ".git", "test", "bench", "runs", ".agentrl", ".env"])
      expect(ignored).toContain(pattern);
    // BuildKit prefers <Dockerfile>.dockerignore to the root file: none may exist, or the root one is bypassed.
    for (const file of ["functions/Dockerfile", "trainer-image/Dockerfile"])
      expect(existsSync(join(REPOSITORY_ROOT, `${file}.dockerignore`)), file).toBe(false);
  });
});
