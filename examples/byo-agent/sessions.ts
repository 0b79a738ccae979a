/**
 * The operator's side: opening gateway sessions (admin key), then giving each its reward and
 * ending it (the session's own key). Plain fetch; the agent itself never sees the admin key.
 */

export interface GatewaySession {
  readonly sessionId: string;
  /** Give this to the agent as its OpenAI base URL. */
  readonly baseUrl: string;
  /** And this as its API key: it reaches this session only. */
  readonly apiKey: string;
}

async function json(response: Response, what: string): Promise<unknown> {
  const text = await response.text();
  if (!response.ok) throw new Error(`${what}: HTTP ${response.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/**
 * Opens a session; a 429 (the pipeline has enough experience in flight) is waited out for as long
 * as its Retry-After says, as often as it comes.
 */
export async function openSession(
  gatewayUrl: string,
  adminKey: string,
  body: { task?: string; groupId?: string; groupSize?: number; metadata?: Record<string, string | number | boolean> },
  signal?: AbortSignal,
): Promise<GatewaySession> {
  for (;;) {
    const response = await fetch(`${gatewayUrl.replace(/\/+$/, "")}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });
    if (response.status === 429) {
      await response.body?.cancel();
      const seconds = Number(response.headers.get("retry-after") ?? "1");
      await new Promise((resolve) => setTimeout(resolve, Math.max(0.1, seconds) * 1000));
      if (signal?.aborted) throw signal.reason;
      continue;
    }
    return (await json(response, "open session")) as GatewaySession;
  }
}

/** Posts the session's reward (or one completion's, with `completionId`). */
export async function rewardSession(
  gatewayUrl: string,
  session: GatewaySession,
  reward: number,
  completionId?: string,
) {
  return json(
    await fetch(`${gatewayUrl.replace(/\/+$/, "")}/v1/sessions/${session.sessionId}/reward`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(completionId === undefined ? { reward } : { reward, completionId }),
    }),
    "reward",
  );
}

/** Ends the session: its calls become trajectories once its group is complete. Answers the session's state. */
export async function endSession(gatewayUrl: string, session: GatewaySession): Promise<Record<string, unknown>> {
  return (await json(
    await fetch(`${gatewayUrl.replace(/\/+$/, "")}/v1/sessions/${session.sessionId}/end`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.apiKey}` },
    }),
    "end",
  )) as Record<string, unknown>;
}
