import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, lastObservation, taskStatement, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { generateWebShopInstance } from "./catalog.ts";
import { containsPhrase } from "./reward.ts";
import { BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE } from "./site.ts";

/** The page the agent is looking at: the last observation, or the opening page. */
function currentPage(messages: readonly ChatMessage[]): string {
  return lastObservation(messages) || taskStatement(messages);
}

/** Elements the agent clicked so far (lower case). */
function clickedSoFar(messages: readonly ChatMessage[]): Set<string> {
  const clicked = new Set<string>();
  for (const message of messages) {
    if (message.role !== "assistant") continue;
    for (const call of message.tool_calls ?? []) {
      if (call.function.name !== "click_action") continue;
      const args: unknown = JSON.parse(call.function.arguments);
      if (typeof args === "object" && args !== null && "element" in args && typeof args.element === "string")
        clicked.add(args.element.toLowerCase());
    }
  }
  return clicked;
}

/**
 * The expert: knows the goal of instance `index` (attributes, options, price ceiling), searches
 * for it, reads result titles and prices to pick a product that fits, backs out of items that do
 * not offer the wanted options, selects each wanted option and buys.
 */
export const webshopExpert: ScriptedAgent = {
  name: "webshop-expert",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const { goal } = generateWebShopInstance(index);
    const turn = turnsSoFar(messages);
    const page = currentPage(messages);
    const click = (element: string) => callTool("click_action", { element }, turn);
    if (page.includes("[Search]")) {
      return callTool("search_action", { keywords: `${goal.attributes.join(" ")} ${goal.type}` }, turn);
    }
    if (page.startsWith("Page ")) {
      const clicked = clickedSoFar(messages);
      for (const line of page.split("\n")) {
        const item = /^\[(B0\w+)\] (.*) \$([\d.]+)$/.exec(line);
        if (!item || clicked.has(item[1]!.toLowerCase())) continue;
        const title = item[2]!;
        const fits =
          Number(item[3]) <= goal.priceUpper &&
          containsPhrase(title, goal.type) &&
          goal.attributes.every((a) => containsPhrase(title, a));
        if (fits) return click(item[1]!);
      }
      return click(page.includes(`[${NEXT_PAGE}]`) ? NEXT_PAGE : BACK_TO_SEARCH);
    }
    if (page.includes(`[${BUY_NOW}]`)) {
      const selected = /^Selected: (.*)$/m.exec(page)?.[1]?.split("; ") ?? [];
      for (const [name, value] of Object.entries(goal.options)) {
        const offered = new RegExp(`^${name}: .*\\[${value.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\]`, "m").test(page);
        if (!offered) return click(PREV_PAGE);
        if (!selected.includes(`${name}: ${value}`)) return click(value);
      }
      return click(BUY_NOW);
    }
    return click(page.includes(`[${PREV_PAGE}]`) ? PREV_PAGE : BACK_TO_SEARCH);
  },
};

/**
 * The random baseline: searches with a few words of the instruction, then clicks a random
 * clickable element of whatever page it is on.
 */
export const webshopRandom: ScriptedAgent = {
  name: "webshop-random",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const turn = turnsSoFar(messages);
    const rng = new Rng(hashString(`webshop-random:${index}:${turn}`));
    const page = currentPage(messages);
    if (page.includes("[Search]")) {
      const words = taskStatement(messages).match(/[a-z]+/g) ?? ["shop"];
      return callTool("search_action", { keywords: rng.sample(words, rng.int(1, 3)).join(" ") }, turn);
    }
    const clickables = [...page.matchAll(/\[([^\]]+)\]/g)].map((m) => m[1]!);
    return callTool("click_action", { element: clickables.length > 0 ? rng.pick(clickables) : BACK_TO_SEARCH }, turn);
  },
};
