import { describe, expect, it } from "vitest";
import { EpisodeSession, scriptedStats } from "../../shared/env/session.ts";
import type { Episode, StepResult } from "../../shared/env/task.ts";
import { callTool } from "../common/agent.ts";
import { generateWebShopInstance, type Product } from "./catalog.ts";
import { taskModule } from "./index.ts";
import { containsPhrase, purchaseReward, typeReward } from "./reward.ts";

const task = taskModule.task;
const never = new AbortController().signal;

/** First train instance whose goal asks for at least `options` options. */
function indexWithOptions(options: number): number {
  for (let i = 0; i < 1000; i++) if (Object.keys(generateWebShopInstance(i).goal.options).length >= options) return i;
  throw new Error("no such instance");
}

async function play(episode: Episode, calls: Array<[string, Record<string, string>]>): Promise<StepResult[]> {
  const results: StepResult[] = [];
  for (const [tool, args] of calls) results.push(await episode.call(tool, args, never));
  return results;
}

describe("webshop generator", () => {
  it("is deterministic by index and varies across indices", () => {
    expect(generateWebShopInstance(3)).toEqual(generateWebShopInstance(3));
    const goals = new Set(Array.from({ length: 50 }, (_, i) => generateWebShopInstance(i).goal.instruction));
    expect(goals.size).toBeGreaterThan(45);
  });

  it("has disjoint train and test splits of the required sizes", () => {
    const { train, test } = task.splits;
    expect(train.end - train.start).toBeGreaterThanOrEqual(10_000);
    expect(test.end - test.start).toBeGreaterThanOrEqual(500);
    expect(train.end <= test.start || test.end <= train.start).toBe(true);
  });

  it("always includes a product that fully satisfies the goal, and near misses that do not", () => {
    for (let i = 0; i < 50; i++) {
      const { products, goal, targetAsin } = generateWebShopInstance(i);
      const target = products.find((p) => p.asin === targetAsin)!;
      expect(purchaseReward(target, goal.options, goal).reward).toBe(1);
      const sameType = products.filter((p) => p.type === goal.type);
      const misses = sameType.filter((p) => purchaseReward(p, goal.options, goal).reward < 1);
      expect(misses.length).toBeGreaterThan(0);
    }
  });
});

describe("webshop reward", () => {
  const { products, goal, targetAsin } = generateWebShopInstance(indexWithOptions(2));
  const target = products.find((p) => p.asin === targetAsin)!;

  it("counts attributes, options and price over their total, times the type match", () => {
    const total = goal.attributes.length + Object.keys(goal.options).length + 1;
    const oneOption = Object.fromEntries(Object.entries(goal.options).slice(0, 1));
    expect(purchaseReward(target, oneOption, goal).reward).toBeCloseTo((total - 1) / total);
    expect(purchaseReward(target, {}, goal).reward).toBeCloseTo((total - 2) / total);
    const pricey: Product = { ...target, price: goal.priceUpper + 0.01 };
    expect(purchaseReward(pricey, goal.options, goal)).toMatchObject({ priceMatch: false });
    expect(purchaseReward(pricey, goal.options, goal).reward).toBeCloseTo((total - 1) / total);
    const other = products.find((p) => p.type !== goal.type && typeReward(p, goal) === 0)!;
    expect(purchaseReward(other, goal.options, goal).reward).toBe(0);
  });

  it("matches attributes as whole words", () => {
    expect(containsPhrase("Toledi Desk Lamp", "led")).toBe(false);
    expect(containsPhrase("Toledi Led Desk Lamp", "led")).toBe(true);
    expect(containsPhrase("Non Slip Yoga Mat", "non slip")).toBe(true);
  });
});

describe("webshop tools", () => {
  it("searches, pages, opens an item, selects options and buys with the reward", async () => {
    const index = indexWithOptions(2);
    const { goal, targetAsin, products } = generateWebShopInstance(index);
    const target = products.find((p) => p.asin === targetAsin)!;
    const episode = await task.start(index, never);
    expect(episode.messages[1]?.content).toBe(`Instruction: ${goal.instruction}\n[Search]`);
    const [results] = await play(episode, [["search_action", { keywords: `${goal.type}` }]]);
    expect(results!.observation).toMatch(/^Page 1 of \d+ \(\d+ results for ".*"\)\n\[Back to Search\]/);
    // Page until the target shows up, then open it.
    let page = results!.observation;
    for (let i = 0; i < 5 && !page.includes(targetAsin); i++) {
      page = (await episode.call("click_action", { element: "Next >" }, never)).observation;
    }
    expect(page).toContain(`[${targetAsin}] ${target.title} $${target.price.toFixed(2)}`);
    const item = await episode.call("click_action", { element: `[${targetAsin}]` }, never);
    expect(item.observation).toContain(`Price: $${target.price.toFixed(2)}`);
    const features = await episode.call("click_action", { element: "features" }, never);
    expect(features.observation).toContain(`Features: ${target.attributes.join("; ")}`);
    await episode.call("click_action", { element: "< Prev" }, never);
    for (const value of Object.values(goal.options)) await episode.call("click_action", { element: value }, never);
    const back = await episode.call("click_action", { element: "Description" }, never);
    expect(back.observation).toContain("Description: A ");
    const again = await episode.call("click_action", { element: "< Prev" }, never);
    expect(again.observation).toContain(
      `Selected: ${Object.entries(goal.options)
        .map(([n, v]) => `${n}: ${v}`)
        .join("; ")}`,
    );
    const bought = await episode.call("click_action", { element: "Buy Now" }, never);
    expect(bought).toMatchObject({ finish: "completed", reward: { reward: 1, metrics: { success: 1 } } });
    expect(bought.observation).toContain("Your score (min 0.0, max 1.0): 1.00");
  });

  it("explains clicks that are not on the page and searches away from the search page", async () => {
    const episode = await task.start(0, never);
    const [click, search, again] = await play(episode, [
      ["click_action", { element: "Buy Now" }],
      ["search_action", { keywords: "mug" }],
      ["search_action", { keywords: "mug" }],
    ]);
    expect(click!.observation).toBe(
      'Error: "Buy Now" is not a clickable element on this page. Clickable: none. Use search_action on the search page.',
    );
    expect(search!.observation).toMatch(/^Page 1 of/);
    expect(again!.observation).toMatch(/^Error: there is no search bar on this page; click \[Back to Search\] first\./);
    const wrong = await episode.call("click_action", { element: "B0NOTHERE1" }, never);
    expect(wrong.observation).toMatch(
      /^Error: "B0NOTHERE1" is not a clickable element on this page\. Clickable: \[Back to Search\]/,
    );
    expect(wrong.finish).toBeUndefined();
  });

  it("ends with task limit reached after 20 turns without buying", async () => {
    const session = new EpisodeSession(task, await task.start(0, never));
    let status = "running";
    for (let turn = 0; turn < 25 && status === "running"; turn++) {
      status = (await session.interact(callTool("click_action", { element: "Back to Search" }, turn), never)).status;
    }
    expect(status).toBe("task limit reached");
    expect(session.turnCount).toBe(20);
    expect(session.reward).toBe(0);
  });
});

describe("webshop agents", () => {
  it("the expert scores 1 on at least 99% of 200 test instances; the random baseline far fewer", async () => {
    const test = Array.from({ length: 200 }, (_, i) => task.splits.test.start + i);
    expect((await scriptedStats(task, taskModule.expert, test)).successRate).toBeGreaterThanOrEqual(0.99);
    expect((await scriptedStats(task, taskModule.random, test.slice(0, 100))).successRate).toBeLessThan(0.25);
  });
});
