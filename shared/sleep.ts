/**
 * Waits `ms`, or less when `signal` aborts: it resolves either way (never rejects), so a role's
 * polling loop can sleep and then simply re-check whether it was asked to stop.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
