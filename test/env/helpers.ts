import { z } from "zod";
import { exampleTask } from "../../env-images/example/index.ts";
import {
  type ControllerOptions,
  type RunningController,
  startController,
} from "../../functions/controller/controller.ts";
import { ControllerClient } from "../../shared/env/client.ts";
import { type RunningWorker, type ServeTaskOptions, serveTask } from "../../shared/env/worker.ts";
import { ErrorBody } from "../../shared/protocol/envApi.ts";
import type { AssistantMessage } from "../../shared/protocol/openai.ts";

export interface Stack {
  readonly controller: RunningController;
  readonly workers: RunningWorker[];
  readonly client: ControllerClient;
  close(): Promise<void>;
}

/** A controller on a free port plus in-process example workers registered with it. */
export async function startStack(
  workerOptions: ServeTaskOptions[],
  controllerOptions: ControllerOptions = {},
): Promise<Stack> {
  const controller = await startController({ port: 0, heartbeatTimeoutMs: 2_000, ...controllerOptions });
  const workers: RunningWorker[] = [];
  for (const options of workerOptions) {
    workers.push(await serveTask(exampleTask, { heartbeatMs: 200, ...options, controllerUrl: controller.url }));
  }
  const client = new ControllerClient({ baseUrl: controller.url, backoffMs: 20, maxRetries: 2 });
  await waitFor(async () => countWorkers(await client.listWorkers(), "ALIVE") === workers.length);
  return {
    controller,
    workers,
    client,
    async close() {
      await Promise.all(workers.map((w) => w.close()));
      await controller.close();
    },
  };
}

export function countWorkers(listing: Awaited<ReturnType<ControllerClient["listWorkers"]>>, state: string): number {
  return Object.values(listing).reduce(
    (n, task) => n + Object.values(task.workers).filter((w) => w.status === state).length,
    0,
  );
}

/** Polls `check` every `intervalMs` until it holds; fails with `what` after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what = "condition",
  intervalMs = 25,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** An assistant message calling one tool; `args` is sent verbatim when it is a string. */
export function call(name: string, args: Record<string, unknown> | string, id = "call_1"): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [
      { id, type: "function", function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) } },
    ],
  };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

/** The error body of a 4xx/5xx answer, validated. */
export async function errorBody(response: Response): Promise<ErrorBody> {
  return ErrorBody.parse(await response.json());
}

/** Any JSON answer as a plain record (for listings checked field by field). */
export async function jsonRecord(response: Response): Promise<Record<string, unknown>> {
  return z.record(z.string(), z.unknown()).parse(await response.json());
}
