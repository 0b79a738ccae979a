/**
 * `npm run rehearse`: the deploy rehearsal (see rehearse.ts) on this machine, offline.
 *   npm run rehearse                                        # must pass
 *   npm run rehearse -- --drop 'feeder s3:PutObject feeder/' # one grant removed: must fail naming it
 * Exit code 0 when it passed (or, with --drop, when it failed naming the dropped grant).
 */
import { rehearse, synthesizeForRehearsal } from "./rehearse.ts";

const dropIndex = process.argv.indexOf("--drop");
const dropText = dropIndex >= 0 ? process.argv[dropIndex + 1] : undefined;
const [roleKey, action, resource] = dropText?.split(" ") ?? [];
if (dropText !== undefined && (!roleKey || !action || !resource)) {
  process.stderr.write(
    `--drop: "${dropText}" must be "<role> <action> <resource substring>", e.g. "feeder s3:PutObject feeder/"\n`,
  );
  process.exit(2);
}
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
const templates = synthesizeForRehearsal();
const result = await rehearse({
  templates,
  ...(roleKey && action && resource
    ? { dropGrant: { roleKey, action, resource: new RegExp(resource.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")) } }
    : {}),
});
process.stdout.write(`${JSON.stringify(result)}\n`);
if (dropText === undefined) {
  process.stdout.write(
    result.passed ? `rehearsal passed in ${result.seconds.toFixed(0)} s\n` : `rehearsal FAILED: ${result.failure}\n`,
  );
  process.exit(result.passed ? 0 : 1);
}
const named = result.denials.some((d) => d.role === roleKey && d.action === action && d.resource.includes(resource!));
process.stdout.write(
  named
    ? `without that grant the rehearsal fails as it should: ${result.failure}\n`
    : `expected a denial of ${dropText}, got: ${result.failure || "a pass"}\n`,
);
process.exit(named ? 0 : 1);
