import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AGENTBENCH_OS_IMAGES, type AgentBenchOsImage } from "../../shared/agentbench/osImages.ts";
import { type ContainerEngine, engineExec, execOrThrow, imageExists } from "./engine.ts";
import { STAND_IN_LABEL } from "./standInBase.ts";

/**
 * The images AgentBench runs OS interaction episodes in (`data/os_interaction/res/dockerfiles`):
 * `default` is ubuntu with python3, pip, git, vim, curl, wget, unzip, zip and tree; `packages`
 * adds npm. Offline machines cannot pull ubuntu, so the stand-in is Debian bookworm made with
 * debootstrap (minbase, the same shape as the ubuntu base image) with the same packages, imported
 * under the name the OS tasks run. Built once; a present image is kept.
 */

/**
 * What upstream's Dockerfiles `apt install`, plus procps (`ps`, `free`: ubuntu's base image has
 * them, Debian's minbase does not, and upstream's examples call them); ca-certificates so curl
 * and pip speak TLS.
 */
const DEFAULT_PACKAGES = [
  "python3",
  "python3-pip",
  "git",
  "vim",
  "curl",
  "wget",
  "unzip",
  "zip",
  "tree",
  "procps",
  "ca-certificates",
];

/** Builds `default` (debootstrap) and then `packages` (default plus npm), skipping either when present. */
export async function ensureAgentBenchOsImages(
  engine: ContainerEngine,
  log: (line: string) => void = () => {},
  which: readonly AgentBenchOsImage[] = ["default", "packages"],
): Promise<Record<AgentBenchOsImage, "present" | "built">> {
  const result: Record<AgentBenchOsImage, "present" | "built"> = { default: "present", packages: "present" };
  if (!(await imageExists(engine, AGENTBENCH_OS_IMAGES.default))) {
    await buildDefault(engine, log);
    result.default = "built";
  }
  if (which.includes("packages") && !(await imageExists(engine, AGENTBENCH_OS_IMAGES.packages))) {
    await buildPackages(engine, log);
    result.packages = "built";
  }
  return result;
}

async function buildDefault(engine: ContainerEngine, log: (line: string) => void): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), "agentrl-os-"));
  const rootfs = join(work, "rootfs");
  try {
    log(`debootstrap --variant=minbase --include=${DEFAULT_PACKAGES.join(",")} bookworm (several minutes)`);
    await execOrThrow(
      "debootstrap",
      [
        "--variant=minbase",
        `--include=${DEFAULT_PACKAGES.join(",")}`,
        "bookworm",
        rootfs,
        "http://deb.debian.org/debian",
      ],
      { timeoutMs: 1_800_000 },
    );
    await rm(join(rootfs, "var/cache/apt/archives"), { recursive: true, force: true });
    const tarball = join(work, "rootfs.tar");
    await execOrThrow("tar", ["-C", rootfs, "--numeric-owner", "-cf", tarball, "."], { timeoutMs: 600_000 });
    const changes = [
      "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      `LABEL ${STAND_IN_LABEL}=debootstrap`,
      "WORKDIR /root",
      'CMD ["bash"]',
    ].flatMap((change) => ["--change", change]);
    log(`importing ${AGENTBENCH_OS_IMAGES.default}`);
    await engineExec(engine, ["import", ...changes, tarball, AGENTBENCH_OS_IMAGES.default], { timeoutMs: 600_000 });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function buildPackages(engine: ContainerEngine, log: (line: string) => void): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), "agentrl-os-"));
  try {
    await writeFile(
      join(work, "Containerfile"),
      `FROM ${AGENTBENCH_OS_IMAGES.default}\n` +
        "RUN apt-get update && apt-get install -y --no-install-recommends npm && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb\n",
    );
    log(`building ${AGENTBENCH_OS_IMAGES.packages} (default + npm)`);
    await engineExec(engine, ["build", ...engine.commonFlags, "-t", AGENTBENCH_OS_IMAGES.packages, work], {
      timeoutMs: 1_800_000,
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
