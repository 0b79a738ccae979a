import { type Rng, rngFor } from "../common/rng.ts";
import type { FsView } from "./sandbox.ts";

/**
 * Seeded generator of os instances in the style of AgentBench's OS interaction set: a small
 * filesystem plus a question answered by exact match (count files, find the largest file, read a
 * config value, ...) or a requested change judged by a check over the final filesystem state
 * (create, rename, edit, delete files). Instance `index` is a pure function of the index.
 */

/** How an instance is judged when the agent commits (answer_action or finish_action). */
export type OsJudge =
  | { readonly kind: "match"; readonly answer: string }
  | { readonly kind: "check"; readonly check: (fs: FsView) => boolean };

export interface OsInstance {
  readonly index: number;
  /** Which generator family made it (count-ext, edit-config, ...). */
  readonly family: OsFamily;
  /** The problem as the agent reads it. */
  readonly description: string;
  /** Initial files of the sandbox (absolute path -> content). */
  readonly files: Readonly<Record<string, string>>;
  readonly judge: OsJudge;
  /** A bash script that solves the instance; the expert runs it through bash_action. */
  readonly solution: string;
}

export const OS_FAMILIES = [
  "count-ext",
  "largest-file",
  "config-value",
  "count-level",
  "passwd-shell",
  "sum-column",
  "line-count",
  "create-file",
  "rename-ext",
  "edit-config",
  "delete-ext",
] as const;
export type OsFamily = (typeof OS_FAMILIES)[number];

export const OS_TASK_NAME = "os";
/** Disjoint index ranges: train [0, 10000), test [10000, 10500). */
export const OS_SPLITS = { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_500 } } as const;

const PROJECTS = ["alpha", "atlas", "nova", "orion", "pixel", "quartz", "cedar", "delta", "ember", "falcon", "maple"];
const STEMS = [
  "report",
  "notes",
  "data",
  "backup",
  "draft",
  "summary",
  "config",
  "index",
  "main",
  "test",
  "util",
  "old",
  "final",
  "temp",
  "cache",
  "image",
  "plan",
  "todo",
  "invoice",
  "budget",
];
const EXTS = ["log", "txt", "csv", "json", "md", "py", "sh", "conf", "tmp", "bak"];
const SERVICES = ["nginx", "redis", "mailer", "backup", "sshd", "webapp", "cron", "queue"];
const LEVELS = ["INFO", "WARN", "ERROR", "DEBUG"];
const MESSAGES = [
  "request served",
  "cache miss",
  "connection reset by peer",
  "job started",
  "job finished",
  "disk usage high",
  "retrying upload",
  "user logged in",
  "config reloaded",
  "timeout talking to upstream",
];
const USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar"];
const SHELLS = ["/bin/bash", "/bin/sh", "/usr/sbin/nologin", "/bin/zsh"];
const WORDS = ["buy", "milk", "call", "mom", "ship", "release", "fix", "bug", "water", "plants", "book", "flight"];
const ITEMS = ["apple", "bolt", "cable", "drill", "envelope", "filter", "glue", "hinge", "ink", "jar"];

/** Files every sandbox starts with, so `ls /etc` and `cat /etc/hostname` look like a machine. */
function baseFiles(rng: Rng): Record<string, string> {
  return {
    "/etc/hostname": `box-${rng.int(100, 999)}\n`,
    "/etc/os-release": 'NAME="Ubuntu"\nVERSION_ID="22.04"\n',
    "/home/user/readme.txt": "Welcome to this machine.\n",
  };
}

function uniqueNames(rng: Rng, count: number, exts: readonly string[]): string[] {
  const names = new Set<string>();
  while (names.size < count) names.add(`${rng.pick(STEMS)}${rng.chance(0.4) ? rng.int(1, 9) : ""}.${rng.pick(exts)}`);
  return [...names];
}

function smallContent(rng: Rng): string {
  return `${rng.pick(WORDS)} ${rng.pick(WORDS)} ${rng.int(1, 999)}\n`;
}

function quoteForRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}

type Draft = Omit<OsInstance, "index" | "family">;
type FamilyGenerator = (rng: Rng, files: Record<string, string>) => Draft;

const countExt: FamilyGenerator = (rng, files) => {
  const dir = `/home/user/${rng.pick(PROJECTS)}`;
  const subdirs = rng.sample(["src", "logs", "docs", "build", "old"], rng.int(1, 2)).map((d) => `${dir}/${d}`);
  const exts = rng.sample(EXTS, rng.int(3, 4));
  const placed: string[] = [];
  for (const where of [dir, ...subdirs]) {
    for (const name of uniqueNames(rng, rng.int(2, 5), exts)) {
      files[`${where}/${name}`] = smallContent(rng);
      placed.push(`${where}/${name}`);
    }
  }
  const ext = rng.pick(placed).split(".").pop() as string;
  const recursive = rng.chance(0.6);
  const matching = placed.filter((p) => p.endsWith(`.${ext}`) && (recursive || p.slice(0, p.lastIndexOf("/")) === dir));
  return {
    description: recursive
      ? `How many files with the extension .${ext} are there in ${dir}, including its subdirectories?`
      : `How many files with the extension .${ext} are directly inside ${dir} (not counting subdirectories)?`,
    files,
    judge: { kind: "match", answer: String(matching.length) },
    solution: `find ${dir}${recursive ? "" : " -maxdepth 1"} -type f -name '*.${ext}' | wc -l`,
  };
};

const largestFile: FamilyGenerator = (rng, files) => {
  const dir = `/home/user/${rng.pick(["downloads", "media", "archive", "uploads"])}`;
  const names = uniqueNames(rng, rng.int(3, 7), EXTS);
  const sizes = rng.sample(
    Array.from({ length: 40 }, (_, i) => 20 + i * 37),
    names.length,
  );
  names.forEach((name, i) => {
    files[`${dir}/${name}`] = `${"x".repeat((sizes[i] as number) - 1)}\n`;
  });
  const largest = names[sizes.indexOf(Math.max(...sizes))] as string;
  return {
    description: `What is the name of the largest file in ${dir}? Answer with the file name only (e.g. a.txt).`,
    files,
    judge: { kind: "match", answer: largest },
    solution: `ls -S ${dir} | head -n 1`,
  };
};

function configLines(rng: Rng): Array<[string, string]> {
  const candidates: Array<[string, string]> = [
    ["port", String(rng.int(1024, 9999))],
    ["host", `${rng.pick(["db", "cache", "api", "mail"])}${rng.int(1, 9)}.internal`],
    ["workers", String(rng.int(2, 64))],
    ["timeout", String(rng.int(5, 120))],
    ["log_level", rng.pick(["debug", "info", "warn", "error"])],
    ["data_dir", `/var/lib/${rng.pick(SERVICES)}`],
    ["enabled", rng.pick(["true", "false"])],
    ["max_clients", String(rng.int(10, 500))],
  ];
  return rng.sample(candidates, rng.int(4, 7));
}

function renderConfig(lines: Array<[string, string]>, spaced: boolean, service: string): string {
  const body = lines.map(([k, v]) => (spaced ? `${k} = ${v}` : `${k}=${v}`)).join("\n");
  return `# ${service} configuration\n${body}\n`;
}

const configValue: FamilyGenerator = (rng, files) => {
  const service = rng.pick(SERVICES);
  const path = `/etc/${service}/${service}.conf`;
  const lines = configLines(rng);
  const spaced = rng.chance(0.5);
  files[path] = renderConfig(lines, spaced, service);
  const [key, value] = rng.pick(lines);
  return {
    description: `What is the value of the setting "${key}" in ${path}? Answer with the value only.`,
    files,
    judge: { kind: "match", answer: value },
    solution: `grep -E '^${key} *=' ${path} | sed 's/^[^=]*= *//'`,
  };
};

const countLevel: FamilyGenerator = (rng, files) => {
  const service = rng.pick(SERVICES);
  const path = `/var/log/${service}.log`;
  const count = rng.int(5, 25);
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    const minute = String(i).padStart(2, "0");
    lines.push(`2024-03-0${rng.int(1, 9)} 10:${minute}:0${rng.int(0, 9)} ${rng.pick(LEVELS)} ${rng.pick(MESSAGES)}`);
  }
  files[path] = `${lines.join("\n")}\n`;
  const level = rng.pick(LEVELS);
  return {
    description: `How many lines of ${path} have the log level ${level}?`,
    files,
    judge: { kind: "match", answer: String(lines.filter((l) => l.includes(` ${level} `)).length) },
    solution: `grep -c ' ${level} ' ${path}`,
  };
};

const passwdShell: FamilyGenerator = (rng, files) => {
  const users = rng.sample(USERS, rng.int(4, 10));
  const entries = [["root", "/bin/bash"] as const, ...users.map((u) => [u, rng.pick(SHELLS)] as const)];
  files["/etc/passwd"] = `${entries
    .map(([user, shell], i) => `${user}:x:${i === 0 ? 0 : 1000 + i}:${i === 0 ? 0 : 1000 + i}::/home/${user}:${shell}`)
    .join("\n")}\n`;
  const shell = rng.pick(SHELLS);
  return {
    description: `How many users in /etc/passwd have ${shell} as their login shell?`,
    files,
    judge: { kind: "match", answer: String(entries.filter(([, s]) => s === shell).length) },
    solution: `grep -c ':${quoteForRegex(shell)}$' /etc/passwd`,
  };
};

const sumColumn: FamilyGenerator = (rng, files) => {
  const path = `/home/user/${rng.pick(["orders", "stock", "sales", "inventory"])}.csv`;
  const rows = rng.sample(ITEMS, rng.int(3, 8)).map((item) => [item, rng.int(1, 60), rng.int(1, 99)] as const);
  files[path] = `item,qty,price\n${rows.map((r) => r.join(",")).join("\n")}\n`;
  const column = rng.pick(["qty", "price"] as const);
  const at = column === "qty" ? 1 : 2;
  return {
    description: `${path} is a CSV file with a header line. What is the sum of its "${column}" column?`,
    files,
    judge: { kind: "match", answer: String(rows.reduce((sum, r) => sum + (r[at] as number), 0)) },
    solution: `awk -F, 'NR>1 {s+=$${at + 1}} END {print s}' ${path}`,
  };
};

const lineCount: FamilyGenerator = (rng, files) => {
  const path = `/home/user/${rng.pick(["todo", "notes", "ideas", "shopping"])}.txt`;
  const lines = Array.from({ length: rng.int(2, 15) }, () => `${rng.pick(WORDS)} ${rng.pick(WORDS)}`);
  files[path] = `${lines.join("\n")}\n`;
  return {
    description: `How many lines does the file ${path} have?`,
    files,
    judge: { kind: "match", answer: String(lines.length) },
    solution: `wc -l < ${path}`,
  };
};

/** True when every path keeps its original content. */
function unchanged(fs: FsView, expected: ReadonlyArray<readonly [string, string]>): boolean {
  return expected.every(([path, content]) => fs.read(path) === content);
}

const createFile: FamilyGenerator = (rng, files) => {
  const dir = rng.chance(0.5) ? "/home/user" : `/home/user/${rng.pick(["notes", "work", "tmp", "reports"])}`;
  const path = `${dir}/${rng.pick(STEMS)}.txt`;
  const text = rng.sample(WORDS, rng.int(2, 3)).join(" ");
  return {
    description: `Create the file ${path} whose content is exactly one line: ${text}`,
    files,
    judge: {
      kind: "check",
      check: (fs) => {
        const content = fs.read(path);
        return content === `${text}\n` || content === text;
      },
    },
    solution: `mkdir -p ${dir} && echo '${text}' > ${path}`,
  };
};

const renameExt: FamilyGenerator = (rng, files) => {
  const dir = `/home/user/${rng.pick(PROJECTS)}`;
  const [from, to] = rng.sample(["txt", "md", "log", "bak", "csv", "old"], 2) as [string, string];
  const targets = uniqueNames(rng, rng.int(2, 4), [from]);
  const others = uniqueNames(rng, rng.int(1, 3), ["py", "json", "sh"]);
  for (const name of [...targets, ...others]) files[`${dir}/${name}`] = smallContent(rng);
  const renamed = targets.map(
    (name) => [`${dir}/${name.slice(0, -from.length)}${to}`, files[`${dir}/${name}`]] as const,
  );
  const kept = others.map((name) => [`${dir}/${name}`, files[`${dir}/${name}`] as string] as const);
  const gone = targets.map((name) => `${dir}/${name}`);
  return {
    description: `Rename every file ending in .${from} in ${dir} so that it ends in .${to} instead (keep the rest of each name and its content). Leave all other files alone.`,
    files,
    judge: {
      kind: "check",
      check: (fs) => {
        for (const path of gone) if (fs.exists(path)) return false;
        return unchanged(fs, renamed as Array<[string, string]>) && unchanged(fs, kept);
      },
    },
    solution: `cd ${dir} && for f in *.${from}; do mv "$f" "\${f%.${from}}.${to}"; done`,
  };
};

const editConfig: FamilyGenerator = (rng, files) => {
  const service = rng.pick(SERVICES);
  const path = `/etc/${service}/${service}.conf`;
  const lines = configLines(rng);
  const spaced = rng.chance(0.5);
  files[path] = renderConfig(lines, spaced, service);
  const [key, old] = rng.pick(lines);
  let value = old;
  while (value === old) value = /^\d+$/.test(old) ? String(rng.int(1, 9999)) : rng.pick(["on", "off", "auto", "none"]);
  const original = (files[path] as string).split("\n");
  const keyLine = new RegExp(`^${key}\\s*=\\s*(.*)$`);
  return {
    description: `In ${path}, change the value of "${key}" to ${value}. Keep every other line unchanged.`,
    files,
    judge: {
      kind: "check",
      check: (fs) => {
        const content = fs.read(path);
        if (content === null) return false;
        const now = content.split("\n");
        if (now.length !== original.length) return false;
        return now.every((line, i) => {
          const before = original[i] as string;
          return keyLine.test(before) ? keyLine.exec(line)?.[1] === value : line === before;
        });
      },
    },
    solution: `sed -i -E 's/^(${key} *= *).*/\\1${value}/' ${path}`,
  };
};

const deleteExt: FamilyGenerator = (rng, files) => {
  const dir = `/home/user/${rng.pick(PROJECTS)}`;
  const ext = rng.pick(["tmp", "bak", "log", "cache"]);
  const where = [dir, ...rng.sample(["build", "cache", "src", "old"], rng.int(1, 2)).map((d) => `${dir}/${d}`)];
  const doomed: string[] = [];
  const kept: Array<[string, string]> = [];
  for (const place of where) {
    for (const name of uniqueNames(rng, rng.int(2, 4), [ext, "txt", "py", "json"])) {
      const path = `${place}/${name}`;
      files[path] = smallContent(rng);
      if (name.endsWith(`.${ext}`)) doomed.push(path);
      else kept.push([path, files[path] as string]);
    }
  }
  if (doomed.length === 0) {
    const path = `${dir}/${rng.pick(STEMS)}.${ext}`;
    files[path] = smallContent(rng);
    doomed.push(path);
  }
  return {
    description: `Delete every file ending in .${ext} anywhere under ${dir} (subdirectories included). Keep all other files.`,
    files,
    judge: {
      kind: "check",
      check: (fs) => {
        for (const path of doomed) if (fs.exists(path)) return false;
        return unchanged(fs, kept);
      },
    },
    solution: `find ${dir} -type f -name '*.${ext}' -delete`,
  };
};

const GENERATORS: Record<OsFamily, FamilyGenerator> = {
  "count-ext": countExt,
  "largest-file": largestFile,
  "config-value": configValue,
  "count-level": countLevel,
  "passwd-shell": passwdShell,
  "sum-column": sumColumn,
  "line-count": lineCount,
  "create-file": createFile,
  "rename-ext": renameExt,
  "edit-config": editConfig,
  "delete-ext": deleteExt,
};

/** True when `index` belongs to the train or test split. */
export function isOsIndex(index: number): boolean {
  return Number.isSafeInteger(index) && index >= OS_SPLITS.train.start && index < OS_SPLITS.test.end;
}

/** Builds instance `index` (deterministic). Throws a RangeError outside the splits. */
export function generateOsInstance(index: number): OsInstance {
  if (!isOsIndex(index)) {
    throw new RangeError(
      `os index ${index} is outside the task's indices [${OS_SPLITS.train.start}, ${OS_SPLITS.test.end})`,
    );
  }
  const rng = rngFor(OS_TASK_NAME, index, "instance");
  const family = rng.pick(OS_FAMILIES);
  const draft = GENERATORS[family](rng, baseFiles(rng));
  return { index, family, ...draft };
}
