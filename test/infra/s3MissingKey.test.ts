import { join } from "node:path";
import { CreateAccessKeyCommand, CreateUserCommand, IAMClient, PutUserPolicyCommand } from "@aws-sdk/client-iam";
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AccessKey, type EnforcingMoto, REGION, startEnforcingMoto } from "../../infra/rehearse/moto.ts";
import { AwsObjectStore } from "../../shared/transport/aws.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * S3's missing-key rule, which the rehearsal's moto shim applies (moto itself does not): a GET or
 * HEAD of a key that does not exist answers 404 only to a caller that may s3:ListBucket the
 * bucket, 403 otherwise. The object store reports a missing key (undefined) on 404 only and
 * throws on 403, so a role that reads keys which may be missing (the feeder's cursor, a rollout
 * worker's existing-trajectory check, the trainer's claim checks) needs ListBucket: treating 403
 * as "missing" would hide a real denial of an object that exists.
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

const BUCKET = "missing-key-rule";

describe("S3's missing-key rule under the rehearsal's enforcing moto", () => {
  let moto: EnforcingMoto;
  const stores = new Map<string, AwsObjectStore>();

  beforeAll(async () => {
    moto = await startEnforcingMoto(join(tempDir("agentrl-s3rule-"), "authorized.jsonl"));
    const clients = { region: REGION, endpoint: moto.endpoint, credentials: moto.admin };
    const s3 = new S3Client({ ...clients, forcePathStyle: true });
    const iam = new IAMClient(clients);
    try {
      await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
      await new AwsObjectStore(s3, BUCKET).put("data/present.json", "{}");
      const user = async (name: string, actions: Record<string, string>): Promise<AccessKey> => {
        await iam.send(new CreateUserCommand({ UserName: name }));
        const Statement = Object.entries(actions).map(([Action, Resource]) => ({ Effect: "Allow", Action, Resource }));
        await iam.send(
          new PutUserPolicyCommand({
            UserName: name,
            PolicyName: "read",
            PolicyDocument: JSON.stringify({ Version: "2012-10-17", Statement }),
          }),
        );
        const key = (await iam.send(new CreateAccessKeyCommand({ UserName: name }))).AccessKey;
        return { accessKeyId: key?.AccessKeyId ?? "", secretAccessKey: key?.SecretAccessKey ?? "" };
      };
      const objects = `arn:aws:s3:::${BUCKET}/data/*`;
      const keys = {
        getOnly: await user("get-only", { "s3:GetObject": objects }),
        getAndList: await user("get-and-list", {
          "s3:GetObject": objects,
          "s3:ListBucket": `arn:aws:s3:::${BUCKET}`,
        }),
      };
      for (const [name, credentials] of Object.entries(keys))
        stores.set(name, new AwsObjectStore(new S3Client({ ...clients, credentials, forcePathStyle: true }), BUCKET));
    } finally {
      s3.destroy();
      iam.destroy();
    }
  }, 120_000);

  afterAll(async () => {
    await moto?.stop();
  });

  const store = (name: string): AwsObjectStore => {
    const found = stores.get(name);
    if (!found) throw new Error(`no store for ${name}`);
    return found;
  };

  it("a caller with s3:ListBucket learns that a key is missing (404: undefined)", async () => {
    expect(await store("getAndList").getText("data/missing.json")).toBeUndefined();
    expect(await store("getAndList").head("data/missing.json")).toBeUndefined();
    expect(await store("getAndList").getText("data/present.json")).toBe("{}");
  });

  it("a caller without it is denied (403), and the store throws instead of reporting the key missing", async () => {
    expect(await store("getOnly").getText("data/present.json")).toBe("{}");
    const get = store("getOnly").getText("data/missing.json");
    await expect(get).rejects.toMatchObject({ $metadata: { httpStatusCode: 403 } });
    await expect(store("getOnly").head("data/missing.json")).rejects.toMatchObject({
      $metadata: { httpStatusCode: 403 },
    });
  });
});
