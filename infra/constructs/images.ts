import { existsSync } from "node:fs";
import { join } from "node:path";
import { IgnoreMode } from "aws-cdk-lib";
import * as ecs from "aws-cdk-lib/aws-ecs";
import { Construct } from "constructs";

/**
 * Files never sent to `docker build`: the images run `npm ci` themselves, and tests, runs and
 * synth output only bloat the context (and its fingerprint).
 */
export const IMAGE_CONTEXT_EXCLUDES: readonly string[] = [
  "node_modules",
  "**/node_modules",
  ".git",
  "cdk.out",
  "runs",
  ".agentrl",
  "coverage",
  "test",
  "bench",
  "*.log",
  "*.tmp.ts",
];

/** Props of {@link RoleImages}. */
export interface RoleImagesProps {
  /** The repository root: every image builds with it as context (they all need shared/, cli/, bin/). */
  readonly repositoryRoot: string;
}

/**
 * The container images, built by `cdk deploy` as Docker image assets (synth only stages the
 * context; Docker is needed at deploy, not at synth):
 * - `functions/Dockerfile`: controller, feeder, rollout workers, sweep runner (and any task
 *   without its own image);
 * - `trainer-image/Dockerfile`: trainer and policy servers (CUDA + tfjs-node-gpu);
 * - `env-images/<task>/Dockerfile`: one env worker image per task that ships one.
 */
export class RoleImages extends Construct {
  readonly functions: ecs.ContainerImage;
  readonly trainer: ecs.ContainerImage;
  private readonly root: string;
  private readonly envImages = new Map<string, ecs.ContainerImage>();

  constructor(scope: Construct, id: string, props: RoleImagesProps) {
    super(scope, id);
    this.root = props.repositoryRoot;
    this.functions = this.fromDockerfile("functions/Dockerfile");
    this.trainer = this.fromDockerfile("trainer-image/Dockerfile");
  }

  /** Relative path of the Dockerfile that builds `task`'s env worker. */
  static envDockerfile(task: string): string {
    return `env-images/${task}/Dockerfile`;
  }

  /**
   * The env worker image of `task`: its own `env-images/<task>/Dockerfile` when the task ships
   * one, otherwise the functions image (the whole repository; `agentrl env serve <task>` runs
   * any registered task that needs no system packages).
   */
  env(task: string): ecs.ContainerImage {
    const known = this.envImages.get(task);
    if (known) return known;
    const file = RoleImages.envDockerfile(task);
    const image = existsSync(join(this.root, file)) ? this.fromDockerfile(file) : this.functions;
    this.envImages.set(task, image);
    return image;
  }

  private fromDockerfile(file: string): ecs.ContainerImage {
    return ecs.ContainerImage.fromAsset(this.root, {
      file,
      exclude: [...IMAGE_CONTEXT_EXCLUDES],
      ignoreMode: IgnoreMode.DOCKER,
    });
  }
}
