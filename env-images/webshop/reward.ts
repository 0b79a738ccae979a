import type { Goal, Product } from "./catalog.ts";

/**
 * WebShop's purchase reward (web_agent_site/engine/goal.py, get_reward), with whole-word
 * matching in place of spaCy noun parsing and fuzzy string matching (our catalogue is
 * generated, so its wording is exact):
 *
 *   reward = r_type * (matched attributes + matched options + [price <= ceiling])
 *                   / (goal attributes + goal options + 1)
 *
 * r_type is 1 when the query, the category or enough of the product-type words match, 0.5 when
 * none does, 0.1 when under a tenth of the type words appear in the title, 0 when none do.
 */

/** The reward and the parts it was computed from. */
export interface RewardBreakdown {
  readonly reward: number;
  readonly rType: number;
  readonly attributeMatches: number;
  readonly optionMatches: number;
  readonly priceMatch: boolean;
}

function words(text: string): string[] {
  return text.toLowerCase().match(/[a-z0-9]+/g) ?? [];
}

/** Whether `phrase` occurs in `text` as whole words ("led" is not found in "Toledi"). */
export function containsPhrase(text: string, phrase: string): boolean {
  return ` ${words(text).join(" ")} `.includes(` ${words(phrase).join(" ")} `);
}

/** Type reward: is the bought product the kind of thing the goal asks for? */
export function typeReward(product: Product, goal: Goal): number {
  const queryMatch = product.type === goal.type;
  const productPath = product.category.split("›").map((s) => s.trim());
  const goalPath = new Set(goal.category.split("›").map((s) => s.trim()));
  const categoryMatch = productPath.filter((p) => goalPath.has(p)).length >= 2;
  const desired = new Set(words(goal.type));
  const bought = new Set(words(product.title));
  const titleScore = desired.size === 0 ? 0.2 : [...desired].filter((w) => bought.has(w)).length / desired.size;
  let rType = queryMatch || categoryMatch || titleScore > 0.2 ? 1 : 0.5;
  if (titleScore < 0.1) rType = 0.1;
  if (titleScore === 0) rType = 0;
  return rType;
}

/** Reward of buying `product` with `selected` options (option name -> value) at its price. */
export function purchaseReward(
  product: Product,
  selected: Readonly<Record<string, string>>,
  goal: Goal,
): RewardBreakdown {
  const text = `${product.title} ${product.description}`;
  const attributeMatches = goal.attributes.filter(
    (a) => product.attributes.includes(a) || containsPhrase(text, a),
  ).length;
  const chosen = new Set(Object.values(selected).map((v) => v.toLowerCase()));
  const goalOptions = Object.values(goal.options);
  const optionMatches = goalOptions.filter((v) => chosen.has(v.toLowerCase())).length;
  const priceMatch = product.price <= goal.priceUpper;
  const rType = typeReward(product, goal);
  const reward =
    (rType * (attributeMatches + optionMatches + (priceMatch ? 1 : 0))) /
    (goal.attributes.length + goalOptions.length + 1);
  return { reward, rType, attributeMatches, optionMatches, priceMatch };
}
