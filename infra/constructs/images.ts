import { existsSync } from "node:fs";
import { join } from "node:path";
import { IgnoreMode } from "aws-cdk-lib";
import * as ecs from "aws-cdk-lib/aws-ecs";
import { Construct } from "constructs";
import type { AgentBenchOsImage } from "../../shared/agentbench/osImages.ts";

/** Tasks that share one env image folder (a family of tasks served by one module). */
const ENV_IMAGE_FOLDER: Readonly<Record<string, string>> = {
  "os-std": "osbench",
  "os-dev": "osbench",
  "os-env_train": "osbench",
};

/** AgentBench's OS episode images, for a registry (the Debian stand-in is built offline instead). */
export const AGENTBENCH_OS_DOCKERFILE = "env-images/osbench/images/Dockerfile";

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

/** The trainer image's build argument that picks the CPU variant (wasm backend on node:20-bookworm-slim). */
export const TRAINER_CPU_BUILD_ARGS: Readonly<Record<string, string>> = { TFJS_BACKEND: "wasm" };

/** The trainer image's build argument that picks the WebGPU variant (Dawn on the host driver's Vulkan, no CUDA). */
export const TRAINER_WEBGPU_BUILD_ARGS: Readonly<Record<string, string>> = { TFJS_BACKEND: "webgpu" };

/**
 * The container images, built by `cdk deploy` as Docker image assets (synth only stages the
 * context; Docker is needed at deploy, not at synth). The context is the repository root and
 * its `.dockerignore` (which CDK reads too) keeps host node_modules, tests and runs out.
 * - `functions/Dockerfile`: controller, feeder, rollout workers, env pools and the env worker of
 *   every task (the tasks are pure TypeScript, so an image per task would be a copy of this one);
 *   no TF.js, since none of these runs a model;
 * - `trainer-image/Dockerfile`: trainer and policy servers (CUDA + tfjs-node-gpu, or Vulkan + Dawn
 *   in its WebGPU variant, {@link RoleImages.modelImage}), and in its CPU variant
 *   ({@link RoleImages.trainerCpu}) the sweep runner, whose points run the embedded pipeline with
 *   its trainer on Fargate;
 * - `env-images/<task>/Dockerfile`, only for a task that ships one because it needs more than
 *   the functions image holds (system packages, a simulator).
 */
export class RoleImages extends Construct {
  readonly functions: ecs.ContainerImage;
  readonly trainer: ecs.ContainerImage;
  private readonly root: string;
  private readonly envImages = new Map<string, ecs.ContainerImage>();
  private readonly osImages = new Map<AgentBenchOsImage, ecs.ContainerImage>();
  private cpuTrainer: ecs.ContainerImage | undefined;
  private webgpuTrainer: ecs.ContainerImage | undefined;
  private readonly assets = new Map<string, ImageBuild>();

  constructor(scope: Construct, id: string, props: RoleImagesProps) {
    super(scope, id);
    this.root = props.repositoryRoot;
    this.functions = this.fromDockerfile("functions/Dockerfile");
    this.trainer = this.fromDockerfile("trainer-image/Dockerfile");
  }

  /**
   * Relative path of the Dockerfile a task may ship to get its own env worker image: the task's
   * folder, or the folder of the family it belongs to (os-std, os-dev, os-env_train: osbench).
   */
  static envDockerfile(task: string): string {
    return `env-images/${ENV_IMAGE_FOLDER[task] ?? task}/Dockerfile`;
  }

  /**
   * An image AgentBench's OS episodes run in (`default`, or `packages` with npm), built from
   * env-images/osbench/images/Dockerfile. Built only when something uses it.
   */
  agentBenchOs(subtype: AgentBenchOsImage): ecs.ContainerImage {
    const known = this.osImages.get(subtype);
    if (known) return known;
    const image = this.fromDockerfile(
      AGENTBENCH_OS_DOCKERFILE,
      subtype === "packages" ? { EXTRA_PACKAGES: "npm" } : {},
    );
    this.osImages.set(subtype, image);
    return image;
  }

  /** Every distinct image this app builds at deploy (`npm run images` builds the same list). */
  get builds(): readonly ImageBuild[] {
    return [...this.assets.values()];
  }

  /**
   * The trainer image's CPU variant (`TFJS_BACKEND=wasm`, no CUDA): for roles that run a model
   * on CPU capacity, i.e. the sweep runner on Fargate. Built only when something uses it.
   */
  get trainerCpu(): ecs.ContainerImage {
    this.cpuTrainer ??= this.fromDockerfile("trainer-image/Dockerfile", TRAINER_CPU_BUILD_ARGS);
    return this.cpuTrainer;
  }

  /**
   * The trainer image's WebGPU variant (`TFJS_BACKEND=webgpu`): node:20-bookworm-slim with the
   * Vulkan loader and the NVIDIA ICD manifest; the driver comes from the GPU host. Built only when
   * something uses it.
   */
  get trainerWebgpu(): ecs.ContainerImage {
    this.webgpuTrainer ??= this.fromDockerfile("trainer-image/Dockerfile", TRAINER_WEBGPU_BUILD_ARGS);
    return this.webgpuTrainer;
  }

  /**
   * The image of the roles that run the model on a GPU (trainer, policy servers) for the config's
   * `policy.backend`: the WebGPU variant for `webgpu`, else the CUDA one (whose `auto` prefers
   * tfjs-node-gpu).
   */
  modelImage(backend: string): ecs.ContainerImage {
    return backend === "webgpu" ? this.trainerWebgpu : this.trainer;
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

  private fromDockerfile(file: string, buildArgs: Readonly<Record<string, string>> = {}): ecs.ContainerImage {
    this.assets.set(`${file} ${JSON.stringify(buildArgs)}`, { file, buildArgs });
    return ecs.ContainerImage.fromAsset(this.root, {
      file,
      ignoreMode: IgnoreMode.DOCKER,
      ...(Object.keys(buildArgs).length > 0 ? { buildArgs: { ...buildArgs } } : {}),
    });
  }
}
