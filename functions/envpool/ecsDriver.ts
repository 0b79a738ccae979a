import {
  DescribeTasksCommand,
  type DescribeTasksCommandInput,
  type DescribeTasksCommandOutput,
  type ECSClient,
  ListTasksCommand,
  type ListTasksCommandInput,
  type ListTasksCommandOutput,
  RunTaskCommand,
  type RunTaskCommandInput,
  type RunTaskCommandOutput,
  StopTaskCommand,
  type StopTaskCommandInput,
  type StopTaskCommandOutput,
  type Task,
} from "@aws-sdk/client-ecs";
import type { Logger } from "../../shared/log.ts";
import { type BackoffOptions, withBackoff } from "./backoff.ts";
import type { DriverWorker, LaunchSpec, WorkerDriver } from "./driver.ts";

/** The four ECS calls the driver makes; the SDK client in production, a stub in unit tests. */
export interface EcsCalls {
  runTask(input: RunTaskCommandInput): Promise<RunTaskCommandOutput>;
  stopTask(input: StopTaskCommandInput): Promise<StopTaskCommandOutput>;
  listTasks(input: ListTasksCommandInput): Promise<ListTasksCommandOutput>;
  describeTasks(input: DescribeTasksCommandInput): Promise<DescribeTasksCommandOutput>;
}

/** {@link EcsCalls} through an SDK client (create it with `maxAttempts: 1`: the driver does the backoff). */
export function sdkEcsCalls(client: ECSClient): EcsCalls {
  return {
    runTask: (input) => client.send(new RunTaskCommand(input)),
    stopTask: (input) => client.send(new StopTaskCommand(input)),
    listTasks: (input) => client.send(new ListTasksCommand(input)),
    describeTasks: (input) => client.send(new DescribeTasksCommand(input)),
  };
}

export interface EcsDriverOptions {
  readonly ecs: EcsCalls;
  readonly cluster: string;
  /** The env task definition infra synthesized for this task (family, family:revision or ARN). */
  readonly taskDefinition: string;
  /** Container of the task definition that runs the worker. @default "Role" */
  readonly containerName?: string;
  readonly subnets: readonly string[];
  readonly securityGroups: readonly string[];
  /**
   * FARGATE, FARGATE_SPOT, or the name of an EC2 capacity provider of the cluster (the OS tasks'
   * sandbox hosts).
   * @default "FARGATE"
   */
  readonly capacityProvider?: string;
  readonly experimentId: string;
  readonly task: string;
  /** Port the worker listens on inside its task. @default 5021 */
  readonly port?: number;
  readonly backoff?: BackoffOptions;
  readonly log: Logger;
}

/** Tag keys every pool task carries; listing filters on them. */
export const EXPERIMENT_TAG = "agentrl:experiment";
export const TASK_TAG = "agentrl:task";

/**
 * Env workers as ECS tasks (RunTask on the env task definition, in the given subnets and security
 * groups, on Fargate, Fargate Spot or an EC2 capacity provider), tagged with experiment and task. The limits travel as
 * extra arguments to the container's launcher (`agentrl container -- --max-episodes N`). Every
 * call is retried with backoff when ECS throttles or fails transiently.
 */
export class EcsDriver implements WorkerDriver {
  readonly kind = "ecs";
  private readonly startedBy: string;

  constructor(private readonly options: EcsDriverOptions) {
    if (options.subnets.length === 0) throw new RangeError("EcsDriver: at least one subnet is required");
    // ECS limits startedBy to 36 characters; listing filters on it before the tags are read.
    this.startedBy = `envpool-${options.task}`.slice(0, 36);
  }

  async launch(spec: LaunchSpec): Promise<DriverWorker> {
    const o = this.options;
    const extra = ["--concurrency", String(spec.concurrency)];
    if (spec.maxEpisodes !== undefined) extra.push("--max-episodes", String(spec.maxEpisodes));
    if (spec.maxAgeSeconds !== undefined) extra.push("--max-age", String(spec.maxAgeSeconds));
    const output = await this.call("RunTask", () =>
      o.ecs.runTask({
        cluster: o.cluster,
        taskDefinition: o.taskDefinition,
        count: 1,
        // Plain Fargate as a launch type (the same capacity; what moto also models); Spot and EC2
        // capacity providers need the strategy.
        ...(o.capacityProvider !== undefined && o.capacityProvider !== "FARGATE"
          ? { capacityProviderStrategy: [{ capacityProvider: o.capacityProvider, weight: 1 }] }
          : { launchType: "FARGATE" as const }),
        networkConfiguration: {
          awsvpcConfiguration: {
            subnets: [...o.subnets],
            securityGroups: [...o.securityGroups],
            assignPublicIp: "DISABLED",
          },
        },
        overrides: {
          containerOverrides: [
            { name: o.containerName ?? "Role", command: ["node", "bin/agentrl.mjs", "container", "--", ...extra] },
          ],
        },
        startedBy: this.startedBy,
        tags: [
          { key: EXPERIMENT_TAG, value: o.experimentId },
          { key: TASK_TAG, value: o.task },
        ],
      }),
    );
    const failure = output.failures?.[0];
    const task = output.tasks?.[0];
    if (!task?.taskArn)
      throw new Error(
        `RunTask started no task for ${o.task}: ${failure ? `${failure.reason ?? "?"} ${failure.detail ?? ""}`.trim() : "no reason given"}`,
      );
    return this.toWorker(task);
  }

  async stop(id: string, reason: string): Promise<void> {
    const o = this.options;
    o.log.info({ taskArn: id, reason }, "stopping env worker task");
    await this.call("StopTask", () =>
      o.ecs.stopTask({ cluster: o.cluster, task: id, reason: `agentrl envpool: ${reason}`.slice(0, 255) }),
    );
  }

  async list(): Promise<DriverWorker[]> {
    const o = this.options;
    const arns: string[] = [];
    let nextToken: string | undefined;
    do {
      const token = nextToken;
      const page = await this.call("ListTasks", () =>
        o.ecs.listTasks({
          cluster: o.cluster,
          startedBy: this.startedBy,
          desiredStatus: "RUNNING",
          ...(token ? { nextToken: token } : {}),
        }),
      );
      arns.push(...(page.taskArns ?? []));
      nextToken = page.nextToken;
    } while (nextToken);
    const out: DriverWorker[] = [];
    for (let i = 0; i < arns.length; i += 100) {
      const chunk = arns.slice(i, i + 100);
      const described = await this.call("DescribeTasks", () =>
        o.ecs.describeTasks({ cluster: o.cluster, tasks: chunk, include: ["TAGS"] }),
      );
      for (const task of described.tasks ?? []) {
        const tags = new Map((task.tags ?? []).map((t) => [t.key, t.value] as const));
        if (tags.get(EXPERIMENT_TAG) !== o.experimentId || tags.get(TASK_TAG) !== o.task) continue;
        out.push(this.toWorker(task));
      }
    }
    return out;
  }

  private toWorker(task: Task): DriverWorker {
    const status = task.lastStatus ?? "PROVISIONING";
    const state =
      status === "RUNNING"
        ? "running"
        : ["DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED", "DELETED"].includes(status)
          ? "stopped"
          : "pending";
    const ip = task.attachments
      ?.find((a) => a.type === "ElasticNetworkInterface")
      ?.details?.find((d) => d.name === "privateIPv4Address")?.value;
    return {
      id: task.taskArn ?? "",
      address: ip ? `http://${ip}:${this.options.port ?? 5021}/api` : undefined,
      state,
      launchedAt: (task.createdAt ?? new Date()).getTime(),
    };
  }

  private call<T>(what: string, call: () => Promise<T>): Promise<T> {
    return withBackoff(call, {
      ...this.options.backoff,
      onRetry: (error, attempt, delayMs) =>
        this.options.log.warn(
          { err: error, call: what, attempt, delayMs },
          `ECS ${what} throttled or failed transiently; retrying`,
        ),
    });
  }
}
