import { readdirSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { missingDataMessage, readAgentBenchFile, resolveAgentBenchDir } from "../../shared/agentbench/data.ts";
import { AgentRlError, issuesOf } from "../../shared/errors.ts";

/**
 * AgentBench FC's OS interaction instances as upstream's loader reads them
 * (`src/server/tasks/os_interaction/task.py`, `_load_configs`): each config entry's glob, in order;
 * every `.json`/`.jsonl` file the glob finds; the instances of a file in file order. The index
 * counts through all of them from 0.
 *
 * Upstream globs with Python's `glob.glob`, which returns directory order (whatever the file
 * system lists first; it does not sort). Only `data/4/` holds more than one file, so only its order
 * is open: here it is code-point order of the file names (N11, N225, N37, N4, N41, Q09, ...),
 * the order `sorted(glob.glob(...))` gives and the only one that is the same on every machine.
 */

/** One problem file pattern, as an entry of `data_config.files` in AgentBench's configs/tasks/os.yaml. */
interface ProblemFiles {
  /** A folder under `data/` whose .json/.jsonl files are read, or one file. */
  readonly folder?: string;
  readonly file?: string;
  /** Where the instances' `{"file": ...}` scripts live (under `data/`). */
  readonly scriptDir: string;
}

const OS_ROOT = "os_interaction";
const STD_FILES: readonly ProblemFiles[] = [1, 2, 3, 4, 5, 6, 7].map((n) => ({
  folder: `${OS_ROOT}/data/${n}`,
  scriptDir: `${OS_ROOT}/scripts/${n}`,
}));

/**
 * The files behind each task. os-std and os-env_train as configs/tasks/os.yaml lists them at the
 * pinned commit; os-dev as the same file listed it before AgentBench FC dropped the entry
 * (`data/dev.json` with `scripts/dev/`).
 */
export const OS_FILES = {
  "os-std": STD_FILES,
  "os-dev": [{ file: `${OS_ROOT}/data/dev.json`, scriptDir: `${OS_ROOT}/scripts/dev` }],
  "os-env_train": [{ file: `${OS_ROOT}/train_0317/training.json`, scriptDir: `${OS_ROOT}/scripts/7` }],
} as const satisfies Record<string, readonly ProblemFiles[]>;
export type OsSplit = keyof typeof OS_FILES;

/** Instance counts of the pinned files. */
export const OS_SIZES: Readonly<Record<OsSplit, number>> = { "os-std": 144, "os-dev": 26, "os-env_train": 1000 };

/** The languages of the published scripts. */
// Upstream also compiles "c" and "c++" (through a broken echo of the JSON-quoted source); no published
// instance uses them, so the schema refuses them rather than reproduce that.
export const SCRIPT_LANGUAGES = ["bash", "python"] as const;
export type ScriptLanguage = (typeof SCRIPT_LANGUAGES)[number];

/** A script as upstream's `load_script` resolves it: a language and its source text. */
export interface Script {
  readonly language: ScriptLanguage;
  readonly code: string;
}

/** A script as written in the data: bare bash text, or an object naming a file or carrying code. */
const RawScript = z.union([
  z.string(),
  z
    .object({
      language: z.enum(SCRIPT_LANGUAGES).optional(),
      file: z.string().min(1).optional(),
      code: z.string().optional(),
    })
    .refine((s) => s.file !== undefined || s.code !== undefined, "a script object needs file or code"),
]);
type RawScript = z.infer<typeof RawScript>;

const RawCreate = z.union([
  z.object({
    local: z.string().optional(),
    init: z.union([RawScript, z.array(RawScript)]).optional(),
  }),
  // One std and one dev instance give `create` as a list; upstream's `"local" in list` and
  // `"init" in list` are both false, so it runs with the default image and no init. So do we.
  z.array(z.unknown()),
]);

const RawEvaluation = z.union([
  z.object({ match: z.union([z.string(), z.object({ answer: z.string() }), z.object({ regex: z.string() })]) }),
  z.object({
    check: z.union([RawScript, z.array(z.union([RawScript, z.null()]))]),
    example: RawScript.optional(),
  }),
]);

const RawInstance = z.object({
  description: z.string().min(1),
  create: RawCreate.optional(),
  start: RawScript.optional(),
  evaluation: RawEvaluation,
});

/** How the answer is judged, as upstream's JudgeConfig holds it. */
export type Evaluation =
  | { readonly kind: "match"; readonly answer: string; readonly strip: boolean }
  | { readonly kind: "regex"; readonly regex: string }
  | {
      readonly kind: "check";
      /** `null`: run the example live and pass its stdout on. */
      readonly checks: readonly (Script | null)[];
      readonly example?: Script;
    };

export interface OsInstance {
  readonly index: number;
  /** The problem file (under `data/`) and the instance's place in it. */
  readonly file: string;
  readonly indexInFile: number;
  readonly description: string;
  /** The image subtype (`default`, `packages`, `ubuntu`). */
  readonly image: string;
  readonly init: readonly Script[];
  readonly start?: Script;
  readonly evaluation: Evaluation;
}

function resolveScript(raw: RawScript, scriptDir: string, dataDir: string | undefined): Script {
  if (typeof raw === "string") return { language: "bash", code: raw };
  const language = raw.language ?? "bash";
  if (raw.file !== undefined) return { language, code: readAgentBenchFile(join(scriptDir, raw.file), dataDir).text };
  return { language, code: raw.code ?? "" };
}

/** Parses one problem file's text; a bad instance is reported with its place and field path. */
export function parseOsFile(
  text: string,
  file: string,
  scriptDir: string,
  dataDir?: string,
): Omit<OsInstance, "index">[] {
  let raw: unknown;
  try {
    raw = file.endsWith(".jsonl")
      ? text
          .split("\n")
          .filter((line) => line.trim() !== "")
          .map((line) => JSON.parse(line))
      : JSON.parse(text);
  } catch (error) {
    throw new AgentRlError(`${file}: not JSON (${error instanceof Error ? error.message : error})`);
  }
  const entries = Array.isArray(raw) ? raw : [raw];
  return entries.map((entry, indexInFile) => {
    const parsed = RawInstance.safeParse(entry);
    if (!parsed.success)
      throw new AgentRlError(
        `${file} instance ${indexInFile}: ${issuesOf(parsed.error)
          .map((i) => `${i.path}: ${i.message}`)
          .join("; ")}`,
      );
    const item = parsed.data;
    const script = (s: RawScript): Script => resolveScript(s, scriptDir, dataDir);
    const create = item.create !== undefined && !Array.isArray(item.create) ? item.create : undefined;
    const init = create?.init === undefined ? [] : Array.isArray(create.init) ? create.init : [create.init];
    const evaluation = item.evaluation;
    let judged: Evaluation;
    if ("match" in evaluation) {
      const match = evaluation.match;
      judged =
        typeof match === "string"
          ? { kind: "match", answer: match, strip: true }
          : "answer" in match
            ? // Upstream strips only when the match object says so.
              { kind: "match", answer: match.answer, strip: false }
            : { kind: "regex", regex: match.regex };
    } else {
      const checks = Array.isArray(evaluation.check) ? evaluation.check : [evaluation.check];
      judged = {
        kind: "check",
        checks: checks.map((c) => (c === null ? null : script(c))),
        ...(evaluation.example !== undefined ? { example: script(evaluation.example) } : {}),
      };
    }
    return {
      file,
      indexInFile,
      description: item.description,
      image: create?.local ?? "default",
      init: init.map(script),
      ...(item.start !== undefined ? { start: script(item.start) } : {}),
      evaluation: judged,
    };
  });
}

/** The problem files of a split, in upstream's order (see the note at the top). */
export function problemFiles(split: OsSplit, dataDir?: string): { file: string; scriptDir: string }[] {
  const out: { file: string; scriptDir: string }[] = [];
  for (const entry of OS_FILES[split] as readonly ProblemFiles[]) {
    if (entry.file !== undefined) {
      out.push({ file: entry.file, scriptDir: entry.scriptDir });
      continue;
    }
    const dir = resolveAgentBenchDir(dataDir);
    if (!dir) throw new AgentRlError(missingDataMessage(split));
    const names = readdirSync(join(dir, "data", entry.folder!))
      .filter((name) => name.endsWith(".json") || name.endsWith(".jsonl"))
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const name of names) out.push({ file: `${entry.folder}/${name}`, scriptDir: entry.scriptDir });
  }
  return out;
}

const cache = new Map<OsSplit, OsInstance[]>();

/** The instances of a split, read once per process; files and scripts are checked against the pinned hashes. */
export function loadOs(split: OsSplit, dataDir?: string): OsInstance[] {
  const cached = cache.get(split);
  if (cached) return cached;
  const instances: OsInstance[] = [];
  for (const { file, scriptDir } of problemFiles(split, dataDir)) {
    const { text } = readAgentBenchFile(file, dataDir);
    for (const instance of parseOsFile(text, file, scriptDir, dataDir))
      instances.push({ ...instance, index: instances.length });
  }
  cache.set(split, instances);
  return instances;
}
