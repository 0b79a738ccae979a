import { distinctWords, type Rng, rngFor } from "../common/rng.ts";
import type { DbbenchInstance } from "./instances.ts";

/**
 * DBBench-flavoured generated instances (`dbbench-synth`): DBBench's format and dialect (one
 * table, every column TEXT, MySQL with backquoted names that have spaces), its question types in
 * dbbench-std's proportions and its table sizes. DBBench's training split is not published; these
 * are for RL, with evaluation on `dbbench-std`. The ground truth is never written by hand: the
 * reference statement runs on the server at episode start (task.ts), for SELECT kinds giving the
 * rows the committed answer must match, for mutations the table hash, as upstream computes an
 * instance whose `answer_md5` is empty.
 */

/** dbbench-std's 300 instances by type. */
export const STD_TYPE_COUNTS: Readonly<Record<string, number>> = {
  INSERT: 100,
  UPDATE: 100,
  other: 17,
  counting: 17,
  comparison: 17,
  ranking: 17,
  "aggregation-SUM": 8,
  "aggregation-MIN": 8,
  "aggregation-MAX": 8,
  "aggregation-AVG": 8,
};

/** Indices a worker announces to the controller stay under its 100,000 cap. */
export const SYNTH_SPLITS = {
  train: { start: 0, end: 50_000 },
  test: { start: 50_000, end: 51_000 },
} as const;

/** A generated instance: DBBench's fields plus the statement whose result is its truth. */
export interface SynthInstance extends DbbenchInstance {
  readonly referenceSql: string;
}

interface Theme {
  readonly table: string;
  readonly key: string;
  readonly noun: string;
  readonly nouns: string;
  readonly category: { readonly name: string; readonly values: readonly string[] };
  readonly numbers: readonly [NumberColumn, NumberColumn];
  readonly text: { readonly name: string; readonly words: readonly string[] };
}

interface NumberColumn {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  /** Decimal places as the cells print them (DBBench tables hold "12", "3.5", "1,204"). */
  readonly decimals: number;
  readonly thousands?: boolean;
}

const THEMES: readonly Theme[] = [
  {
    table: "NBA Draft History",
    key: "Player",
    noun: "player",
    nouns: "players",
    category: { name: "Position", values: ["Guard", "Forward", "Center", "Guard-Forward"] },
    numbers: [
      { name: "Pick", min: 1, max: 60, decimals: 0 },
      { name: "Round", min: 1, max: 3, decimals: 0 },
    ],
    text: { name: "School/Club Team", words: ["Duke", "Kansas", "UCLA", "Kentucky", "Arizona", "Syracuse"] },
  },
  {
    table: "Olympic Medals",
    key: "Nation",
    noun: "nation",
    nouns: "nations",
    category: { name: "Region", values: ["Europe", "Asia", "Americas", "Africa", "Oceania"] },
    numbers: [
      { name: "Gold", min: 0, max: 40, decimals: 0 },
      { name: "Total", min: 1, max: 120, decimals: 0 },
    ],
    text: { name: "Best Event", words: ["Swimming", "Athletics", "Rowing", "Judo", "Cycling", "Fencing"] },
  },
  {
    table: "hockey_players",
    key: "Player",
    noun: "player",
    nouns: "players",
    category: { name: "Position", values: ["D", "LW", "RW", "C", "G"] },
    numbers: [
      { name: "Pick #", min: 1, max: 250, decimals: 0 },
      { name: "Games", min: 0, max: 82, decimals: 0 },
    ],
    text: { name: "Team from", words: ["Chilliwack Bruins", "Kelowna Rockets", "Regina Pats", "Saint John Sea Dogs"] },
  },
  {
    table: "Aussie Rules Football Match Results",
    key: "Home team",
    noun: "home team",
    nouns: "home teams",
    category: { name: "Venue", values: ["Glenferrie Oval", "Princes Park", "Lake Oval", "Junction Oval"] },
    numbers: [
      { name: "Crowd", min: 4000, max: 40000, decimals: 0, thousands: true },
      { name: "Home team score", min: 20, max: 140, decimals: 0 },
    ],
    text: { name: "Date", words: ["14 May 1932", "21 May 1932", "28 May 1932", "4 June 1932", "11 June 1932"] },
  },
  {
    table: "Population Dynamics Table",
    key: "Year",
    noun: "year",
    nouns: "years",
    category: { name: "Period", values: ["Pre-war", "Post-war", "Modern"] },
    numbers: [
      { name: "Crude birth rate", min: 8, max: 40, decimals: 1 },
      { name: "Natural change", min: -2000, max: 9000, decimals: 0 },
    ],
    text: { name: "Source", words: ["Census", "Registry", "Survey", "Estimate"] },
  },
  {
    table: "Cricket Bowling Statistics",
    key: "Player",
    noun: "bowler",
    nouns: "bowlers",
    category: { name: "Team", values: ["Australia", "England", "India", "Pakistan", "South Africa"] },
    numbers: [
      { name: "Runs", min: 80, max: 900, decimals: 0 },
      { name: "Average", min: 15, max: 60, decimals: 2 },
    ],
    text: { name: "Best", words: ["5/32", "4/18", "6/71", "3/40", "5/59", "7/44"] },
  },
];

function formatNumber(value: number, column: NumberColumn): string {
  const text = value.toFixed(column.decimals);
  if (!column.thousands) return text;
  return text.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

const q = (name: string) => `\`${name}\``;
/** A TEXT cell as a number the way DBBench's gold SQL reads one (MySQL's implicit DOUBLE), commas dropped. */
const num = (name: string) => `(REPLACE(${q(name)}, ',', '') + 0)`;
const lit = (value: string) => `'${value.replaceAll("'", "''")}'`;

/** Table sizes like dbbench-std's: 7 to 105 rows, median about 22. */
function rowCount(rng: Rng): number {
  if (rng.chance(0.08)) return rng.int(40, 105);
  return rng.int(7, 36);
}

function typeFor(rng: Rng): string {
  const types = Object.keys(STD_TYPE_COUNTS);
  return types[rng.weighted(types.map((t) => STD_TYPE_COUNTS[t]!))]!;
}

/** Instance `index` of `dbbench-synth`; deterministic by index. */
export function generateSynthInstance(index: number): SynthInstance {
  const rng = rngFor("dbbench-synth", index);
  const theme = rng.pick(THEMES);
  const [first, second] = theme.numbers;
  const columns = [theme.key, theme.category.name, first.name, second.name, theme.text.name];
  const n = rowCount(rng);
  const keys = distinctWords(rng, n + 1, rng.int(2, 3)).map((w, i) =>
    theme.key === "Year" ? String(1950 + i) : `${w} ${distinctWords(rng, 1, 2)[0]}`,
  );
  const rows = keys
    .slice(0, n)
    .map((key) => [
      key,
      rng.pick(theme.category.values),
      formatNumber(first.min + rng.next() * (first.max - first.min), first),
      formatNumber(second.min + rng.next() * (second.max - second.min), second),
      rng.pick(theme.text.words),
    ]);
  const type = typeFor(rng);
  const row = rng.pick(rows);
  const table = q(theme.table);
  const number = rng.pick([first, second]);
  const numberIndex = columns.indexOf(number.name);
  let description: string;
  let referenceSql: string;
  switch (type) {
    case "INSERT": {
      const values = [
        keys[n]!,
        rng.pick(theme.category.values),
        formatNumber(first.min + rng.next() * (first.max - first.min), first),
        formatNumber(second.min + rng.next() * (second.max - second.min), second),
        rng.pick(theme.text.words),
      ];
      description = `Add (${values.map(lit).join(", ")}) to the '${theme.table}' table through INSERT INTO command.`;
      referenceSql = `INSERT INTO ${table} (${columns.map(q).join(", ")}) VALUES (${values.map(lit).join(", ")})`;
      break;
    }
    case "UPDATE": {
      const value = rng.pick(theme.text.words);
      description = `Change the ${theme.text.name} of the ${theme.noun} ${row[0]} to '${value}' in the ${theme.table} table.`;
      referenceSql = `UPDATE ${table} SET ${q(theme.text.name)} = ${lit(value)} WHERE ${q(theme.key)} = ${lit(row[0]!)}`;
      break;
    }
    case "counting": {
      description = `How many ${theme.nouns} have a ${theme.category.name} of ${row[1]}?`;
      referenceSql = `SELECT COUNT(*) FROM ${table} WHERE ${q(theme.category.name)} = ${lit(row[1]!)}`;
      break;
    }
    case "comparison": {
      const threshold = row[numberIndex]!;
      description = `Which ${theme.key} has a ${theme.category.name} of ${row[1]} and a ${number.name} of at least ${threshold}?`;
      referenceSql = `SELECT ${q(theme.key)} FROM ${table} WHERE ${q(theme.category.name)} = ${lit(row[1]!)} AND ${num(number.name)} >= ${threshold.replaceAll(",", "")}`;
      break;
    }
    case "ranking": {
      // The wider column, so that ties for first place are rare.
      const number = first.max - first.min >= second.max - second.min ? first : second;
      const highest = rng.chance(0.5);
      description = `Which ${theme.noun} has the ${highest ? "highest" : "lowest"} ${number.name}?`;
      referenceSql = `SELECT ${q(theme.key)} FROM ${table} ORDER BY ${num(number.name)} ${highest ? "DESC" : "ASC"} LIMIT 1`;
      break;
    }
    case "other": {
      description = `What is the ${theme.text.name} when the ${theme.key} is ${row[0]}?`;
      referenceSql = `SELECT ${q(theme.text.name)} FROM ${table} WHERE ${q(theme.key)} = ${lit(row[0]!)}`;
      break;
    }
    default: {
      const fn = type.slice("aggregation-".length);
      const word = { SUM: "total", MIN: "lowest", MAX: "highest", AVG: "average" }[fn] ?? "total";
      description = `What is the ${word} ${number.name} for ${theme.nouns} with a ${theme.category.name} of ${row[1]}?`;
      referenceSql = `SELECT ${fn}${num(number.name)} FROM ${table} WHERE ${q(theme.category.name)} = ${lit(row[1]!)}`;
    }
  }
  return {
    index,
    type,
    description,
    addDescription: `The name of this table is ${theme.table}, and the headers of this table are ${columns.join(",")}.`,
    evidence: "",
    tables: [{ name: theme.table, columns, rows }],
    label: [],
    referenceSql,
  };
}
