import { readScriptArgs } from "../../shared/commandLine.ts";
import { ensureAgentBenchOsImages } from "./agentbenchOs.ts";
import { type BuiltImage, buildImage, plannedImages } from "./build.ts";
import { detectEngine } from "./engine.ts";
import { ensureNodeBase } from "./standInBase.ts";

/**
 * `npm run images [-- --only functions,trainer-cpu] [--verbose]`: builds every image the CDK app
 * references (trainer in its CPU variant) with podman or Docker, making a stand-in
 * node:20-bookworm-slim first when the real one cannot be pulled. Prints one line per image
 * (build seconds, size, user). Exits 2 when no engine is available. `--agentbench-os` builds only
 * the images the os-std/os-dev/os-env_train episodes run in (kept when present).
 */
const SCRIPT = {
  command: "npm run images --",
  usage: "[--only functions,trainer-cpu,...] [--agentbench-os] [--verbose]",
};
const { values } = readScriptArgs(SCRIPT, {
  options: {
    only: { type: "string" },
    verbose: { type: "boolean", default: false },
    "agentbench-os": { type: "boolean", default: false },
  },
});
const log = (line: string) => process.stderr.write(`[images] ${line}\n`);

const engine = await detectEngine();
if (!engine) {
  log("neither podman nor a Docker daemon is available: install podman (apt-get install podman runc) or start Docker");
  process.exit(2);
}
log(`engine: ${engine.kind} ${engine.commonFlags.join(" ")}`);
if (values["agentbench-os"]) {
  const started = Date.now();
  const done = await ensureAgentBenchOsImages(engine, log);
  log(`agentbench-os images: ${JSON.stringify(done)} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  process.exit(0);
}
const baseStarted = Date.now();
const base = await ensureNodeBase(engine, log);
log(`node:20-bookworm-slim: ${base} (${((Date.now() - baseStarted) / 1000).toFixed(0)} s)`);

const only = values.only?.split(",").map((name) => name.trim());
const plan = (await plannedImages()).filter((image) => !only || only.includes(image.name));
if (only && plan.length !== only.length) {
  log(`--only names an unknown image; known: ${(await plannedImages()).map((image) => image.name).join(", ")}`);
  process.exit(2);
}
const built: BuiltImage[] = [];
for (const image of plan) {
  log(`building ${image.tag} from ${image.file} ${JSON.stringify(image.buildArgs)}`);
  built.push(
    await buildImage(engine, image, values.verbose ? { onOutput: (chunk) => process.stderr.write(chunk) } : {}),
  );
}
for (const { image, seconds, sizeBytes, user } of built)
  process.stdout.write(
    `${image.name.padEnd(12)} ${image.tag.padEnd(40)} ${seconds.toFixed(0).padStart(4)} s  ${(sizeBytes / 1e6).toFixed(0).padStart(5)} MB  user ${user}  roles ${image.roles.join(" ")}\n`,
  );
