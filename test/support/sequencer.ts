import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The shared files run on two threads; a long file started last leaves one idle while it ends. These
 * files each run a pipeline, a deploy rehearsal or container images for a minute or more, so they
 * start first, longest first, and the short files fill in around them. A file missing from the
 * list keeps vitest's own order after them.
 */
const LONG_FIRST = [
  "test/infra/containers.test.ts",
  "test/readme/commands.test.ts",
  "test/e2e/chaos.test.ts",
  "test/e2e/seeded.test.ts",
  "test/e2e/learning.test.ts",
  "test/infra/rehearse.test.ts",
  "test/unit/cliConventions.test.ts",
  "test/unit/cli.test.ts",
  "test/agentbench/os-sandbox.test.ts",
  "test/gateway/train-run.test.ts",
  "test/model/dataParallel.test.ts",
  "test/agentbench/dbbench.test.ts",
];

export default class LongFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification) => {
      const index = LONG_FIRST.findIndex((suffix) => file.moduleId.endsWith(suffix));
      return index === -1 ? LONG_FIRST.length : index;
    };
    return sorted
      .map((file, position) => ({ file, position }))
      .sort((a, b) => rank(a.file) - rank(b.file) || a.position - b.position)
      .map(({ file }) => file);
  }
}
