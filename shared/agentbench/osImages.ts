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
