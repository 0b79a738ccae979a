import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import { listen } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { loadHfPolicy, readHfFolder } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { updateWeightsFromDisk, WeightSyncError } from "../../shared/policy/weight-sync.ts";
import { ChatCompletionResponse, POLICY_VERSION_HEADER } from "../../shared/protocol/openai.ts";
import { createPolicyServer } from "../../trainer-image/policy-server/app.ts";
import { runProcess } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { numpyMissing, requireOrSkip } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";

const hasNumpy = requireOrSkip("weight-sync.test.ts", "numerics against the numpy reference forward", numpyMissing());
const REFERENCE = fileURLToPath(new URL("../fixtures/hf_reference.py", import.meta.url));

beforeAll(async () => {
  await initBackend("wasm");
});

describe.skipIf(!hasNumpy)(
  "weight sync to an engine (SGLang's update_weights_from_disk, implemented by our server)",
  () => {
    it("serves the new version only after the engine confirms, with the new folder's numerics", async () => {
      const work = tempDir("agentrl-sync-");
      const first = join(work, "v0");
      const next = join(work, "v3");
      writeTinyHfFolder(first, { seed: 1 });
      writeTinyHfFolder(next, { seed: 2 });
      const folder = await readHfFolder(first);
      const server = createPolicyServer({
        policy: await loadHfPolicy(first, 0),
        codec: ChatCodec.fromTokenizerJson(JSON.parse(folder.tokenizerJson)),
        log: createLogger({ role: "test" }),
        maxBatch: 4,
        loadWeights: loadHfPolicy,
      });
      const http = await listen(server.app, 0, "127.0.0.1");
      const ask = async () => {
        const response = await fetch(`${http.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            messages: [{ role: "user", content: "What is 2 + 3?" }],
            max_tokens: 6,
            seed: 3,
            logprobs: true,
            return_token_ids: true,
          }),
        });
        return {
          version: response.headers.get(POLICY_VERSION_HEADER),
          body: ChatCompletionResponse.parse(await response.json()),
        };
      };
      try {
        expect((await ask()).version).toBe("0");
        // A folder that does not load is refused, and the old weights keep serving.
        const refused = updateWeightsFromDisk(http.url, { modelPath: join(work, "missing"), version: 3 });
        await expect(refused).rejects.toBeInstanceOf(WeightSyncError);
        await expect(updateWeightsFromDisk(http.url, { modelPath: join(work, "missing"), version: 3 })).rejects.toThrow(
          /version 3 not loaded: model_path: .*missing does not exist/,
        );
        expect(server.version()).toBe(0);

        await updateWeightsFromDisk(`${http.url}/v1`, { modelPath: next, version: 3 });
        expect(server.version()).toBe(3);
        const { version, body } = await ask();
        expect(version).toBe("3");
        const ids = [...body.prompt_token_ids!, ...body.choices[0]!.token_ids!];
        const run = await runProcess("python3", [REFERENCE, next, "1", JSON.stringify([ids])]);
        const expected = (JSON.parse(run.stdout) as number[][])[0]!;
        const got = body.choices[0]!.logprobs!.content.map((c) => c.logprob);
        got.forEach((logprob, t) => {
          expect(Math.abs(logprob - expected[body.prompt_token_ids!.length + t]!)).toBeLessThan(1e-3);
        });
      } finally {
        await http.close();
        await server.close();
      }
    });
  },
);
