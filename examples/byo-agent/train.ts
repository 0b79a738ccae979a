/**
 * Trains through a running gateway with the env agent: groups of `--group-size` sessions on one
 * task instance each (one GRPO group), the environment's reward posted for each.
 *
 *   AGENTRL_GATEWAY_ADMIN_KEY=... npx tsx examples/byo-agent/train.ts \
 *     --gateway http://127.0.0.1:8080 --controller http://127.0.0.1:5020 --task example --groups 20
 */
import { parseArgs } from "node:util";
import { type EnvAgentRun, runEnvAgent } from "./env-agent.ts";
import { endSession, openSession, rewardSession } from "./sessions.ts";

export interface GroupOptions {
  readonly gatewayUrl: string;
  readonly adminKey: string;
  readonly controllerUrl: string;
  readonly controllerToken?: string;
  readonly task: string;
  readonly index: number;
  readonly groupId: string;
  readonly groupSize: number;
  readonly returnTokenIds?: boolean;
  /** Most model calls per agent. @default the agent's own (8) */
  readonly maxTurns?: number;
  /** The reward posted for a run. @default the environment's reward */
  readonly rewardOf?: (run: EnvAgentRun) => number;
}

/** One GRPO group: `groupSize` agents on the same instance, each rewarded with the environment's reward, then ended. */
export async function runGroup(options: GroupOptions) {
  const sessions = [];
  for (let i = 0; i < options.groupSize; i++)
    sessions.push(
      await openSession(options.gatewayUrl, options.adminKey, {
        task: options.task,
        groupId: options.groupId,
        groupSize: options.groupSize,
      }),
    );
  return Promise.all(
    sessions.map(async (session) => {
      const run = await runEnvAgent({
        baseUrl: session.baseUrl,
        apiKey: session.apiKey,
        controllerUrl: options.controllerUrl,
        ...(options.controllerToken ? { controllerToken: options.controllerToken } : {}),
        task: options.task,
        index: options.index,
        ...(options.returnTokenIds ? { returnTokenIds: true } : {}),
        ...(options.maxTurns === undefined ? {} : { maxTurns: options.maxTurns }),
      });
      await rewardSession(options.gatewayUrl, session, options.rewardOf ? options.rewardOf(run) : run.reward);
      const state = await endSession(options.gatewayUrl, session);
      return { session, run, state };
    }),
  );
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      gateway: { type: "string" },
      controller: { type: "string" },
      task: { type: "string", default: "example" },
      groups: { type: "string", default: "10" },
      "group-size": { type: "string", default: "4" },
    },
  });
  const adminKey = process.env.AGENTRL_GATEWAY_ADMIN_KEY;
  if (!values.gateway || !values.controller || !adminKey)
    throw new Error("needs --gateway URL, --controller URL and AGENTRL_GATEWAY_ADMIN_KEY in the environment");
  for (let g = 0; g < Number(values.groups); g++) {
    const results = await runGroup({
      gatewayUrl: values.gateway,
      adminKey,
      controllerUrl: values.controller,
      ...(process.env.AGENTRL_CONTROLLER_SECRET ? { controllerToken: process.env.AGENTRL_CONTROLLER_SECRET } : {}),
      task: values.task,
      index: g,
      groupId: `byo-${Date.now().toString(36)}-${g}`,
      groupSize: Number(values["group-size"]),
    });
    process.stdout.write(`${JSON.stringify({ group: g, rewards: results.map((r) => r.run.reward) })}\n`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
