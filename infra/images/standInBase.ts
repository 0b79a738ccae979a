import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { type ContainerEngine, engineExec, exec, execOrThrow, imageExists } from "./engine.ts";

/** The base every CPU Dockerfile names (`FROM node:20-bookworm-slim`), fully qualified. */
export const NODE_BASE_IMAGE = "docker.io/library/node:20-bookworm-slim";

/** Label that marks an image made by {@link buildStandInBase}, so reports can say so. */
export const STAND_IN_LABEL = "org.agentrl.stand-in";

/** Host files the stand-in copies (Debian/NodeSource layout of this machine kind). */
export interface HostNode {
  /** The node binary. @default process.execPath */
  readonly nodeBin: string;
  /** npm's package folder. @default /usr/lib/node_modules/npm */
  readonly npmDir: string;
  /** Node's C headers, where the official image has them (node-gyp builds an addon against them instead of downloading them). */
  readonly headersDir: string;
  /** CA bundle trusted by apt, npm and node inside builds (a TLS-inspecting proxy's root is in it). */
  readonly caBundle: string;
}

export function hostNode(): HostNode {
  return {
    nodeBin: process.execPath,
    npmDir: "/usr/lib/node_modules/npm",
    headersDir: "/usr/include/node",
    caBundle: "/etc/ssl/certs/ca-certificates.crt",
  };
}

export type BaseImageSource = "present" | "pulled" | "stand-in";

/**
 * Makes sure `node:20-bookworm-slim` exists for the engine: already there, else pulled, else a
 * stand-in built from Debian packages and this machine's Node (offline machines: the registry
 * cannot be reached, the Debian mirror and the npm registry can).
 */
export async function ensureNodeBase(
  engine: ContainerEngine,
  log: (line: string) => void = () => {},
): Promise<BaseImageSource> {
  if (await imageExists(engine, NODE_BASE_IMAGE)) return "present";
  const pulled = await exec(engine.bin, ["pull", "--quiet", NODE_BASE_IMAGE], { timeoutMs: 120_000 }).catch(() => ({
    status: 1,
  }));
  if (pulled.status === 0) return "pulled";
  log(`cannot pull ${NODE_BASE_IMAGE}; building a stand-in from Debian packages and this machine's Node`);
  await buildStandInBase(engine, hostNode(), log);
  return "stand-in";
}

/**
 * The stand-in for node:20-bookworm-slim: `debootstrap --variant=minbase bookworm`, this machine's
 * node, npm and node headers under /usr/local and /usr/include (as the official image lays them
 * out), a `node` user with uid 1000, and the host's CA bundle, imported under the official name.
 */
export async function buildStandInBase(
  engine: ContainerEngine,
  host: HostNode,
  log: (line: string) => void = () => {},
): Promise<void> {
  for (const [what, path] of Object.entries(host))
    if (!existsSync(path)) throw new Error(`stand-in base: ${what} ${path} does not exist on this machine`);
  const work = await mkdtemp(join(tmpdir(), "agentrl-base-"));
  const rootfs = join(work, "rootfs");
  try {
    log("debootstrap --variant=minbase bookworm (half a minute to a few, with the load)");
    await execOrThrow("debootstrap", ["--variant=minbase", "bookworm", rootfs, "http://deb.debian.org/debian"], {
      timeoutMs: 900_000,
    });
    await cp(host.nodeBin, join(rootfs, "usr/local/bin/node"));
    await cp(host.npmDir, join(rootfs, "usr/local/lib/node_modules/npm"), { recursive: true });
    await symlink("../lib/node_modules/npm/bin/npm-cli.js", join(rootfs, "usr/local/bin/npm"));
    await symlink("../lib/node_modules/npm/bin/npx-cli.js", join(rootfs, "usr/local/bin/npx"));
    await cp(host.headersDir, join(rootfs, "usr/include/node"), { recursive: true });
    const caBundle = join(rootfs, "etc/ssl/certs/ca-certificates.crt");
    await mkdir(dirname(caBundle), { recursive: true });
    await cp(host.caBundle, caBundle);
    // The official image's `node` user (uid/gid 1000), which the Dockerfiles switch to.
    await appendLine(join(rootfs, "etc/passwd"), "node:x:1000:1000::/home/node:/bin/bash");
    await appendLine(join(rootfs, "etc/group"), "node:x:1000:");
    await mkdir(join(rootfs, "home/node"), { recursive: true });
    await execOrThrow("chown", ["1000:1000", join(rootfs, "home/node")]);
    await rm(join(rootfs, "var/cache/apt/archives"), { recursive: true, force: true });
    await mkdir(join(rootfs, "var/cache/apt/archives/partial"), { recursive: true });
    const version = (await execOrThrow(host.nodeBin, ["--version"])).stdout.trim().replace(/^v/, "");
    const changes = [
      "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      `ENV NODE_VERSION=${version}`,
      "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
      // node-gyp builds native modules against these headers instead of downloading them.
      "ENV npm_config_nodedir=/usr",
      `LABEL ${STAND_IN_LABEL}=debootstrap`,
      'CMD ["node"]',
    ].flatMap((change) => ["--change", change]);
    log(`importing ${NODE_BASE_IMAGE} (stand-in, node ${version})`);
    const tarball = join(work, "rootfs.tar");
    await execOrThrow("tar", ["-C", rootfs, "--numeric-owner", "-cf", tarball, "."], { timeoutMs: 300_000 });
    await engineExec(engine, ["import", ...changes, tarball, NODE_BASE_IMAGE], { timeoutMs: 300_000 });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function appendLine(file: string, line: string): Promise<void> {
  const text = await readFile(file, "utf8");
  if (!text.split("\n").some((existing) => existing.split(":")[0] === line.split(":")[0]))
    await writeFile(file, `${text.endsWith("\n") ? text : `${text}\n`}${line}\n`);
}
