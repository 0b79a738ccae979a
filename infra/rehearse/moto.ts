/**
 * The rehearsal's AWS: `python3 -m moto.server` with IAM enforced, a shim for the moto quirks
 * that would deny calls AWS allows (or allow calls AWS denies), and a log of every request it
 * authorized (grantUse.ts reads it).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { CreateAccessKeyCommand, CreateUserCommand, IAMClient, PutUserPolicyCommand } from "@aws-sdk/client-iam";
import { freePort } from "../../shared/net.ts";

/** The region every rehearsal client and role uses. */
export const REGION = "us-east-1";

/** Keys of an IAM user. */
export interface AccessKey {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

/** A running enforcing moto server. */
export interface EnforcingMoto {
  readonly endpoint: string;
  readonly child: ChildProcess;
  /** Keys of the admin user (Action * on *), made with the server's free setup calls. */
  readonly admin: AccessKey;
  /** Stops the server. */
  stop(): Promise<void>;
}

/**
 * `python3 -m moto.server` that enforces IAM: after its three unauthenticated calls (create the
 * admin, attach its policy, make its key) every request must be signed by a user whose policies
 * allow it. `host` is the address it listens on (containers reach the host at a non-loopback one).
 */
export async function startEnforcingMoto(authorizationLog: string, host = "127.0.0.1"): Promise<EnforcingMoto> {
  const port = await freePort();
  const endpoint = `http://${host}:${port}`;
  const child = spawn("python3", ["-c", MOTO_SERVER_WITH_QUERY_FIX, host, String(port), authorizationLog], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  for (const deadline = Date.now() + 60_000; ; ) {
    if (child.exitCode !== null) throw new Error(`moto exited: ${stderr}`);
    try {
      if ((await fetch(`${endpoint}/moto-api/`)).status < 500) break;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`moto did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const reset = await fetch(`${endpoint}/moto-api/reset-auth`, { method: "POST", body: String(ADMIN_SETUP_CALLS) });
  if (!reset.ok) throw new Error(`moto reset-auth: ${reset.status}`);
  const admin = await createAdmin(endpoint);
  const stop = async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    if (child.exitCode === null) child.kill("SIGKILL");
  };
  return { endpoint, child, admin, stop };
}

const ADMIN_SETUP_CALLS = 3;

/**
 * moto 5.2.1's server checks a signature against the URL as werkzeug hands it over, with `%2F`
 * in query values decoded to `/`, so every signed ListObjectsV2 with a prefix fails with
 * SignatureDoesNotMatch (in-process moto is not affected). This starts the same server with the
 * query re-encoded the way SigV4 canonicalizes it before the check. And moto authorizes
 * sqs:GetQueueUrl against '*' (it looks for a QueueUrl parameter, which that call does not have),
 * where AWS uses the named queue's ARN; the shim lets it find the queue by its QueueName. And
 * moto asks for sqs:SendMessageBatch (etc.) where AWS authorizes a batch as its single action.
 * And it appends every authorized request (access key, action, resource) to the file named by its
 * third argument, from which the rehearsal tells which grants were needed (grantUse.ts).
 * And it applies S3's missing-key rule, which moto does not model: a GET or HEAD of a key that
 * does not exist is answered 404 only when the caller may s3:ListBucket the bucket, 403
 * otherwise (AWS: "If you don't have the s3:ListBucket permission, Amazon S3 returns an HTTP
 * status code 403"); the ListBucket check is logged like any other, so the roles that read keys
 * which may be missing (the feeder's cursor, a rollout worker's existing-trajectory check) need
 * their ListBucket grant by a request of the run. Nothing else changes.
 */
const MOTO_SERVER_WITH_QUERY_FIX = `
import sys
from urllib.parse import quote, unquote
from moto.iam import access_control
original = access_control.IAMRequestBase._create_aws_request
def _create_aws_request(self):
    path, sep, query = self._path.partition("?")
    if sep:
        pairs = [pair.partition("=") for pair in query.split("&") if pair]
        self._path = path + "?" + "&".join(
            quote(unquote(k), safe="-_.~") + ("=" + quote(unquote(v), safe="-_.~") if eq else "")
            for k, eq, v in pairs)
    return original(self)
access_control.IAMRequestBase._create_aws_request = _create_aws_request
request_init = access_control.IAMRequestBase.__init__
def __init__(self, *args, **kwargs):
    request_init(self, *args, **kwargs)
    if self._action.startswith("sqs:") and self._action.endswith("Batch"):
        self._action = self._action[: -len("Batch")]
access_control.IAMRequestBase.__init__ = __init__
import json, threading
authorized_log = open(sys.argv[3], "a", buffering=1)
authorized_lock = threading.Lock()
check_action_permitted = access_control.IAMRequestBase.check_action_permitted
def check_and_log(self, resource):
    check_action_permitted(self, resource)
    key = self._get_string_between("Credential=", ",", self._headers["Authorization"]).split("/")[0]
    with authorized_lock:
        authorized_log.write(json.dumps({"accessKeyId": key, "action": self._action, "resource": resource}) + "\\n")
access_control.IAMRequestBase.check_action_permitted = check_and_log
from moto.sqs import responses as sqs_responses
queue_name = sqs_responses.SQSResponse._get_queue_name
def _get_queue_name(self):
    named = self._get_param("QueueName")
    return named if self._get_param("QueueUrl") is None and named else queue_name(self)
sqs_responses.SQSResponse._get_queue_name = _get_queue_name
from urllib.parse import urlparse
from moto import settings
from moto.core.authorization import ActionAuthenticatorMixin
from moto.s3 import responses as s3_responses
from moto.s3.exceptions import S3ClientError
key_response = s3_responses.S3Response.key_response
ACCESS_DENIED = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
def key_response_with_list_rule(self, request, full_url, headers):
    status, response_headers, body = key_response(self, request, full_url, headers)
    if (status == 404 and request.method in ("GET", "HEAD") and "Authorization" in request.headers
            and ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT):
        parsed = urlparse(self.uri)
        try:
            access_control.S3IAMRequest(
                account_id=self.current_account, method=self.method,
                path=parsed.path + ("?" + parsed.query if parsed.query else ""),
                data=self.data, body=self.raw_body, headers=self.headers, action="ListBucket",
            ).check_action_permitted("arn:aws:s3:::" + self.parse_bucket_name_from_url(request, full_url))
        except S3ClientError:
            return 403, {"content-type": "application/xml"}, ACCESS_DENIED if request.method == "GET" else ""
    return status, response_headers, body
s3_responses.S3Response.key_response = key_response_with_list_rule
from moto.server import main
main(["-H", sys.argv[1], "-p", sys.argv[2]])
`;

async function createAdmin(endpoint: string): Promise<AccessKey> {
  // Unsigned-in-effect: these are the server's ADMIN_SETUP_CALLS free calls.
  const iam = new IAMClient({
    region: REGION,
    endpoint,
    credentials: { accessKeyId: "bootstrap", secretAccessKey: "bootstrap" },
  });
  try {
    await iam.send(new CreateUserCommand({ UserName: "rehearsal-admin" }));
    await iam.send(
      new PutUserPolicyCommand({
        UserName: "rehearsal-admin",
        PolicyName: "admin",
        PolicyDocument: JSON.stringify({
          Version: "2012-10-17",
          Statement: [{ Effect: "Allow", Action: "*", Resource: "*" }],
        }),
      }),
    );
    const key = (await iam.send(new CreateAccessKeyCommand({ UserName: "rehearsal-admin" }))).AccessKey;
    return { accessKeyId: key?.AccessKeyId ?? "", secretAccessKey: key?.SecretAccessKey ?? "" };
  } finally {
    iam.destroy();
  }
}
