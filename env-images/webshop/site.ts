import type { Product, WebShopInstance } from "./catalog.ts";
import { purchaseReward, type RewardBreakdown } from "./reward.ts";

/**
 * The shop as an agent browses it, WebShop's text mode in miniature: a search page, result pages
 * of RESULTS_PER_PAGE items, item pages with option buttons, Description and Features sub-pages,
 * and Buy Now. Clickable elements are written in brackets; `click` takes the text inside.
 */

/** Results per page, few so that pages stay short. */
export const RESULTS_PER_PAGE = 5;
/** Results beyond this many are not shown (WebShop keeps the top 50; our catalogues are small). */
const MAX_RESULTS = 25;

/** Names of the navigation buttons, as shown inside brackets. */
export const BACK_TO_SEARCH = "Back to Search";
export const NEXT_PAGE = "Next >";
export const PREV_PAGE = "< Prev";
export const DESCRIPTION = "Description";
export const FEATURES = "Features";
export const BUY_NOW = "Buy Now";

type Page =
  | { readonly kind: "search" }
  | { readonly kind: "results"; readonly keywords: string; readonly results: readonly Product[]; readonly page: number }
  | { readonly kind: "item"; readonly product: Product; readonly from: Page; readonly selected: Record<string, string> }
  | { readonly kind: "detail"; readonly what: "Description" | "Features"; readonly item: Page & { kind: "item" } };

/** What an action did: a new page, an error (page unchanged) or a purchase. */
export type ActionOutcome =
  | { readonly kind: "page"; readonly observation: string }
  | { readonly kind: "error"; readonly observation: string }
  | { readonly kind: "bought"; readonly observation: string; readonly reward: RewardBreakdown; readonly asin: string };

function tokens(text: string): string[] {
  return text.toLowerCase().match(/[a-z0-9]+/g) ?? [];
}

function normalizeElement(text: string): string {
  return text
    .trim()
    .replace(/^\[(.*)\]$/, "$1")
    .trim()
    .toLowerCase();
}

/** One shopper's browsing state over an instance's catalogue. */
export class WebShopSite {
  private page: Page = { kind: "search" };
  /** Document frequency of each word, for idf-weighted search. */
  private readonly df = new Map<string, number>();
  private readonly docs: ReadonlyMap<string, ReadonlySet<string>>;

  constructor(private readonly instance: WebShopInstance) {
    const docs = new Map<string, Set<string>>();
    for (const product of instance.products) {
      const words = new Set(tokens(`${product.title} ${product.attributes.join(" ")} ${product.category}`));
      docs.set(product.asin, words);
      for (const word of words) this.df.set(word, (this.df.get(word) ?? 0) + 1);
    }
    this.docs = docs;
  }

  /** Ranked products for `keywords`: idf-weighted count of matching words, ties by ASIN. */
  search(keywords: string): Product[] {
    const query = [...new Set(tokens(keywords))];
    const n = this.instance.products.length;
    const scored = this.instance.products.map((product) => {
      const words = this.docs.get(product.asin)!;
      const score = query.reduce((sum, w) => (words.has(w) ? sum + Math.log(1 + n / (this.df.get(w) ?? 1)) : sum), 0);
      return { product, score };
    });
    return scored
      .filter((s) => s.score > 0)
      .sort((a, b) => b.score - a.score || a.product.asin.localeCompare(b.product.asin))
      .slice(0, MAX_RESULTS)
      .map((s) => s.product);
  }

  /** Text of the current page. */
  render(): string {
    const page = this.page;
    switch (page.kind) {
      case "search":
        return `Instruction: ${this.instance.goal.instruction}\n[Search]`;
      case "results": {
        const pages = Math.max(1, Math.ceil(page.results.length / RESULTS_PER_PAGE));
        const shown = page.results.slice((page.page - 1) * RESULTS_PER_PAGE, page.page * RESULTS_PER_PAGE);
        const nav = [`[${BACK_TO_SEARCH}]`];
        if (page.page > 1) nav.push(`[${PREV_PAGE}]`);
        if (page.page < pages) nav.push(`[${NEXT_PAGE}]`);
        const lines = [
          `Page ${page.page} of ${pages} (${page.results.length} results for "${page.keywords}")`,
          nav.join(" "),
          ...shown.map((p) => `[${p.asin}] ${p.title} $${p.price.toFixed(2)}`),
        ];
        if (shown.length === 0) lines.push("No products match these keywords.");
        return lines.join("\n");
      }
      case "item": {
        const { product, selected } = page;
        const lines = [`[${BACK_TO_SEARCH}] [${PREV_PAGE}]`, product.title, `Price: $${product.price.toFixed(2)}`];
        for (const [name, values] of Object.entries(product.options)) {
          lines.push(`${name}: ${values.map((v) => `[${v}]`).join(" ")}`);
        }
        const chosen = Object.entries(selected);
        if (chosen.length > 0) lines.push(`Selected: ${chosen.map(([n, v]) => `${n}: ${v}`).join("; ")}`);
        lines.push(`[${DESCRIPTION}] [${FEATURES}] [${BUY_NOW}]`);
        return lines.join("\n");
      }
      case "detail": {
        const product = page.item.product;
        const body = page.what === "Features" ? product.attributes.join("; ") : product.description;
        return `[${BACK_TO_SEARCH}] [${PREV_PAGE}]\n${page.what}: ${body}`;
      }
    }
  }

  /** Clickable elements of the current page (without brackets). */
  clickables(): string[] {
    return [...this.render().matchAll(/\[([^\]]+)\]/g)].map((m) => m[1]!).filter((c) => c !== "Search");
  }

  searchAction(keywords: string): ActionOutcome {
    if (this.page.kind !== "search") {
      return {
        kind: "error",
        observation: `Error: there is no search bar on this page; click [${BACK_TO_SEARCH}] first.\n${this.render()}`,
      };
    }
    this.page = { kind: "results", keywords: keywords.trim(), results: this.search(keywords), page: 1 };
    return { kind: "page", observation: this.render() };
  }

  clickAction(element: string): ActionOutcome {
    const target = normalizeElement(element);
    const page = this.page;
    const match = this.clickables().find((c) => c.toLowerCase() === target);
    if (!match) {
      const available = this.clickables().map((c) => `[${c}]`);
      const hint = page.kind === "search" ? " Use search_action on the search page." : "";
      return {
        kind: "error",
        observation: `Error: "${element}" is not a clickable element on this page. Clickable: ${available.join(", ") || "none"}.${hint}`,
      };
    }
    if (match === BACK_TO_SEARCH) this.page = { kind: "search" };
    else if (page.kind === "results") {
      if (match === NEXT_PAGE) this.page = { ...page, page: page.page + 1 };
      else if (match === PREV_PAGE) this.page = { ...page, page: page.page - 1 };
      else {
        const product = page.results.find((p) => p.asin === match)!;
        this.page = { kind: "item", product, from: page, selected: {} };
      }
    } else if (page.kind === "item") {
      if (match === PREV_PAGE) this.page = page.from;
      else if (match === DESCRIPTION || match === FEATURES) this.page = { kind: "detail", what: match, item: page };
      else if (match === BUY_NOW) {
        const reward = purchaseReward(page.product, page.selected, this.instance.goal);
        return {
          kind: "bought",
          asin: page.product.asin,
          reward,
          observation: `Thank you for shopping with us! You bought ${page.product.title}. Your score (min 0.0, max 1.0): ${reward.reward.toFixed(2)}`,
        };
      } else {
        const option = Object.entries(page.product.options).find(([, values]) => values.includes(match));
        if (option) this.page = { ...page, selected: { ...page.selected, [option[0]]: match } };
      }
    } else if (page.kind === "detail" && match === PREV_PAGE) this.page = page.item;
    return { kind: "page", observation: this.render() };
  }
}
