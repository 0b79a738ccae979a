import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { App } from "aws-cdk-lib";
import { type ContainerRole, ContainerRole as ContainerRoleSchema } from "../../shared/config/containerEnv.ts";
import { loadConfig } from "../../shared/config/index.ts";
import { buildAgentRlApp } from "../agentRlApp.ts";
import { AGENTBENCH_OS_DOCKERFILE, type ImageBuild, TRAINER_CPU_BUILD_ARGS } from "../constructs/images.ts";
import { type ContainerEngine, engineExec } from "./engine.ts";

export const REPOSITORY_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The experiment whose CDK app decides which images exist (its task mix names the env workers). */
export const PLAN_CONFIG = join(REPOSITORY_ROOT, "configs/quickstart.yaml");

/** One image to build here: a Dockerfile the CDK app references, with the build arguments used locally. */
export interface PlannedImage extends ImageBuild {
  /** Short name: functions, trainer-cpu, env-<task>. */
  readonly name: string;
  /** Local tag, e.g. localhost/agentrl-ts/functions:dev. */
  readonly tag: string;
  /** Roles the image serves (its `org.agentrl.roles` label). */
  readonly roles: readonly ContainerRole[];
}

/** The roles a Dockerfile's final stage declares in its `org.agentrl.roles` label. */
export function dockerfileRoles(file: string, root = REPOSITORY_ROOT): ContainerRole[] {
  const text = readFileSync(join(root, file), "utf8");
  const label = /^LABEL\s+org\.agentrl\.roles="([^"]*)"/m.exec(text)?.[1];
  if (label === undefined) throw new Error(`${file} has no org.agentrl.roles label`);
  return label.split(/\s+/).map((role) => ContainerRoleSchema.parse(role));
}

/**
 * Every image the CDK app references (read from the app's RoleImages, not restated), with the
 * trainer image in its CPU variant: the CUDA base cannot be fetched offline and a CPU-only
 * machine cannot use it, so it is built with TFJS_BACKEND=wasm (same Dockerfile).
 */
export async function plannedImages(configFile = PLAN_CONFIG, root = REPOSITORY_ROOT): Promise<PlannedImage[]> {
  const outdir = mkdtempSync(join(tmpdir(), "agentrl-plan-"));
  try {
    // cdk.json's feature flags, as `cdk synth` applies them; no asset staging (only the list is needed).
    const cdkJson = JSON.parse(readFileSync(join(root, "cdk.json"), "utf8")) as { context?: Record<string, unknown> };
    const app = new App({ outdir, context: { ...cdkJson.context, "aws:cdk:disable-asset-staging": true } });
    const { compute } = buildAgentRlApp(app, { config: await loadConfig(configFile), repositoryRoot: root });
    const planned = new Map<string, PlannedImage>();
    for (const build of compute.images.builds) {
      // AgentBench's OS episode images come from ubuntu on a registry; offline, `--agentbench-os`
      // builds their Debian stand-in instead.
      if (build.file === AGENTBENCH_OS_DOCKERFILE) continue;
      // Both trainer builds (GPU, and the CPU variant a sweep uses) are the CPU variant here.
      const cpuTrainer = build.file === "trainer-image/Dockerfile";
      const name = cpuTrainer
        ? "trainer-cpu"
        : build.file === "functions/Dockerfile"
          ? "functions"
          : `env-${build.file.split("/")[1]}`;
      planned.set(name, {
        ...build,
        buildArgs: cpuTrainer ? { ...build.buildArgs, ...TRAINER_CPU_BUILD_ARGS } : build.buildArgs,
        name,
        tag: `localhost/agentrl-ts/${name}:dev`,
        roles: dockerfileRoles(build.file, root),
      });
    }
    return [...planned.values()];
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

/** What one build produced. */
export interface BuiltImage {
  readonly image: PlannedImage;
  readonly seconds: number;
  /** Bytes, as the engine reports them (uncompressed). */
  readonly sizeBytes: number;
  /** The image's USER. */
  readonly user: string;
}

/**
 * Builds one image with the repository root as context (cached layers are reused; `--pull=never`
 * so a stand-in base is never replaced by a registry lookup).
 */
export async function buildImage(
  engine: ContainerEngine,
  image: PlannedImage,
  options: { root?: string; onOutput?: (chunk: string) => void } = {},
): Promise<BuiltImage> {
  const started = Date.now();
  const args = [
    "build",
    ...engine.commonFlags,
    // Package installs inside the build use the host's network (podman's default netns has none here).
    "--network",
    "host",
    ...(engine.kind === "podman" ? ["--pull=never", "--layers"] : []),
    "-f",
    image.file,
    "-t",
    image.tag,
    ...Object.entries(image.buildArgs).flatMap(([key, value]) => ["--build-arg", `${key}=${value}`]),
    ".",
  ];
  await engineExec(engine, args, {
    cwd: options.root ?? REPOSITORY_ROOT,
    timeoutMs: 1_800_000,
    ...(options.onOutput ? { onOutput: options.onOutput } : {}),
  });
  const seconds = (Date.now() - started) / 1000;
  const inspected = await engineExec(engine, ["image", "inspect", "--format", "{{.Size}} {{.Config.User}}", image.tag]);
  const [size, user] = inspected.stdout.trim().split(" ");
  return { image, seconds, sizeBytes: Number(size), user: user ?? "" };
}

/** The tag of the planned image that serves `role` (its `org.agentrl.roles` label names it). */
export function imageServing(plan: readonly PlannedImage[], role: ContainerRole): string {
  const image = plan.find((candidate) => candidate.roles.includes(role));
  if (!image)
    throw new Error(`no planned image serves the ${role} role (images: ${plan.map((p) => p.name).join(", ")})`);
  return image.tag;
}
