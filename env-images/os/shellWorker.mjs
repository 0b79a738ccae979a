// Worker thread hosting one just-bash sandbox at a time (plain JS so it loads without a TS loader).
// A runaway command burns this thread's CPU, never the main thread's: the env worker keeps
// answering other sessions and heartbeats while just-bash's own deadline stops the loop here.
import { parentPort } from "node:worker_threads";
import { Bash } from "just-bash";

// Paths of the just-bash layout itself (command stubs, devices); not part of any task's state.
const SYSTEM_PREFIXES = ["/bin/", "/usr/", "/dev/", "/proc/"];

let bash;
let commandTimeoutMs = 30_000;

async function snapshot() {
  const files = {};
  const dirs = [];
  for (const path of bash.fs.getAllPaths()) {
    if (SYSTEM_PREFIXES.some((prefix) => path.startsWith(prefix))) continue;
    try {
      const stat = await bash.fs.lstat(path);
      if (stat.isFile) files[path] = await bash.fs.readFile(path);
      else if (stat.isDirectory) dirs.push(path);
    } catch {
      // vanished between listing and reading: not part of the final state
    }
  }
  return { files, dirs };
}

async function handle(message) {
  switch (message.type) {
    case "reset": {
      commandTimeoutMs = message.limits.commandTimeoutMs;
      bash = new Bash({
        files: message.files,
        cwd: message.home,
        env: { HOME: message.home, USER: "user" },
        executionLimits: {
          maxExecutionTimeMs: message.limits.commandTimeoutMs,
          maxOutputSize: message.limits.maxOutputBytes,
          maxFileSystemBytes: message.limits.maxFileSystemBytes,
          maxStringLength: 4 * 1024 * 1024,
          maxHeredocSize: 1024 * 1024,
        },
      });
      return { type: "ready" };
    }
    case "run": {
      const deadline = new AbortController();
      const timer = setTimeout(() => deadline.abort(), commandTimeoutMs);
      const started = Date.now();
      try {
        const result = await bash.exec(message.script, { signal: deadline.signal });
        const elapsedMs = Date.now() - started;
        const timedOut =
          deadline.signal.aborted || (elapsedMs >= commandTimeoutMs && /deadline|aborted/.test(result.stderr));
        return { type: "ran", stdout: result.stdout, stderr: result.stderr, timedOut };
      } finally {
        clearTimeout(timer);
      }
    }
    case "snapshot":
      return { type: "snapshot", ...(await snapshot()) };
    default:
      throw new Error(`unknown request type ${String(message.type)}`);
  }
}

parentPort.on("message", async (message) => {
  try {
    parentPort.postMessage({ id: message.id, ok: true, body: await handle(message) });
  } catch (error) {
    parentPort.postMessage({
      id: message.id,
      ok: false,
      error: error instanceof Error ? error.message : String(error),
    });
  }
});
