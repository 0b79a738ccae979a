/**
 * Which grants a rehearsal needed. moto (enforcing IAM) logs every request it authorizes as
 * (access key, action, resource); a grant — one action on one resource pattern of one role's
 * statements — is *needed* when some request of that role was permitted by it and by no other
 * grant of the role. Every needed grant, removed, turns a request the run made into a denial, so
 * "every grant is needed" is "dropping any one grant fails the rehearsal" without running it once
 * per grant. A grant that is not needed is one the role does not use (or a duplicate) — unless
 * it serves a failure path the run did not meet ({@link failurePathReason}).
 */
import type { PolicyStatement } from "./template.ts";

/** One request moto authorized. */
export interface AuthorizedRequest {
  readonly accessKeyId: string;
  readonly action: string;
  readonly resource: string;
}

/** One action on one resource pattern, as a role's policy grants it. */
export interface Grant {
  readonly role: string;
  readonly action: string;
  readonly resource: string;
}

/** The grants of `statements` (Allow only), one per action and resource pattern. */
export function grantsOf(role: string, statements: readonly PolicyStatement[]): Grant[] {
  return statements
    .filter((statement) => statement.Effect === "Allow")
    .flatMap((statement) =>
      [statement.Action]
        .flat()
        .flatMap((action) => [statement.Resource].flat().map((resource) => ({ role, action, resource }))),
    );
}

/** IAM's wildcard match (`*` any run of characters, `?` one), whole string, case-sensitive. */
export function iamMatches(pattern: string, value: string): boolean {
  const source = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${source}$`).test(value);
}

/**
 * The grants no request needed. `roleOfKey` maps an access key to its role (requests by other
 * keys, e.g. the deploying admin, are ignored).
 */
export function unneededGrants(
  grants: readonly Grant[],
  requests: readonly AuthorizedRequest[],
  roleOfKey: ReadonlyMap<string, string>,
): Grant[] {
  const needed = new Set<Grant>();
  for (const request of requests) {
    const role = roleOfKey.get(request.accessKeyId);
    if (role === undefined) continue;
    const permitting = grants.filter(
      (grant) =>
        grant.role === role && iamMatches(grant.action, request.action) && iamMatches(grant.resource, request.resource),
    );
    const [only] = permitting;
    if (permitting.length === 1 && only) needed.add(only);
  }
  return grants.filter((grant) => !needed.has(grant));
}

/**
 * Why a grant may go unused by a run that succeeds, or undefined: no reason, so the grant should
 * not be there. The rehearsal exercises the failure paths it can (a poison message in every
 * consumed queue uses each consumer's ChangeMessageVisibility and dead-letter grants; its moto
 * shim applies S3's missing-key rule, so reading a key that may be missing uses s3:ListBucket).
 * What is left is a ListBucket grant on a bucket whose role read no missing key in the run: the
 * trainer reads only trajectories that exist, unless a TrajectoryReady names a missing object;
 * then the 404 lets it dead-letter that message as "does not exist" rather than as an access
 * denial (test/infra/s3MissingKey.test.ts shows the 403 a caller without ListBucket gets).
 * Exercising that in the rehearsal would cost it a training step.
 */
export function failurePathReason(grant: Grant): string | undefined {
  if (grant.action === "s3:ListBucket")
    return "S3 answers a GET of a missing key with 404 only to a caller that may list (403 otherwise); this role read no missing key of the bucket in the run";
  return undefined;
}

/** Parses moto's authorization log (one JSON object per line, written by the rehearsal's shim). */
export function parseAuthorizationLog(text: string): AuthorizedRequest[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const entry = JSON.parse(line) as Partial<AuthorizedRequest>;
      if (
        typeof entry.accessKeyId !== "string" ||
        typeof entry.action !== "string" ||
        typeof entry.resource !== "string"
      )
        throw new Error(`malformed authorization log line: ${line.slice(0, 200)}`);
      return { accessKeyId: entry.accessKeyId, action: entry.action, resource: entry.resource };
    });
}
