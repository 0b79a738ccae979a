/**
 * The deploy rehearsal: what `cdk deploy` would do, offline, against a moto server that enforces
 * IAM. It synthesizes the app; deploys AgentRlStores and AgentRlMessaging through moto's
 * CloudFormation as an admin user; creates one IAM user per ECS task role carrying exactly the
 * policy statements of the synthesized AgentRlCompute template (imports resolved against the
 * deployed stacks' exports); seeds v0 with `agentrl policy publish` as docs/deploy.md's deploy steps
 * do; sends one poison message to every queue a role consumes (poison.ts); then runs every role
 * through `agentrl container` with the container environment its task definition sets and its
 * own user's credentials, as a process or as a container of its image (runners.ts), until the
 * trainer has published the requested versions and every poison message sits in its dead-letter
 * queue with its reason. Any IAM denial (or role-access violation) ends it, naming role, action
 * and resource. At the end every role is stopped as ECS stops a task (SIGTERM, SIGKILL after its
 * stop timeout) and how long it took is reported.
 *
 * What it does not rehearse: the VPC, ECS and Cloud Map (moto runs no tasks): the process runner
 * sets the network addresses itself, the container runner puts the containers on one bridge
 * network with the Cloud Map names as aliases.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { CloudFormationClient, CreateStackCommand, DescribeStacksCommand } from "@aws-sdk/client-cloudformation";
import { CreateAccessKeyCommand, CreateUserCommand, IAMClient, PutUserPolicyCommand } from "@aws-sdk/client-iam";
import { ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { GetQueueAttributesCommand, GetQueueUrlCommand, SQSClient } from "@aws-sdk/client-sqs";
import { App } from "aws-cdk-lib";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { sleep } from "../../shared/sleep.ts";
import { AwsQueue } from "../../shared/transport/aws.ts";
import type { DeadLetter, QueueName } from "../../shared/transport/types.ts";
import { buildAgentRlApp } from "../agentRlApp.ts";
import { failurePathReason, type Grant, grantsOf, parseAuthorizationLog, unneededGrants } from "./grantUse.ts";
import { type AccessKey, REGION, startEnforcingMoto } from "./moto.ts";
import { deadLetterProblem, poisonMessages } from "./poison.ts";
import { processRunner, REHEARSAL_GATEWAY_ADMIN_KEY, type RoleRunner, type RoleStop } from "./runners.ts";
import {
  type CfnTemplate,
  type PolicyStatement,
  resolveEnvironment,
  resolveIntrinsics,
  type TaskRoleDefinition,
  taskRoleDefinitions,
  withoutBootstrapCheck,
} from "./template.ts";

export const REPOSITORY_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const AGENTRL_BIN = join(REPOSITORY_ROOT, "bin/agentrl.mjs");

/** A deployment small enough to rehearse on 2 cores: one task, groups of 2, 2 trainer steps. */
/** How long after the run the rehearsal waits for every poison message to reach its dead-letter queue. */
const DEAD_LETTER_WAIT_MS = 60_000;

export const REHEARSAL_CONFIG: ExperimentConfig = parseConfig({
  experimentId: "rehearsal",
  seed: 1,
  transport: { queuePrefix: "rehearsal", visibilityTimeoutSeconds: 30 },
  tasks: { mix: [{ name: "db", concurrency: 4 }] },
  rollout: { groupSize: 2, maxTurns: 2, maxTokensPerTurn: 16, workers: 1, concurrency: 4 },
  trainer: { batchSize: 1, maxSteps: 2, warmupFactor: 1, maxStaleness: 2 },
  policy: { pollSeconds: 1 },
  evaluation: { instances: 0 },
});

/**
 * The same deployment with the gateway (`gateway.port`): the rehearsal then also runs one agent
 * session through it (a chat completion, a reward, the end), so every grant of its row is used.
 */
export const REHEARSAL_GATEWAY_CONFIG: ExperimentConfig = parseConfig({
  ...REHEARSAL_CONFIG,
  // one step more: the gateway's group fills a batch early, and the trainer must still live long
  // enough to receive its poison message maxReceiveCount times
  trainer: { ...REHEARSAL_CONFIG.trainer, maxSteps: 3 },
  gateway: { port: 8080, baselineGroupSize: 1 },
});

/** The synthesized templates of the three stacks the rehearsal uses. */
export interface RehearsalTemplates {
  readonly config: ExperimentConfig;
  readonly stores: CfnTemplate;
  readonly messaging: CfnTemplate;
  readonly compute: CfnTemplate;
}

/** Synthesizes the app as `cdk synth` would (cdk.json's feature flags; assets fingerprinted, not staged). */
export function synthesizeForRehearsal(config: ExperimentConfig = REHEARSAL_CONFIG): RehearsalTemplates {
  const cdkJson = JSON.parse(readFileSync(join(REPOSITORY_ROOT, "cdk.json"), "utf8")) as {
    context?: Record<string, unknown>;
  };
  const outdir = mkdtempSync(join(tmpdir(), "agentrl-rehearse-cdk-"));
  // the templates are read into memory; the cloud assembly on disk is not needed after
  try {
    const app = new App({ outdir, context: { ...cdkJson.context, "aws:cdk:disable-asset-staging": true } });
    buildAgentRlApp(app, { config, repositoryRoot: REPOSITORY_ROOT });
    const assembly = app.synth();
    const template = (name: string) => assembly.getStackByName(name).template as CfnTemplate;
    return {
      config,
      stores: template("AgentRlStores"),
      messaging: template("AgentRlMessaging"),
      compute: template("AgentRlCompute"),
    };
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

/** One refused call, from a role's stderr. */
export interface Denial {
  readonly role: string;
  readonly action: string;
  readonly resource: string;
}

export interface RehearsalOptions {
  readonly templates: RehearsalTemplates;
  /** Removes one action of one role's policy before the user is created (the negative rehearsal). */
  readonly dropGrant?: { readonly roleKey: string; readonly action: string; readonly resource: RegExp };
  /** Progress lines. @default stderr */
  readonly log?: (line: string) => void;
  /** Give up after this long. @default 300 s */
  readonly timeoutMs?: number;
  /** How the roles run. @default processRunner() */
  readonly runner?: RoleRunner;
  /**
   * Called once the run has passed its checks, before the roles are stopped (e.g. to look into
   * the running containers or run an evaluation against the controller); what it throws is
   * thrown by `rehearse` after the teardown.
   */
  readonly beforeStop?: (run: RehearsalRun) => Promise<void>;
  /**
   * Stops the rehearsal early (a SIGINT or SIGTERM to `npm run rehearse`): a run under way fails
   * with "stopped by <reason>", and the roles and the moto server are stopped as at its end.
   */
  readonly signal?: AbortSignal;
}

/** What {@link RehearsalOptions.beforeStop} sees of a run. */
export interface RehearsalRun {
  readonly endpoint: string;
  /** Keys of the deploying admin (Action * on *). */
  readonly admin: AccessKey;
  readonly definitions: readonly TaskRoleDefinition[];
  /** A role's environment as its task definition sets it, resolved against the deployed stacks. */
  environmentOf(definition: TaskRoleDefinition): Record<string, string>;
  readonly runner: RoleRunner;
  /** Stops one role now, as the teardown would (recorded in the result's `stops`). */
  stopRole(definition: TaskRoleDefinition): Promise<RoleStop>;
}

export interface RehearsalResult {
  readonly passed: boolean;
  /** Why not, in one paragraph (empty when passed). */
  readonly failure: string;
  readonly denials: readonly Denial[];
  /** Versions in the deployed checkpoint bucket at the end. */
  readonly versions: readonly number[];
  /** The dead letters of each consumed queue at the end (its poison message, see poison.ts). */
  readonly deadLetters: Readonly<Partial<Record<QueueName, readonly DeadLetter[]>>>;
  /**
   * Grants no request of the run needed (see grantUse.ts), each with why it is there (only
   * s3:ListBucket of a role that read no missing key). Any other unneeded grant fails the
   * rehearsal; every needed one, dropped, denies a request of the run.
   */
  readonly unneededGrants: ReadonlyArray<Grant & { readonly reason: string | undefined }>;
  /** Seconds from each role's start to its ready line (`listening` or `started`), by role key. */
  readonly readySeconds: Readonly<Record<string, number>>;
  /** How each role still running at the end stopped on SIGTERM, by role key (the trainer exits by itself). */
  readonly stops: Readonly<Record<string, RoleStop>>;
  readonly seconds: number;
}

/** Runs the rehearsal once (a fresh moto server each time). */
export async function rehearse(options: RehearsalOptions): Promise<RehearsalResult> {
  const started = Date.now();
  const log = options.log ?? ((line: string) => process.stderr.write(`[rehearse] ${line}\n`));
  const { config } = options.templates;
  const runner = options.runner ?? processRunner();
  const running = new Map<TaskRoleDefinition, ChildProcess>();
  /** The last 3,000 characters each role wrote to stderr (reported when a role has to be killed). */
  const stderrTails = new Map<string, string>();
  /** Roles the rehearsal is stopping (their exit is expected). */
  const stopping = new Set<string>();
  const stops: Record<string, RoleStop> = {};
  let timeout: ReturnType<typeof setTimeout> | undefined;
  const authorizationLog = join(mkdtempSync(join(tmpdir(), "agentrl-rehearse-moto-")), "authorized.jsonl");
  const moto = await startEnforcingMoto(authorizationLog, runner.motoHost);
  const denials: Denial[] = [];
  let failure = "";
  const { admin } = moto;
  const clients = { region: REGION, endpoint: moto.endpoint, credentials: admin };
  const cfn = new CloudFormationClient(clients);
  const iam = new IAMClient(clients);
  const s3 = new S3Client({ ...clients, forcePathStyle: true });
  const sqs = new SQSClient(clients);
  try {
    options.signal?.throwIfAborted();
    // 1. The stateful stacks, through CloudFormation, as the admin.
    const exported = new Map<string, string>();
    const outputs = new Map<string, string>();
    for (const [name, template] of [
      ["AgentRlStores", options.templates.stores],
      ["AgentRlMessaging", options.templates.messaging],
    ] as const) {
      await cfn.send(
        new CreateStackCommand({ StackName: name, TemplateBody: JSON.stringify(withoutBootstrapCheck(template)) }),
      );
      const stack = (await cfn.send(new DescribeStacksCommand({ StackName: name }))).Stacks?.[0];
      if (stack?.StackStatus !== "CREATE_COMPLETE")
        throw new Error(`${name}: ${stack?.StackStatus} ${stack?.StackStatusReason ?? ""}`);
      for (const output of stack.Outputs ?? []) {
        if (output.ExportName && output.OutputValue) exported.set(output.ExportName, output.OutputValue);
        if (output.OutputKey && output.OutputValue) outputs.set(output.OutputKey, output.OutputValue);
      }
    }
    log(`deployed AgentRlStores and AgentRlMessaging (${exported.size} exports)`);
    const importValue = (name: string): string => {
      const value = exported.get(name);
      if (value === undefined) throw new Error(`AgentRlCompute imports ${name}, which no deployed stack exports`);
      return value;
    };

    options.signal?.throwIfAborted();
    // 2. One IAM user per task role, with exactly the compute template's statements.
    // Env workers run here as the pool would launch them; the pools themselves need a real ECS to
    // launch anything (their drivers are tested against moto's ECS in test/envpool/ecs.test.ts).
    const definitions = taskRoleDefinitions(options.templates.compute).filter((d) => d.role !== "envpool");
    const credentials = new Map<string, { accessKeyId: string; secretAccessKey: string }>();
    const grants: Grant[] = [];
    for (const definition of definitions) {
      let statements = definition.statements.map((raw) => resolveIntrinsics(raw, importValue) as PolicyStatement);
      if (options.dropGrant?.roleKey === definition.key) statements = dropAction(statements, options.dropGrant);
      grants.push(...grantsOf(definition.key, statements));
      const userName = `rehearsal-${definition.key.replace(/[^A-Za-z0-9+=,.@_-]/g, "-")}`;
      await iam.send(new CreateUserCommand({ UserName: userName }));
      if (statements.length > 0)
        await iam.send(
          new PutUserPolicyCommand({
            UserName: userName,
            PolicyName: "task-role",
            PolicyDocument: JSON.stringify({ Version: "2012-10-17", Statement: statements }),
          }),
        );
      const key = (await iam.send(new CreateAccessKeyCommand({ UserName: userName }))).AccessKey;
      credentials.set(definition.key, {
        accessKeyId: key?.AccessKeyId ?? "",
        secretAccessKey: key?.SecretAccessKey ?? "",
      });
    }
    log(`created ${definitions.length} task-role users: ${definitions.map((d) => d.key).join(", ")}`);

    options.signal?.throwIfAborted();
    // 3. v0, the way docs/deploy.md's deploy steps publish it (as the deploying admin).
    const checkpointBucket = outputs.get("CheckpointBucketName") ?? "";
    const published = await runToEnd(
      [
        AGENTRL_BIN,
        "policy",
        "publish",
        "--from",
        join(REPOSITORY_ROOT, "trainer-image/base-policy"),
        "--bucket",
        checkpointBucket,
        "--endpoint",
        moto.endpoint,
      ],
      { AWS_ACCESS_KEY_ID: admin.accessKeyId, AWS_SECRET_ACCESS_KEY: admin.secretAccessKey, AWS_REGION: REGION },
    );
    if (published.code !== 0) throw new Error(`agentrl policy publish failed: ${published.stderr}`);
    log(`seeded v0: ${published.stdout.trim()}`);

    options.signal?.throwIfAborted();
    // 4. One poison message in every queue a rehearsed role consumes (as the admin): each consumer
    // must hand it back (ChangeMessageVisibility) until its last delivery, then dead-letter it with
    // the reason (the DLQ grants), and go on.
    const consumed = [
      ...new Set(
        definitions.flatMap((definition) =>
          Object.entries(ROLE_ACCESS[definition.role as keyof typeof ROLE_ACCESS]?.queues ?? {})
            .filter(([, uses]) => uses.includes("consume"))
            .map(([queue]) => queue as QueueName),
        ),
      ),
    ].sort();
    const poisons = poisonMessages(config.experimentId);
    const adminQueue = (name: QueueName) => new AwsQueue(sqs, name, { ...config.transport, endpoint: moto.endpoint });
    for (const queue of consumed) await adminQueue(queue).send(poisons[queue].body);
    log(`sent a poison message to ${consumed.join(", ")}`);

    options.signal?.throwIfAborted();
    // 5. Every role with its task definition's environment and its own credentials.
    const environmentOf = (definition: TaskRoleDefinition) => resolveEnvironment(definition, importValue);
    let finish: (reason: string) => void = () => {};
    let settled = false;
    const finished = new Promise<string>((resolve) => {
      finish = (reason) => {
        settled = true;
        resolve(reason);
      };
    });
    timeout = setTimeout(
      () => finish(`timed out after ${(options.timeoutMs ?? 300_000) / 1000} s`),
      options.timeoutMs ?? 300_000,
    );
    // (an abort before this point was thrown at the last step boundary above)
    options.signal?.addEventListener("abort", () => finish(`stopped by ${String(options.signal?.reason)}`), {
      once: true,
    });
    const readySeconds: Record<string, number> = {};
    const listeningUrls = new Map<string, string>();
    await runner.prepare();
    const start = async (definition: TaskRoleDefinition): Promise<void> => {
      if (settled) return; // the run has failed already: its cause is the report, not what a late role does
      const startedAt = Date.now();
      const child = await runner.start({
        definition,
        environment: environmentOf(definition),
        key: credentials.get(definition.key)!,
        endpoint: moto.endpoint,
      });
      running.set(definition, child);
      const tail = () => stderrTails.get(definition.key) ?? "";
      const denialsIn = byLine((line) => {
        const denial = parseDenial(line, definition.key);
        if (denial) {
          denials.push(denial);
          finish(describeDenial(denial));
        }
      });
      child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
        stderrTails.set(definition.key, (tail() + chunk).slice(-3000));
        denialsIn(chunk);
      });
      const ready = new Promise<void>((resolveReady) => {
        let pending = "";
        child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
          if (definition.key in readySeconds) return;
          pending = (pending + chunk).slice(-4000);
          const listening = /"event":"listening"[^\n]*?"url":"([^"]+)"/.exec(pending);
          if (listening?.[1]) listeningUrls.set(definition.key, listening[1]);
          if (/"event":"(listening|started)"/.test(pending)) {
            readySeconds[definition.key] = (Date.now() - startedAt) / 1000;
            resolveReady();
          }
        });
        child.once("exit", (code) => {
          if (definition.role === "trainer") finish(code === 0 ? "" : `the trainer exited with ${code}: ${tail()}`);
          else {
            // after the trainer's end the run's failure is settled: still say why a role left
            if (!stopping.has(definition.key)) log(`role ${definition.key} exited by itself with ${code}: ${tail()}`);
            finish(`role ${definition.key} exited with ${code}: ${tail()}`);
          }
          resolveReady();
        });
      });
      await Promise.race([ready, finished]);
    };
    const byRole = (role: string) => definitions.filter((d) => d.role === role);
    /** Waits until `queue`'s poison message is in its dead-letter queue, or the run has ended. */
    const deadLettered = async (queue: QueueName): Promise<void> => {
      if (!consumed.includes(queue)) return;
      const poison = poisons[queue].body;
      for (let ended = false; !ended; ) {
        const letters = await adminQueue(queue).deadLetters(20);
        if (letters.some((letter) => letter.body === poison)) return;
        ended = await Promise.race([finished.then(() => true), sleep(500).then(() => false)]);
      }
    };
    // In the order the services need each other: the controller, then what registers with it or
    // serves the policy, then the roles that use them.
    for (const definition of byRole("controller")) await start(definition);
    await Promise.all([...byRole("env"), ...byRole("policy")].map(start));
    // The trainer first, alone: it dead-letters its poison message (maxReceiveCount receives)
    // before any trajectory comes, so a run whose batches fill fast (a gateway group, a loaded
    // host's slow steps) cannot end before its last receive.
    await Promise.all(byRole("trainer").map(start));
    await deadLettered("trajectories");
    // An agent's session through the gateway (process runner: its URL is on this machine), to its
    // end before the rollouts start: once they fill the staleness bound the gateway answers 429
    // until the trainer consumes, and a trainer that finishes its steps first would leave the
    // session's export (and its grants) undone on a loaded host.
    await Promise.all(byRole("gateway").map(start));
    const gatewayUrl = listeningUrls.get("gateway");
    if (gatewayUrl) {
      const session = gatewaySession(gatewayUrl).then(
        (line) => {
          log(line);
          return "";
        },
        (error: unknown) => `the gateway session failed: ${(error as Error).message}`,
      );
      const outcome = await Promise.race([session, finished]);
      if (outcome) finish(outcome);
    }
    // The rollout worker next, alone: with no request but its poison in the queue it dead-letters
    // it (or is denied doing so) before the feeder starts, so that does not depend on how its
    // deliveries interleave with the feeder's requests and the trainer's pace.
    await Promise.all(byRole("rollout").map(start));
    await deadLettered("rollout-requests");
    await Promise.all(byRole("feeder").map(start));
    log(
      `started ${running.size} roles as ${runner.kind === "process" ? "processes" : "containers"} (ready after ${Object.entries(
        readySeconds,
      )
        .map(([key, seconds]) => `${key} ${seconds.toFixed(1)} s`)
        .join(", ")}); waiting for ${config.trainer.maxSteps} trainer steps`,
    );
    failure = await finished;
    clearTimeout(timeout);
    // The trainer is done; let the feeder take the last PolicyPublished events off policy-events,
    // so that the run ends settled and its grants for that are used (at most 30 s).
    if (!failure) await drained(sqs, `${config.transport.queuePrefix}-policy-events`, 30_000);

    // 6. What the trainer published and what was dead-lettered, read back as the admin.
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: checkpointBucket, Prefix: "policies/" }));
    const versions = (listed.Contents ?? [])
      .map((object) => /^policies\/v(\d+)\/manifest\.json$/.exec(object.Key ?? "")?.[1])
      .filter((v): v is string => v !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
    const expected = Array.from({ length: config.trainer.maxSteps + 1 }, (_, i) => i);
    if (!failure && expected.some((v) => !versions.includes(v)))
      failure = `the checkpoint bucket holds versions ${versions.join(", ")}, expected ${expected.join(", ")}`;
    if (!failure && denials.length > 0)
      // A denial a role logged after the trainer had finished (a loaded host's late consumer).
      failure = denials.map(describeDenial).join("; ");
    const deadLetters: Partial<Record<QueueName, readonly DeadLetter[]>> = {};
    // A consumer dead-letters its poison on the last delivery; give a slow one (a loaded host) time.
    for (const deadline = Date.now() + DEAD_LETTER_WAIT_MS; ; ) {
      for (const queue of consumed) deadLetters[queue] = await adminQueue(queue).deadLetters(20);
      const problems = consumed.flatMap((queue) => {
        const problem = deadLetterProblem(
          queue,
          poisons[queue],
          deadLetters[queue] ?? [],
          config.transport.maxReceiveCount,
        );
        return problem ? [problem] : [];
      });
      if (problems.length === 0 || failure || Date.now() > deadline) {
        if (!failure && problems.length > 0) {
          // Where each undelivered poison is (still queued, or taken and never dead-lettered) says which side failed.
          const depths = await Promise.all(
            consumed.map(async (queue) => {
              const { visible, inFlight } = await adminQueue(queue).approximateDepth();
              return `${queue} ${visible} visible, ${inFlight} in flight`;
            }),
          );
          failure = `failure paths: ${problems.join("; ")} (queues after the run: ${depths.join("; ")})`;
        }
        break;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    const roleOfKey = new Map([...credentials].map(([roleKey, key]) => [key.accessKeyId, roleKey]));
    const authorized = existsSync(authorizationLog)
      ? parseAuthorizationLog(readFileSync(authorizationLog, "utf8"))
      : [];
    const unneeded = unneededGrants(grants, authorized, roleOfKey).map((g) => ({ ...g, reason: failurePathReason(g) }));
    const unexplained = unneeded.filter((g) => g.reason === undefined);
    if (!failure && unexplained.length > 0)
      failure = `granted but needed by no request: ${unexplained.map((g) => `${g.role} ${g.action} ${g.resource}`).join("; ")}`;
    log(
      `moto authorized ${authorized.length} role requests; ${grants.length - unneeded.length} of ${grants.length} grants needed`,
    );
    // The run is over: from here on, roles exit because they are stopped.
    finish("");
    const stopRole = async (definition: TaskRoleDefinition): Promise<RoleStop> => {
      const child = running.get(definition);
      if (!child) throw new Error(`role ${definition.key} is not running`);
      stopping.add(definition.key);
      const stopped = await runner.stop(definition, child);
      stops[definition.key] = stopped;
      // A role that ignored SIGTERM was stuck somewhere, one that failed to close threw: its last words say where.
      const killed = stopped.exitCode === null || stopped.exitCode === 137;
      if (stopped.exitCode !== 0)
        log(
          `role ${definition.key} ${killed ? `was killed after its ${stopped.limitSeconds} s stop timeout` : `exited ${stopped.exitCode} when stopped`}; its last stderr:\n${stderrTails.get(definition.key) ?? "(none)"}`,
        );
      return stopped;
    };
    if (!failure && options.beforeStop)
      await options.beforeStop({ endpoint: moto.endpoint, admin, definitions, environmentOf, runner, stopRole });
    // Every role still running stops as ECS stops a task.
    await Promise.all(
      [...running].map(async ([definition, child]) => {
        if (child.exitCode === null && child.signalCode === null) await stopRole(definition);
      }),
    );
    return {
      passed: failure === "",
      failure,
      denials,
      versions,
      deadLetters,
      unneededGrants: unneeded,
      readySeconds,
      stops,
      seconds: (Date.now() - started) / 1000,
    };
  } finally {
    clearTimeout(timeout);
    for (const child of running.values()) if (child.exitCode === null) child.kill("SIGKILL");
    await runner.cleanup();
    await moto.stop();
    rmSync(dirname(authorizationLog), { recursive: true, force: true });
    for (const client of [cfn, iam, s3, sqs]) client.destroy();
  }
}

/**
 * One agent session through the gateway: open (admin key; a 429 from the staleness bound is
 * waited out for its Retry-After, as an operator does), one chat completion, a reward, the end.
 */
async function gatewaySession(url: string): Promise<string> {
  const call = async (path: string, key: string, body: unknown) => {
    const response = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, retryAfter: Number(response.headers.get("retry-after") ?? 1), text };
  };
  const ok = async (path: string, key: string, body: unknown) => {
    const answer = await call(path, key, body);
    if (answer.status >= 400) throw new Error(`${path}: HTTP ${answer.status}: ${answer.text.slice(0, 300)}`);
    return JSON.parse(answer.text) as Record<string, unknown>;
  };
  let refused = 0;
  let opened: { status: number; retryAfter: number; text: string };
  for (;;) {
    opened = await call("/v1/sessions", REHEARSAL_GATEWAY_ADMIN_KEY, { task: "db" });
    if (opened.status !== 429 || refused >= 120) break;
    refused += 1;
    await new Promise((r) => setTimeout(r, opened.retryAfter * 1000));
  }
  if (opened.status !== 201) throw new Error(`/v1/sessions: HTTP ${opened.status}: ${opened.text.slice(0, 300)}`);
  const session = JSON.parse(opened.text) as { sessionId: string; apiKey: string };
  const base = `/sessions/${session.sessionId}/v1`;
  await ok(`${base}/chat/completions`, session.apiKey, { messages: [{ role: "user", content: "List the tables." }] });
  await ok(`/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward: 1 });
  const state = await ok(`/v1/sessions/${session.sessionId}/end`, session.apiKey, {});
  return `gateway session ${session.sessionId} (after ${refused} 429s): ${String(state.state)}, trajectories ${JSON.stringify(state.trajectoryIds)}`;
}

/** Waits until the queue holds no message, visible or in flight (or `limitMs` passed). */
async function drained(sqs: SQSClient, queueName: string, limitMs: number): Promise<void> {
  const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: queueName }));
  for (const deadline = Date.now() + limitMs; Date.now() < deadline; ) {
    const { Attributes } = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl,
        AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
      }),
    );
    if (
      Number(Attributes?.ApproximateNumberOfMessages) + Number(Attributes?.ApproximateNumberOfMessagesNotVisible) ===
      0
    )
      return;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** How a failure names a denial, whether it ended the run or was read after the run had ended. */
export function describeDenial(denial: Denial): string {
  return `role ${denial.role} was denied ${denial.action} on ${denial.resource}`;
}

/**
 * A handler for a stream's chunks that calls `onLine` with each whole line: a pipe read may end
 * inside a line, whose start then waits for the rest (at most `maxLineChars` of it are kept).
 */
export function byLine(onLine: (line: string) => void, maxLineChars = 16_000): (chunk: string) => void {
  let partial = "";
  return (chunk) => {
    const lines = (partial + chunk).split("\n");
    partial = (lines.pop() ?? "").slice(-maxLineChars);
    for (const line of lines) onLine(line);
  };
}

/** A denial line a role wrote (shared/transport: `access-denied` from IAM, `access-violation` from the role-access table). */
export function parseDenial(line: string, roleKey: string): Denial | undefined {
  if (!line.startsWith("{") || !/"event":"access-(denied|violation)"/.test(line)) return undefined;
  try {
    const event = JSON.parse(line) as { action?: string; operation?: string; resource?: string };
    return { role: roleKey, action: event.action ?? event.operation ?? "?", resource: event.resource ?? "?" };
  } catch {
    return undefined;
  }
}

function dropAction(
  statements: readonly PolicyStatement[],
  drop: { readonly action: string; readonly resource: RegExp },
): PolicyStatement[] {
  let dropped = false;
  const out = statements.flatMap((statement) => {
    const resources = [statement.Resource].flat();
    const actions = [statement.Action].flat();
    if (!actions.includes(drop.action) || !resources.some((r) => drop.resource.test(r))) return [statement];
    dropped = true;
    // Only that action on only the matching resources: CDK merges statements with the same actions,
    // so one statement may also grant it on resources the drop must leave alone.
    const others = resources.filter((r) => !drop.resource.test(r));
    const rest = actions.filter((a) => a !== drop.action);
    return [
      ...(others.length > 0 ? [{ ...statement, Resource: others }] : []),
      ...(rest.length > 0
        ? [{ ...statement, Action: rest, Resource: resources.filter((r) => drop.resource.test(r)) }]
        : []),
    ];
  });
  if (!dropped) throw new Error(`no statement grants ${drop.action} on ${drop.resource}`);
  return out;
}

function runToEnd(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(process.execPath, args, {
      cwd: REPOSITORY_ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding("utf8").on("data", (c: string) => {
      stderr += c;
    });
    child.once("exit", (code) => resolveRun({ code, stdout, stderr }));
  });
}
