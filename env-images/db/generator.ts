import { distinctWords, type Rng, rngFor } from "../common/rng.ts";

/**
 * DB instances: one small generated table and one question about it. SELECT questions are judged
 * by the answer set of the reference query; INSERT/UPDATE/DELETE tasks by a hash of the table
 * after the reference statement. Both ground truths are computed by running the reference SQL on
 * SQLite at episode start (task.ts), never hand-written.
 */

interface NumericColumn {
  readonly name: string;
  readonly min: number;
  readonly max: number;
}

interface Theme {
  readonly table: string;
  /** Unique text column naming each row. */
  readonly key: string;
  /** Categorical text column. */
  readonly category: string;
  readonly categories: readonly string[];
  readonly numbers: readonly [NumericColumn, NumericColumn];
  readonly noun: string;
  readonly nouns: string;
}

const THEMES: readonly Theme[] = [
  {
    table: "products",
    key: "name",
    category: "category",
    categories: ["tools", "toys", "books", "garden", "kitchen"],
    numbers: [
      { name: "price", min: 5, max: 500 },
      { name: "stock", min: 0, max: 120 },
    ],
    noun: "product",
    nouns: "products",
  },
  {
    table: "employees",
    key: "name",
    category: "department",
    categories: ["sales", "it", "hr", "ops", "legal"],
    numbers: [
      { name: "salary", min: 3000, max: 9000 },
      { name: "age", min: 21, max: 64 },
    ],
    noun: "employee",
    nouns: "employees",
  },
  {
    table: "cities",
    key: "name",
    category: "country",
    categories: ["norland", "estavia", "mirania", "tolvia", "kasmar"],
    numbers: [
      { name: "population", min: 10, max: 900 },
      { name: "area", min: 5, max: 400 },
    ],
    noun: "city",
    nouns: "cities",
  },
  {
    table: "books",
    key: "title",
    category: "genre",
    categories: ["fantasy", "mystery", "history", "poetry", "science"],
    numbers: [
      { name: "year", min: 1950, max: 2023 },
      { name: "pages", min: 80, max: 900 },
    ],
    noun: "book",
    nouns: "books",
  },
  {
    table: "teams",
    key: "name",
    category: "league",
    categories: ["north", "south", "east", "west", "central"],
    numbers: [
      { name: "wins", min: 0, max: 40 },
      { name: "points", min: 0, max: 120 },
    ],
    noun: "team",
    nouns: "teams",
  },
];

/** Question families; the last four change the table. */
export const DB_KINDS = [
  "lookup",
  "count",
  "extreme",
  "argextreme",
  "sum",
  "filter",
  "count_range",
  "insert",
  "update_one",
  "update_group",
  "delete",
] as const;
export type DbKind = (typeof DB_KINDS)[number];
const KIND_WEIGHTS: Readonly<Record<DbKind, number>> = {
  lookup: 1,
  count: 1,
  extreme: 1,
  argextreme: 1,
  sum: 1,
  filter: 1,
  count_range: 1,
  insert: 1,
  update_one: 1,
  update_group: 0.7,
  delete: 1,
};

/** Whether a question family is judged by the table state instead of an answer list. */
export function isMutation(kind: DbKind): boolean {
  return kind === "insert" || kind === "update_one" || kind === "update_group" || kind === "delete";
}

/** One generated table plus its question and reference statement. */
export interface DbInstance {
  readonly index: number;
  readonly kind: DbKind;
  readonly table: string;
  readonly columns: readonly string[];
  /** SQL that creates and fills the table. */
  readonly setupSql: string;
  readonly question: string;
  /** The statement whose result (or effect) is the ground truth. */
  readonly referenceSql: string;
}

/** Train and test index ranges (disjoint). */
export const DB_SPLITS = { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_500 } } as const;

type Row = { key: string; category: string; a: number; b: number };

function quote(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** Distinct integers in [min, max] (so that maxima, minima and lookups are unambiguous). */
function distinctInts(rng: Rng, count: number, min: number, max: number): number[] {
  const seen = new Set<number>();
  while (seen.size < count) seen.add(rng.int(min, max));
  return rng.shuffle([...seen]);
}

/** Builds instance `index`; a pure function of the index. */
export function generateDbInstance(index: number): DbInstance {
  const rng = rngFor("db", index);
  const theme = rng.pick(THEMES);
  const rowCount = rng.int(5, 10);
  const categories = rng.sample(theme.categories, 3);
  const keys = distinctWords(rng, rowCount + 1, rng.int(2, 3));
  const newKey = keys.pop()!;
  const [numA, numB] = theme.numbers;
  const valuesA = distinctInts(rng, rowCount + 1, numA.min, numA.max);
  const valuesB = distinctInts(rng, rowCount + 1, numB.min, numB.max);
  const rows: Row[] = keys.map((key, i) => ({
    key,
    category: categories[i % categories.length]!,
    a: valuesA[i]!,
    b: valuesB[i]!,
  }));
  const columns = [theme.key, theme.category, numA.name, numB.name];
  const setupSql = [
    `CREATE TABLE ${theme.table} (${theme.key} TEXT, ${theme.category} TEXT, ${numA.name} INTEGER, ${numB.name} INTEGER)`,
    ...rows.map((r) => `INSERT INTO ${theme.table} VALUES (${quote(r.key)}, ${quote(r.category)}, ${r.a}, ${r.b})`),
  ].join(";\n");

  const kind = DB_KINDS[rng.weighted(DB_KINDS.map((k) => KIND_WEIGHTS[k]))]!;
  const t = theme.table;
  const row = rng.pick(rows);
  const useA = rng.chance(0.5);
  const num = useA ? numA : numB;
  const numOf = (r: Row) => (useA ? r.a : r.b);
  const cat = rng.pick(categories);
  const sorted = rows.map(numOf).sort((x, y) => x - y);
  let question: string;
  let referenceSql: string;
  switch (kind) {
    case "lookup":
      question = `What is the ${num.name} of the ${theme.noun} whose ${theme.key} is '${row.key}'?`;
      referenceSql = `SELECT ${num.name} FROM ${t} WHERE ${theme.key} = ${quote(row.key)}`;
      break;
    case "count":
      question = `How many ${theme.nouns} have ${theme.category} '${cat}'?`;
      referenceSql = `SELECT COUNT(*) FROM ${t} WHERE ${theme.category} = ${quote(cat)}`;
      break;
    case "extreme": {
      const highest = rng.chance(0.5);
      const filtered = rng.chance(0.5);
      question = `What is the ${highest ? "highest" : "lowest"} ${num.name} of all ${theme.nouns}${filtered ? ` with ${theme.category} '${cat}'` : ""}?`;
      referenceSql = `SELECT ${highest ? "MAX" : "MIN"}(${num.name}) FROM ${t}${filtered ? ` WHERE ${theme.category} = ${quote(cat)}` : ""}`;
      break;
    }
    case "argextreme": {
      const highest = rng.chance(0.5);
      question = `Which ${theme.noun} has the ${highest ? "highest" : "lowest"} ${num.name}? Answer with its ${theme.key}.`;
      referenceSql = `SELECT ${theme.key} FROM ${t} ORDER BY ${num.name} ${highest ? "DESC" : "ASC"} LIMIT 1`;
      break;
    }
    case "sum":
      question = `What is the total ${num.name} of the ${theme.nouns} with ${theme.category} '${cat}'?`;
      referenceSql = `SELECT SUM(${num.name}) FROM ${t} WHERE ${theme.category} = ${quote(cat)}`;
      break;
    case "filter": {
      // A threshold leaving one to four rows above it.
      const above = rng.int(1, Math.min(4, rows.length - 1));
      const threshold = sorted[sorted.length - above - 1]!;
      question = `List the ${theme.key} of every ${theme.noun} with ${num.name} greater than ${threshold}.`;
      referenceSql = `SELECT ${theme.key} FROM ${t} WHERE ${num.name} > ${threshold}`;
      break;
    }
    case "count_range": {
      const threshold = sorted[rng.int(1, sorted.length - 2)]!;
      question = `How many ${theme.nouns} with ${theme.category} '${cat}' have ${num.name} less than ${threshold}?`;
      referenceSql = `SELECT COUNT(*) FROM ${t} WHERE ${theme.category} = ${quote(cat)} AND ${num.name} < ${threshold}`;
      break;
    }
    case "insert": {
      const a = valuesA[rowCount]!;
      const b = valuesB[rowCount]!;
      question = `Add a ${theme.noun} with ${theme.key} '${newKey}', ${theme.category} '${cat}', ${numA.name} ${a} and ${numB.name} ${b}.`;
      referenceSql = `INSERT INTO ${t} (${columns.join(", ")}) VALUES (${quote(newKey)}, ${quote(cat)}, ${a}, ${b})`;
      break;
    }
    case "update_one": {
      const value = rng.int(num.min, num.max);
      question = `Change the ${num.name} of the ${theme.noun} whose ${theme.key} is '${row.key}' to ${value}.`;
      referenceSql = `UPDATE ${t} SET ${num.name} = ${value} WHERE ${theme.key} = ${quote(row.key)}`;
      break;
    }
    case "update_group": {
      const delta = rng.int(1, 20);
      question = `Increase the ${num.name} of every ${theme.noun} with ${theme.category} '${cat}' by ${delta}.`;
      referenceSql = `UPDATE ${t} SET ${num.name} = ${num.name} + ${delta} WHERE ${theme.category} = ${quote(cat)}`;
      break;
    }
    case "delete": {
      const threshold = sorted[rng.int(1, Math.min(3, sorted.length - 1))]!;
      question = `Delete every ${theme.noun} whose ${num.name} is less than ${threshold}.`;
      referenceSql = `DELETE FROM ${t} WHERE ${num.name} < ${threshold}`;
      break;
    }
  }
  return { index, kind, table: t, columns, setupSql, question, referenceSql };
}
