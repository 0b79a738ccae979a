/** Running containers of the built images: start, wait for a log line or the exit, stop as ECS does, remove. */
import { type ContainerEngine, exec } from "./engine.ts";

/** How one container runs: image, environment, and where it sits on the network. */
export interface ContainerSpec {
  readonly name: string;
  readonly image: string;
  readonly env: Readonly<Record<string, string>>;
  /** `host`, or a network the engine created. */
  readonly network: string;
  /** Names other containers reach this one by (Cloud Map names in ECS). */
  readonly aliases?: readonly string[];
  /** `host:ip` entries for /etc/hosts. */
  readonly addHosts?: readonly string[];
  /** Replaces the image's CMD. */
  readonly command?: readonly string[];
  /** `-v` mounts (`src:dst:ro`). */
  readonly volumes?: readonly string[];
}

/** The `run` arguments of `spec` (without `run` itself and without `-d` or `--rm`). */
export function runArgs(engine: ContainerEngine, spec: ContainerSpec): string[] {
  return [
    ...engine.commonFlags,
    "--name",
    spec.name,
    "--network",
    spec.network,
    ...(spec.aliases ?? []).flatMap((alias) => ["--network-alias", alias]),
    ...(spec.addHosts ?? []).flatMap((entry) => ["--add-host", entry]),
    ...(spec.volumes ?? []).flatMap((volume) => ["-v", volume]),
    ...Object.entries(spec.env).flatMap(([key, value]) => ["-e", `${key}=${value}`]),
    spec.image,
    ...(spec.command ?? []),
  ];
}

/** Starts a container in the background; resolves once the engine has started it. */
export async function startContainer(engine: ContainerEngine, spec: ContainerSpec): Promise<void> {
  const result = await exec(engine.bin, ["run", "-d", ...runArgs(engine, spec)], { timeoutMs: 120_000 });
  if (result.status !== 0) throw new Error(`cannot start ${spec.name}: ${result.stderr}`);
}

/** Runs a container to completion (removed afterwards); its exit status and output. */
export async function runToCompletion(engine: ContainerEngine, spec: ContainerSpec, timeoutMs = 300_000) {
  return exec(engine.bin, ["run", "--rm", ...runArgs(engine, spec)], { timeoutMs });
}

/** Everything the container wrote to stdout and stderr so far. */
export async function containerLogs(engine: ContainerEngine, name: string): Promise<string> {
  const result = await exec(engine.bin, ["logs", name], { timeoutMs: 30_000 });
  return `${result.stdout}${result.stderr}`;
}

/** `running`, `exited`, ... and the exit code once it exited. */
export async function containerState(
  engine: ContainerEngine,
  name: string,
): Promise<{ status: string; exitCode: number }> {
  const result = await exec(engine.bin, ["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name], {
    timeoutMs: 30_000,
  });
  const [status, code] = result.stdout.trim().split(" ");
  return { status: status ?? "unknown", exitCode: Number(code) };
}

/**
 * Waits until the container's output matches `pattern` and returns the matching line; fails
 * early, with the output, when the container exits first.
 */
export async function waitForLog(
  engine: ContainerEngine,
  name: string,
  pattern: RegExp,
  timeoutMs: number,
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const logs = await containerLogs(engine, name);
    const line = logs.split("\n").find((candidate) => pattern.test(candidate));
    if (line) return line;
    const state = await containerState(engine, name);
    if (state.status !== "running")
      throw new Error(`${name} ${state.status} (exit ${state.exitCode}) before ${pattern}:\n${logs.slice(-3000)}`);
    if (Date.now() > deadline) throw new Error(`${name}: no ${pattern} within ${timeoutMs} ms:\n${logs.slice(-3000)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** Waits for a container to exit by itself; its exit code. */
export async function waitForExit(engine: ContainerEngine, name: string, timeoutMs: number): Promise<number> {
  const result = await exec(engine.bin, ["wait", name], { timeoutMs });
  if (result.status !== 0) throw new Error(`${name} did not exit within ${timeoutMs} ms: ${result.stderr}`);
  return Number(result.stdout.trim());
}

/**
 * `stop` as ECS does it: SIGTERM, then SIGKILL after `graceSeconds` (the task definition's
 * stopTimeout). Returns how long the container took and its exit code (137 means it was killed).
 */
export async function stopContainer(
  engine: ContainerEngine,
  name: string,
  graceSeconds: number,
): Promise<{ seconds: number; exitCode: number }> {
  const started = Date.now();
  const result = await exec(engine.bin, ["stop", "--time", String(graceSeconds), name], {
    timeoutMs: (graceSeconds + 60) * 1000,
  });
  if (result.status !== 0) throw new Error(`cannot stop ${name}: ${result.stderr}`);
  const seconds = (Date.now() - started) / 1000;
  return { seconds, exitCode: (await containerState(engine, name)).exitCode };
}

/** Removes containers (running or not); errors are ignored, this is cleanup. */
export async function removeContainers(engine: ContainerEngine, names: readonly string[]): Promise<void> {
  if (names.length > 0) await exec(engine.bin, ["rm", "-f", ...names], { timeoutMs: 120_000 }).catch(() => undefined);
}
