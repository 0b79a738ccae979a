import { distinctWords, type Rng } from "../common/rng.ts";

/**
 * The knowledge graph of one KG instance: a few dozen generated entities (people, films,
 * companies, cities, countries, books) joined by Freebase-style relations in both directions,
 * with numeric attributes for argmax/argmin questions.
 */

/** Entity types of the generated graphs. */
export const ENTITY_TYPES = ["person", "film", "company", "city", "country", "book"] as const;
export type EntityType = (typeof ENTITY_TYPES)[number];

/** A relation between two entity types, with its inverse and a question phrase. */
export interface RelationSchema {
  readonly name: string;
  readonly domain: EntityType;
  readonly range: EntityType;
  readonly inverse: string;
  /** Noun phrase for the related entities of `x` ("the films directed by {x}"). */
  readonly phrase: string;
}

function pair(
  forward: [name: string, domain: EntityType, range: EntityType, phrase: string],
  backward: [name: string, phrase: string],
): RelationSchema[] {
  const [name, domain, range, phrase] = forward;
  const [inverse, inversePhrase] = backward;
  return [
    { name, domain, range, inverse, phrase },
    { name: inverse, domain: range, range: domain, inverse: name, phrase: inversePhrase },
  ];
}

/** Every relation, each with its inverse. */
export const RELATIONS: readonly RelationSchema[] = [
  ...pair(
    ["film.directed_by", "film", "person", "the directors of {x}"],
    ["person.films_directed", "the films directed by {x}"],
  ),
  ...pair(
    ["film.starring", "film", "person", "the actors in {x}"],
    ["person.films_acted_in", "the films starring {x}"],
  ),
  ...pair(
    ["film.produced_by", "film", "company", "the producers of {x}"],
    ["company.films_produced", "the films produced by {x}"],
  ),
  ...pair(
    ["person.place_of_birth", "person", "city", "the birthplaces of {x}"],
    ["city.people_born_here", "the people born in {x}"],
  ),
  ...pair(
    ["company.headquarters", "company", "city", "the headquarters cities of {x}"],
    ["city.companies_based_here", "the companies based in {x}"],
  ),
  ...pair(["city.country", "city", "country", "the countries of {x}"], ["country.cities", "the cities in {x}"]),
  ...pair(
    ["book.author", "book", "person", "the authors of {x}"],
    ["person.books_written", "the books written by {x}"],
  ),
  ...pair(
    ["book.publisher", "book", "company", "the publishers of {x}"],
    ["company.books_published", "the books published by {x}"],
  ),
];

/** RELATIONS by name. */
export const RELATION_BY_NAME: ReadonlyMap<string, RelationSchema> = new Map(RELATIONS.map((r) => [r.name, r]));

/** A numerical attribute of one entity type (for argmax/argmin). */
export interface AttributeSchema {
  readonly name: string;
  readonly type: EntityType;
  readonly label: string;
  readonly min: number;
  readonly max: number;
}

/** Every attribute, by type. */
export const ATTRIBUTES: readonly AttributeSchema[] = [
  { name: "person.birth_year", type: "person", label: "birth year", min: 1930, max: 2005 },
  { name: "person.height_cm", type: "person", label: "height in cm", min: 150, max: 205 },
  { name: "film.release_year", type: "film", label: "release year", min: 1960, max: 2024 },
  { name: "film.runtime_minutes", type: "film", label: "runtime in minutes", min: 75, max: 210 },
  { name: "film.budget_musd", type: "film", label: "budget in million dollars", min: 1, max: 300 },
  { name: "company.founded_year", type: "company", label: "founding year", min: 1900, max: 2020 },
  { name: "company.employees", type: "company", label: "number of employees", min: 20, max: 90_000 },
  { name: "city.population_k", type: "city", label: "population in thousands", min: 5, max: 9_000 },
  { name: "city.elevation_m", type: "city", label: "elevation in metres", min: 0, max: 2_500 },
  { name: "country.area_kkm2", type: "country", label: "area in thousand square km", min: 10, max: 3_000 },
  { name: "book.publication_year", type: "book", label: "publication year", min: 1900, max: 2024 },
  { name: "book.pages", type: "book", label: "number of pages", min: 60, max: 1_200 },
];

/** One node of the graph. */
export interface Entity {
  readonly name: string;
  readonly type: EntityType;
  readonly attributes: Readonly<Record<string, number>>;
}

/** Entities and labelled edges; `neighbors` answers both directions since every relation has an inverse. */
export class KnowledgeGraph {
  private readonly byName = new Map<string, Entity>();
  private readonly byLowerName = new Map<string, Entity>();
  private readonly edges = new Map<string, Map<string, Set<string>>>();

  add(entity: Entity): void {
    this.byName.set(entity.name, entity);
    this.byLowerName.set(entity.name.toLowerCase(), entity);
  }

  /** Adds `subject --relation--> object` and its inverse. */
  link(subject: string, relation: string, object: string): void {
    const schema = RELATION_BY_NAME.get(relation);
    if (!schema) throw new Error(`unknown relation ${relation}`);
    this.addEdge(subject, relation, object);
    this.addEdge(object, schema.inverse, subject);
  }

  private addEdge(from: string, relation: string, to: string): void {
    let out = this.edges.get(from);
    if (!out) {
      out = new Map();
      this.edges.set(from, out);
    }
    let targets = out.get(relation);
    if (!targets) {
      targets = new Set();
      out.set(relation, targets);
    }
    targets.add(to);
  }

  entity(name: string): Entity | undefined {
    return this.byName.get(name);
  }

  /** Case-insensitive lookup, as agents type names. */
  find(name: string): Entity | undefined {
    return this.byName.get(name) ?? this.byLowerName.get(name.toLowerCase());
  }

  ofType(type: EntityType): Entity[] {
    return [...this.byName.values()].filter((e) => e.type === type);
  }

  /** Relations leaving any of `names`, sorted. */
  relationsOf(names: Iterable<string>): string[] {
    const found = new Set<string>();
    for (const name of names) for (const relation of this.edges.get(name)?.keys() ?? []) found.add(relation);
    return [...found].sort();
  }

  /** Entities reached from any of `names` through `relation`, sorted. */
  neighbors(names: Iterable<string>, relation: string): string[] {
    const found = new Set<string>();
    for (const name of names) for (const target of this.edges.get(name)?.get(relation) ?? []) found.add(target);
    return [...found].sort();
  }
}

const FILM_ADJECTIVES = [
  "Silent",
  "Red",
  "Last",
  "Hidden",
  "Broken",
  "Golden",
  "Distant",
  "Frozen",
  "Wild",
  "Lost",
  "Quiet",
  "Burning",
];
const FILM_NOUNS = [
  "River",
  "Garden",
  "Mirror",
  "Harbor",
  "Storm",
  "Letter",
  "Crown",
  "Bridge",
  "Season",
  "Engine",
  "Lantern",
  "Orchard",
];
const BOOK_NOUNS = ["Memory", "Tides", "Glass", "Wolves", "Salt", "Ashes", "Maps", "Echoes", "Thorns", "Clocks"];

/** Distinct attribute values so that argmax and argmin are never tied. */
function attributeValues(rng: Rng, type: EntityType, count: number): Array<Record<string, number>> {
  const out: Array<Record<string, number>> = Array.from({ length: count }, () => ({}));
  for (const attribute of ATTRIBUTES.filter((a) => a.type === type)) {
    const seen = new Set<number>();
    while (seen.size < count) seen.add(rng.int(attribute.min, attribute.max));
    const values = rng.shuffle([...seen]);
    out.forEach((record, i) => {
      record[attribute.name] = values[i]!;
    });
  }
  return out;
}

/** Generates a graph of about fifty entities. */
export function generateGraph(rng: Rng): KnowledgeGraph {
  const graph = new KnowledgeGraph();
  const words = distinctWords(rng, 60, 2);
  let next = 0;
  const word = () => words[next++]!;
  const make = (type: EntityType, names: string[]): string[] => {
    const attributes = attributeValues(rng, type, names.length);
    names.forEach((name, i) => {
      graph.add({ name, type, attributes: attributes[i]! });
    });
    return names;
  };

  const countries = make("country", [`${word()}ia`, `${word()}ia`, `${word()}ia`]);
  const cities = make(
    "city",
    Array.from({ length: 6 }, () => word()),
  );
  cities.forEach((city, i) => {
    graph.link(city, "city.country", countries[i % countries.length]!);
  });
  const companySuffix = ["Pictures", "Studios", "Press", "Media", "Works"];
  const companies = make(
    "company",
    companySuffix.map((suffix) => `${word()} ${suffix}`),
  );
  for (const company of companies) graph.link(company, "company.headquarters", rng.pick(cities));
  const people = make(
    "person",
    Array.from({ length: 14 }, () => `${word()} ${word()}`),
  );
  for (const person of people) graph.link(person, "person.place_of_birth", rng.pick(cities));
  const filmTitles = rng.sample(
    FILM_ADJECTIVES.flatMap((a) => FILM_NOUNS.map((n) => `${a} ${n}`)),
    12,
  );
  const films = make("film", filmTitles);
  const directors = people.slice(0, 6);
  for (const film of films) {
    graph.link(film, "film.directed_by", rng.pick(directors));
    for (const actor of rng.sample(people.slice(3), rng.int(2, 3))) graph.link(film, "film.starring", actor);
    graph.link(film, "film.produced_by", rng.pick(companies.slice(0, 3)));
  }
  const books = make(
    "book",
    rng.sample(BOOK_NOUNS, 6).map((noun) => `The ${noun} of ${word()}`),
  );
  for (const book of books) {
    graph.link(book, "book.author", rng.pick(people.slice(6)));
    graph.link(book, "book.publisher", rng.pick(companies.slice(2)));
  }
  return graph;
}
