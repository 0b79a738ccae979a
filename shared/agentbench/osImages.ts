/**
 * The images OS interaction episodes run in, by AgentBench's subtype name
 * (`data/os_interaction/res/dockerfiles/<subtype>`). Offline these are the Debian stand-ins that
 * `npm run images -- --agentbench-os` builds; the env worker and the image builder both read this.
 */
export const AGENTBENCH_OS_IMAGES = {
  default: "localhost/agentrl-ts/agentbench-os-default:bookworm",
  packages: "localhost/agentrl-ts/agentbench-os-packages:bookworm",
} as const;
export type AgentBenchOsImage = keyof typeof AGENTBENCH_OS_IMAGES;

/**
 * The images per subtype for this process: AGENTRL_OS_IMAGE_DEFAULT / AGENTRL_OS_IMAGE_PACKAGES
 * where the deployment names its own (on ECS, the images CDK built from AgentBench's Dockerfiles),
 * else the stand-ins.
 * @example osImagesFrom({ AGENTRL_OS_IMAGE_DEFAULT: "123.dkr.ecr.us-east-1.amazonaws.com/x:tag" }).default
 */
export function osImagesFrom(env: NodeJS.ProcessEnv = process.env): Record<AgentBenchOsImage, string> {
  return {
    default: env.AGENTRL_OS_IMAGE_DEFAULT?.trim() || AGENTBENCH_OS_IMAGES.default,
    packages: env.AGENTRL_OS_IMAGE_PACKAGES?.trim() || AGENTBENCH_OS_IMAGES.packages,
  };
}
