import { z } from "zod";
import type { Episode, StepResult, TaskDefinition, ToolDefinition } from "../../shared/env/task.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { generateWebShopInstance, WEBSHOP_SPLITS } from "./catalog.ts";
import { WebShopSite } from "./site.ts";

/**
 * The WebShop task (AgentBench webshop, function-call form): search a generated catalogue,
 * open items, choose options and buy. Buying ends the episode with WebShop's reward in [0, 1]
 * (attributes, options, price, times the type match); `success` is a perfect 1.
 */

/** AgentBench WebShop turn limit. */
export const WEBSHOP_MAX_TURNS = 20;

/** Arguments of search_action. */
export const SearchArgs = z.object({
  keywords: z.string().min(1).max(200).describe("Search keywords, e.g. 'lightweight running shoes'."),
});
/** Arguments of click_action. */
export const ClickArgs = z.object({
  element: z
    .string()
    .min(1)
    .max(200)
    .describe("The text of a clickable element shown in brackets, e.g. 'Buy Now', 'Next >' or a product id."),
});

const TOOLS: readonly ToolDefinition[] = [
  {
    name: "search_action",
    description: "Searches the shop for the keywords (only on the search page) and shows the first page of results.",
    parameters: SearchArgs,
  },
  {
    name: "click_action",
    description:
      "Clicks an element of the current page: a product id, an option value, a navigation button or Buy Now.",
    parameters: ClickArgs,
  },
];

const SYSTEM_PROMPT =
  "You are shopping in a web shop for the user. Use search_action on the search page, then click_action on the elements " +
  "shown in [brackets]: products, option values, [Next >], [< Prev], [Back to Search], [Description], [Features] and " +
  "[Buy Now]. Choose every option the instruction asks for before clicking [Buy Now]; buying ends the task. At most 20 turns.";

class WebShopEpisode implements Episode {
  readonly messages: ChatMessage[];

  constructor(private readonly site: WebShopSite) {
    this.messages = [
      { role: "system", content: SYSTEM_PROMPT },
      { role: "user", content: site.render() },
    ];
  }

  async call(tool: string, args: unknown): Promise<StepResult> {
    const outcome =
      tool === "search_action"
        ? this.site.searchAction(SearchArgs.parse(args).keywords)
        : this.site.clickAction(ClickArgs.parse(args).element);
    if (outcome.kind !== "bought") return { observation: outcome.observation };
    const { reward, attributeMatches, optionMatches, priceMatch, rType } = outcome.reward;
    return {
      observation: outcome.observation,
      reward: {
        reward,
        score: reward,
        metrics: {
          success: reward === 1 ? 1 : 0,
          r_type: rType,
          attribute_matches: attributeMatches,
          option_matches: optionMatches,
          price_match: priceMatch ? 1 : 0,
        },
      },
      finish: "completed",
    };
  }
}

/** Builds the WebShop task definition. */
export function createWebShopTask(): TaskDefinition {
  return {
    name: "webshop",
    tools: TOOLS,
    maxTurns: WEBSHOP_MAX_TURNS,
    splits: WEBSHOP_SPLITS,
    async start(index: number): Promise<Episode> {
      return new WebShopEpisode(new WebShopSite(generateWebShopInstance(index)));
    },
  };
}
