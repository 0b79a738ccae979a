import { existsSync } from "node:fs";
import { join } from "node:path";
import { IgnoreMode } from "aws-cdk-lib";
import * as ecs from "aws-cdk-lib/aws-ecs";
import { Construct } from "constructs";

/** Props of {@link RoleImages}. */
export interface RoleImagesProps {
  /** The repository root: every image builds with it as context (they all need shared/, cli/, bin/). */
  readonly repositoryRoot: string;
}

/** One image build `cdk deploy` performs: a Dockerfile of the repository and its build arguments. */
export interface ImageBuild {
  /** Relative path of the Dockerfile (the context is always the repository root). */
  readonly file: string;
  readonly buildArgs: Readonly<Record<string, string>>;
}

/**
 * The container images, built by `cdk deploy` as Docker image assets (synth only stages the
 * context; Docker is needed at deploy, not at synth). The context is the repository root and
 * its `.dockerignore` (which CDK reads too) keeps host node_modules, tests and runs out.
 * - `functions/Dockerfile`: controller, feeder, rollout workers, sweep runner and the env worker
 *   of every task (the tasks are pure TypeScript, so an image per task would be a copy of this one);
 * - `trainer-image/Dockerfile`: trainer and policy servers (CUDA + tfjs-node-gpu);
 * - `env-images/<task>/Dockerfile`, only for a task that ships one because it needs more than
 *   the functions image holds (system packages, a simulator).
 */
export class RoleImages extends Construct {
  readonly functions: ecs.ContainerImage;
  readonly trainer: ecs.ContainerImage;
  private readonly root: string;
  private readonly envImages = new Map<string, ecs.ContainerImage>();
  private readonly assets = new Map<string, ImageBuild>();

  constructor(scope: Construct, id: string, props: RoleImagesProps) {
    super(scope, id);
    this.root = props.repositoryRoot;
    this.functions = this.fromDockerfile("functions/Dockerfile");
    this.trainer = this.fromDockerfile("trainer-image/Dockerfile");
  }

  /** Relative path of the Dockerfile a task may ship to get its own env worker image. */
  static envDockerfile(task: string): string {
    return `env-images/${task}/Dockerfile`;
  }

  /** Every distinct image this app builds at deploy (`npm run images` builds the same list). */
  get builds(): readonly ImageBuild[] {
    return [...this.assets.values()];
  }

  /**
   * The env worker image of `task`: its own `env-images/<task>/Dockerfile` when the task ships
   * one, otherwise the functions image (`agentrl container` with AGENTRL_ROLE=env and
   * AGENTRL_TASK serves any registered task).
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
    this.assets.set(file, { file, buildArgs: {} });
    return ecs.ContainerImage.fromAsset(this.root, { file, ignoreMode: IgnoreMode.DOCKER });
  }
}
