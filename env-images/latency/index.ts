import { z } from "zod";
import type { Episode, ScriptedAgent, TaskDefinition, TaskModule } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";

/**
 * A benchmark task whose environment is slow in a long-tailed way, for comparing the async and
 * sync pipelines (`npm run bench:pipeline`). Instance `i` shows a number; each `probe` call sleeps
 * a seeded lognormal delay and the episode completes after `probesPerEpisode` calls, with reward 1
 * when the last guessed digit has the number's parity. Starting an episode sleeps one delay too,
 * so even a policy that never calls a tool meets the latency. Group members of one instance share
 * the delays (deterministic by instance), so async and sync runs see the same workload; their
 * rewards differ with the sampled guesses, which keeps GRPO advantages non-zero.
 */

/** Shape of the delay distribution and episode length. */
export const LatencyOptions = z
  .object({
    /** Median delay of one environment action (lognormal median = e^mu). */
    medianMs: z.number().min(0).max(60_000).default(300),
    /** Lognormal sigma; 1 gives a mean ~1.65x the median and a p99 ~10x. */
    sigma: z.number().min(0).max(3).default(1),
    /** Upper cap on a single delay, so one draw cannot stall a benchmark. */
    maxMs: z.number().min(0).max(600_000).default(15_000),
    /** Probe calls that complete an episode. */
    probesPerEpisode: z.number().int().min(1).max(10).default(2),
  })
  .strict();
export type LatencyOptions = z.infer<typeof LatencyOptions>;

/** Environment variables read by the registered task (the env worker is a child process). */
export const LATENCY_ENV = {
  medianMs: "AGENTRL_LATENCY_MEDIAN_MS",
  sigma: "AGENTRL_LATENCY_SIGMA",
  maxMs: "AGENTRL_LATENCY_MAX_MS",
  probesPerEpisode: "AGENTRL_LATENCY_PROBES",
} as const satisfies Record<keyof LatencyOptions, string>;

/** Options from the AGENTRL_LATENCY_* variables; a malformed value throws naming the variable. */
export function latencyOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): LatencyOptions {
  const raw: Record<string, number> = {};
  for (const [key, name] of Object.entries(LATENCY_ENV)) {
    const text = env[name];
    if (text === undefined || text.trim() === "") continue;
    const value = Number(text);
    if (!Number.isFinite(value)) throw new RangeError(`${name} must be a number, got "${text}"`);
    raw[key] = value;
  }
  const parsed = LatencyOptions.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = String(issue?.path[0] ?? "") as keyof LatencyOptions;
    throw new RangeError(`${LATENCY_ENV[key] ?? "AGENTRL_LATENCY_*"}: ${issue?.message ?? "invalid"}`);
  }
  return parsed.data;
}

/** A uniform in (0, 1) from a 32-bit hash of (index, salt): deterministic, no shared state. */
function unit(index: number, salt: number): number {
  let h = (Math.imul(index + 1, 2654435761) ^ Math.imul(salt + 7, 40503)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x45d9f3b) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  return (h + 0.5) / 4294967296;
}

/** Delay of environment action `action` (0 = start, k = k-th probe) of instance `index`, in ms. */
export function latencyDelayMs(options: LatencyOptions, index: number, action: number): number {
  // Box-Muller from two seeded uniforms: a standard normal, then the lognormal draw
  const normal =
    Math.sqrt(-2 * Math.log(unit(index, action * 2))) * Math.cos(2 * Math.PI * unit(index, action * 2 + 1));
  return Math.min(options.maxMs, options.medianMs * Math.exp(options.sigma * normal));
}

/** The number shown by instance `index`. */
export function latencyNumber(index: number): number {
  return Math.floor(unit(index, 1000) * 1000);
}

const Probe = z.object({ guess: z.number().int().min(0).max(9).describe("a digit with the number's parity") });

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** The task with explicit options (tests); the registered module reads them from the environment. */
export function createLatencyTask(options: LatencyOptions): TaskDefinition {
  return {
    name: "latency",
    tools: [{ name: "probe", description: "Probes the environment with a guessed digit.", parameters: Probe }],
    maxTurns: options.probesPerEpisode + 2,
    splits: { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_100 } },
    async start(index: number, signal: AbortSignal): Promise<Episode> {
      await sleep(latencyDelayMs(options, index, 0), signal);
      const number = latencyNumber(index);
      let probes = 0;
      return {
        messages: [
          { role: "system", content: "Call exactly one tool per turn." },
          {
            role: "user",
            content: `The number is ${number}. Call probe ${options.probesPerEpisode} times, each time with a digit of the same parity as ${number}.`,
          },
        ],
        async call(_tool, args, callSignal) {
          const { guess } = Probe.parse(args);
          probes += 1;
          await sleep(latencyDelayMs(options, index, probes), callSignal);
          if (probes < options.probesPerEpisode)
            return { observation: `probe ${probes} of ${options.probesPerEpisode} done` };
          const right = guess % 2 === number % 2;
          return {
            observation: right ? "Right parity." : "Wrong parity.",
            reward: { reward: right ? 1 : 0, score: right ? 1 : 0 },
            finish: "completed",
          };
        },
      };
    },
  };
}

function probeCall(messages: readonly ChatMessage[], guess: number): AssistantMessage {
  const turn = messages.filter((m) => m.role === "assistant").length;
  return {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: `call_${turn}`, type: "function", function: { name: "probe", arguments: JSON.stringify({ guess }) } },
    ],
  };
}

/** Always guesses the number's last digit: right parity every time. */
export const latencyExpert: ScriptedAgent = {
  name: "latency-expert",
  act: (messages, index) => probeCall(messages, latencyNumber(index) % 10),
};

/** Guesses a seeded digit per turn: right about half the time. */
export const latencyRandom: ScriptedAgent = {
  name: "latency-random",
  act: (messages, index) =>
    probeCall(messages, Math.floor(unit(index, 2000 + messages.filter((m) => m.role === "assistant").length) * 10)),
};

/** Registered module; its delays come from the AGENTRL_LATENCY_* variables (defaults otherwise). */
export const taskModule: TaskModule = {
  task: createLatencyTask(latencyOptionsFromEnv()),
  expert: latencyExpert,
  random: latencyRandom,
};
