import { madeUpWord, type Rng, rngFor } from "../common/rng.ts";

/**
 * WebShop instances: a small generated catalogue (the target product's type plus a few other
 * types, with near-miss distractors) and a shopping goal drawn from one target product, in the
 * shape of WebShop's synthetic goals: attributes, options and a price ceiling.
 */

interface ProductType {
  /** Noun phrase used in titles and instructions ("running shoes"). */
  readonly name: string;
  /** Category path, WebShop style. */
  readonly category: string;
  readonly options: Readonly<Record<string, readonly string[]>>;
  readonly attributes: readonly string[];
  readonly price: readonly [number, number];
}

const COLORS = ["black", "white", "blue", "red", "grey", "green", "pink", "beige"];

const PRODUCT_TYPES: readonly ProductType[] = [
  {
    name: "running shoes",
    category: "clothing › shoes › athletic",
    options: { size: ["6", "7", "8", "9", "10", "11", "12"], color: COLORS },
    attributes: ["lightweight", "non slip", "breathable", "water resistant", "arch support", "memory foam"],
    price: [25, 140],
  },
  {
    name: "hiking backpack",
    category: "sports › outdoor › bags",
    options: { color: COLORS, capacity: ["20l", "30l", "40l", "50l"] },
    attributes: ["waterproof", "lightweight", "padded straps", "laptop sleeve", "anti theft", "rain cover"],
    price: [20, 120],
  },
  {
    name: "cotton t-shirt",
    category: "clothing › men › shirts",
    options: { size: ["small", "medium", "large", "x-large"], color: COLORS },
    attributes: ["slim fit", "short sleeve", "machine wash", "moisture wicking", "crew neck", "long lasting"],
    price: [8, 40],
  },
  {
    name: "wireless headphones",
    category: "electronics › audio › headphones",
    options: { color: COLORS },
    attributes: [
      "noise cancelling",
      "bluetooth",
      "long battery life",
      "foldable",
      "built-in microphone",
      "fast charging",
    ],
    price: [20, 200],
  },
  {
    name: "coffee mug",
    category: "home › kitchen › drinkware",
    options: { volume: ["12 oz", "16 oz", "20 oz"], color: COLORS },
    attributes: ["dishwasher safe", "microwave safe", "ceramic", "insulated", "lid included", "bpa free"],
    price: [6, 35],
  },
  {
    name: "phone case",
    category: "electronics › accessories › cases",
    options: { model: ["model a", "model b", "model c", "model d"], color: COLORS },
    attributes: ["shockproof", "slim", "clear", "magnetic", "kickstand", "wireless charging"],
    price: [6, 40],
  },
  {
    name: "desk lamp",
    category: "home › lighting › lamps",
    options: { color: COLORS },
    attributes: ["dimmable", "usb charging", "led", "adjustable arm", "touch control", "eye caring"],
    price: [12, 90],
  },
  {
    name: "yoga mat",
    category: "sports › fitness › mats",
    options: { thickness: ["4mm", "6mm", "8mm", "10mm"], color: COLORS },
    attributes: ["non slip", "eco friendly", "extra thick", "carrying strap", "sweat resistant", "double sided"],
    price: [12, 80],
  },
];

/** One catalogue item. */
export interface Product {
  readonly asin: string;
  readonly type: string;
  readonly category: string;
  readonly title: string;
  readonly price: number;
  readonly attributes: readonly string[];
  /** Option name -> values this product is offered in. */
  readonly options: Readonly<Record<string, readonly string[]>>;
  readonly description: string;
}

/** What the user wants: WebShop's attributes, options and price ceiling. */
export interface Goal {
  readonly type: string;
  readonly category: string;
  readonly attributes: readonly string[];
  readonly options: Readonly<Record<string, string>>;
  readonly priceUpper: number;
  readonly instruction: string;
}

/** One generated catalogue and goal. */
export interface WebShopInstance {
  readonly index: number;
  readonly products: readonly Product[];
  readonly goal: Goal;
  /** ASIN of the product the goal was drawn from (one of possibly several that fully satisfy it). */
  readonly targetAsin: string;
}

/** Train and test index ranges (disjoint). */
export const WEBSHOP_SPLITS = { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_500 } } as const;

const ASIN_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789";

function titleCase(text: string): string {
  return text.replace(/(^|[\s-])([a-z])/g, (_, sep: string, c: string) => sep + c.toUpperCase());
}

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

function makeProduct(
  rng: Rng,
  type: ProductType,
  asins: Set<string>,
  overrides: { attributes?: readonly string[]; options?: Record<string, readonly string[]>; price?: number } = {},
): Product {
  let asin: string;
  do {
    asin = "B0";
    for (let i = 0; i < 8; i++) asin += rng.pick([...ASIN_CHARS]);
  } while (asins.has(asin));
  asins.add(asin);
  const attributes = overrides.attributes ?? rng.sample(type.attributes, rng.int(2, 3));
  const options =
    overrides.options ??
    Object.fromEntries(
      Object.entries(type.options).map(([name, values]) => [
        name,
        rng
          .sample(values, rng.int(2, Math.min(4, values.length)))
          .sort((a, b) => values.indexOf(a) - values.indexOf(b)),
      ]),
    );
  const price = overrides.price ?? round2(rng.int(type.price[0] * 100, type.price[1] * 100) / 100);
  const brand = madeUpWord(rng, 2);
  return {
    asin,
    type: type.name,
    category: type.category,
    title: titleCase(`${brand} ${attributes.join(" ")} ${type.name}`),
    price,
    attributes,
    options,
    description: `A ${attributes.join(", ")} ${type.name} by ${brand}.`,
  };
}

/** Builds instance `index`; a pure function of the index. */
export function generateWebShopInstance(index: number): WebShopInstance {
  const rng = rngFor("webshop", index);
  const asins = new Set<string>();
  const [targetType, ...others] = rng.shuffle(PRODUCT_TYPES);
  const type = targetType!;
  const target = makeProduct(rng, type, asins);

  // Goal: some of the target's attributes and options, and a price ceiling above its price.
  const goalAttributes = rng.sample(target.attributes, rng.int(1, Math.min(2, target.attributes.length)));
  const optionNames = rng.sample(Object.keys(target.options), rng.int(0, Object.keys(target.options).length));
  const goalOptions = Object.fromEntries(optionNames.map((name) => [name, rng.pick(target.options[name]!)]));
  const priceUpper = Math.ceil((target.price + rng.int(1, 30)) / 10) * 10;

  const products: Product[] = [target];
  // Near misses: the same type failing the goal on exactly one count.
  const missing = (attribute: string) => type.attributes.filter((a) => a !== attribute && !goalAttributes.includes(a));
  for (let i = 0; i < rng.int(2, 4); i++) {
    const kind = rng.int(0, 2);
    if (kind === 0) {
      const dropped = rng.pick(goalAttributes);
      const attributes = target.attributes.map((a) => (a === dropped ? rng.pick(missing(a)) : a));
      products.push(makeProduct(rng, type, asins, { attributes: [...new Set(attributes)], options: target.options }));
    } else if (kind === 1) {
      const price = round2(priceUpper + rng.int(100, 3000) / 100);
      products.push(makeProduct(rng, type, asins, { attributes: target.attributes, options: target.options, price }));
    } else {
      const options = Object.fromEntries(
        Object.entries(target.options).map(([name, values]) => {
          const wanted = goalOptions[name];
          const pool = type.options[name]!.filter((v) => v !== wanted);
          return [name, wanted === undefined ? values : rng.sample(pool, Math.min(3, pool.length))];
        }),
      );
      products.push(makeProduct(rng, type, asins, { attributes: target.attributes, options }));
    }
  }
  for (let i = 0; i < rng.int(4, 8); i++) products.push(makeProduct(rng, type, asins));
  for (const other of others.slice(0, 3))
    for (let i = 0; i < rng.int(2, 4); i++) products.push(makeProduct(rng, other, asins));

  const optionText = Object.entries(goalOptions)
    .map(([name, value]) => `, and ${name}: ${value}`)
    .join("");
  const instruction = `i am looking for ${type.name} that ${goalAttributes.length > 1 ? "are" : "is"} ${goalAttributes.join(" and ")}${optionText}, and price lower than ${priceUpper.toFixed(2)} dollars`;
  return {
    index,
    products: rng.shuffle(products),
    goal: {
      type: type.name,
      category: type.category,
      attributes: goalAttributes,
      options: goalOptions,
      priceUpper,
      instruction,
    },
    targetAsin: target.asin,
  };
}
