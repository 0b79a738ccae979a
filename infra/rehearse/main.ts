/**
 * `npm run rehearse`: the deploy rehearsal (see rehearse.ts) on this machine, offline.
 *   npm run rehearse                                        # must pass
 *   npm run rehearse -- --drop 'feeder s3:PutObject feeder/' # one grant removed: must fail naming it
 *   npm run rehearse -- --runner container                  # every role a container of its image (podman or Docker)
 * Exit code 0 when it passed (or, with --drop, when it failed naming the dropped grant).
 */
import { abortOnStopSignals, readScriptArgs, usageError } from "../../shared/commandLine.ts";
import { buildImage, imageServing, plannedImages } from "../images/build.ts";
import { detectEngine } from "../images/engine.ts";
import { ensureNodeBase } from "../images/standInBase.ts";
import { rehearse, synthesizeForRehearsal } from "./rehearse.ts";
import { containerRunner, processRunner, type RoleRunner } from "./runners.ts";

const SCRIPT = {
  command: "npm run rehearse --",
  usage: "[--drop '<role> <action> <resource substring>'] [--runner process|container]",
};
const { values } = readScriptArgs(SCRIPT, {
  options: { drop: { type: "string" }, runner: { type: "string", default: "process" } },
});
const dropText = values.drop;
const [roleKey, action, resource] = dropText?.split(" ") ?? [];
if (dropText !== undefined && (!roleKey || !action || !resource))
  usageError(
    SCRIPT,
    `--drop: "${dropText}" must be "<role> <action> <resource substring>", e.g. "feeder s3:PutObject feeder/"`,
  );
const runnerKind = values.runner;
if (runnerKind !== "process" && runnerKind !== "container")
  usageError(SCRIPT, `--runner: "${runnerKind}" must be process or container`);
// A stop signal ends the run the way its end does: the roles and the moto server are stopped.
const stopped = abortOnStopSignals(SCRIPT, "the roles and the moto server");
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

/** The container runner over freshly built images (layers cached: seconds when nothing changed). */
async function containers(): Promise<RoleRunner> {
  const engine = await detectEngine();
  if (!engine) {
    process.stderr.write("--runner container needs podman (apt-get install podman runc debootstrap) or Docker\n");
    process.exit(2);
  }
  await ensureNodeBase(engine, (line) => process.stderr.write(`[images] ${line}\n`));
  const plan = await plannedImages();
  for (const image of plan) await buildImage(engine, image);
  return containerRunner({ engine, imageOf: (role) => imageServing(plan, role) });
}

const templates = synthesizeForRehearsal();
const result = await rehearse({
  templates,
  runner: runnerKind === "container" ? await containers() : processRunner(),
  ...(runnerKind === "container" ? { timeoutMs: 600_000 } : {}),
  signal: stopped,
  ...(roleKey && action && resource
    ? { dropGrant: { roleKey, action, resource: new RegExp(resource.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")) } }
    : {}),
}).catch((error: unknown) => {
  // stopped before any role started: nothing was left running
  if (!stopped.aborted) throw error;
  process.stderr.write(`rehearsal stopped by ${String(stopped.reason)} before its roles started\n`);
  process.exit(1);
});
process.stdout.write(`${JSON.stringify(result)}\n`);
if (dropText === undefined) {
  process.stdout.write(
    result.passed ? `rehearsal passed in ${result.seconds.toFixed(0)} s\n` : `rehearsal FAILED: ${result.failure}\n`,
  );
  process.exit(result.passed ? 0 : 1);
}
// Without s3:ListBucket, S3 (and the rehearsal's moto shim) answers a GET of a missing key with
// 403, which the role reports as a denial of s3:GetObject on that key of the bucket.
const deniedAs = action === "s3:ListBucket" ? ["s3:ListBucket", "s3:GetObject"] : [action];
const named = result.denials.some(
  (d) => d.role === roleKey && deniedAs.includes(d.action) && d.resource.includes(resource!),
);
process.stdout.write(
  named
    ? `without that grant the rehearsal fails as it should: ${result.failure}\n`
    : `expected a denial of ${dropText}, got: ${result.failure || "a pass"}\n`,
);
process.exit(named ? 0 : 1);
