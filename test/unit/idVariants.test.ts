import { describe, expect, it } from "vitest";
import { webshopExpert } from "../../env-images/webshop/agents.ts";
import { createWebShopTask } from "../../env-images/webshop/task.ts";
import { runScripted } from "../../shared/env/session.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import {
  copiedIdentifiers,
  identifierSpans,
  identifierVariant,
  sharedPrefix,
} from "../../trainer-image/sft/id-variants.ts";
import { messagesText } from "../support/messages.ts";

const click = (element: string, id = "call_0") => ({
  id,
  type: "function" as const,
  function: { name: "click_action", arguments: JSON.stringify({ element }) },
});

/** A webshop-like episode: a results page, a click on its second product, the product's page, Buy Now. */
function episode(): ChatMessage[] {
  return [
    { role: "system", content: "Click ids like [B0AAAA1111] to open a product." },
    { role: "user", content: "Instruction: find me a red mug 12oz2024 under $20\n[Search]" },
    { role: "assistant", content: null, tool_calls: [click("red mug")] },
    {
      role: "tool",
      tool_call_id: "call_0",
      content: "Page 1 of 1\n[B0X7K2M9QP] Blue Mug $9.00\n[B0ZZ81Q4TR] Red Mug $12.00\n[Back to Search]",
    },
    { role: "assistant", content: "The red one: B0ZZ81Q4TR.", tool_calls: [click("B0ZZ81Q4TR", "call_1")] },
    { role: "tool", tool_call_id: "call_1", content: "Red Mug (B0ZZ81Q4TR)\nPrice: $12.00\n[Buy Now]" },
    { role: "assistant", content: null, tool_calls: [click("Buy Now", "call_2")] },
  ];
}

describe("identifier-redrawn variants", () => {
  it("finds the identifiers the actions copy from an earlier message, and only those", () => {
    // B0X7K2M9QP is shown but never clicked; `12oz2024` is in the request but in no action; the
    // system prompt's example id does not count as a page.
    expect(copiedIdentifiers(episode())).toEqual(["B0ZZ81Q4TR"]);
    const unseen = episode();
    unseen[3] = { role: "tool", tool_call_id: "call_0", content: "Page 1 of 1\n[Back to Search]" };
    expect(copiedIdentifiers(unseen)).toEqual([]);
  });

  it("takes the prefix all identifiers share", () => {
    expect(sharedPrefix(["B0X7K2M9QP", "B0ZZ81Q4TR", "B0X1"])).toBe("B0");
    expect(sharedPrefix(["abc123", "xyz789"])).toBe("");
    expect(sharedPrefix([])).toBe("");
  });

  it("redraws each copied identifier everywhere but the system prompt, keeping prefix and character kinds", () => {
    const original = episode();
    const variant = identifierVariant(original, "B0", seededRandom(7));
    expect(variant).toBeDefined();
    const fresh = copiedIdentifiers(variant ?? []);
    expect(fresh).toHaveLength(1);
    const id = fresh[0] as string;
    expect(id).not.toBe("B0ZZ81Q4TR");
    expect(id).toMatch(/^B0[A-Z]{2}[0-9]{2}[A-Z][0-9][A-Z]{2}$/);
    const after = messagesText(variant ?? []);
    // page, reasoning, action and product page all name the fresh id; the old one is gone
    expect(after.split(id).length - 1).toBe(4);
    expect(after).not.toContain("B0ZZ81Q4TR");
    // nothing else changed: the unclicked id, the request's token, the system prompt
    expect(after.replace(new RegExp(id, "g"), "B0ZZ81Q4TR")).toBe(messagesText(original));
    expect(variant?.[0]).toBe(original[0]);
  });

  it("is reproducible from its random source, and absent when nothing is copied", () => {
    const a = identifierVariant(episode(), "B0", seededRandom(3));
    const b = identifierVariant(episode(), "B0", seededRandom(3));
    const c = identifierVariant(episode(), "B0", seededRandom(4));
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
    expect(identifierVariant(episode().slice(0, 4), "B0", seededRandom(3))).toBeUndefined();
  });

  it("ignores a prefix an identifier does not start with", () => {
    const variant = identifierVariant(episode(), "XY", seededRandom(5));
    const id = copiedIdentifiers(variant ?? [])[0] ?? "";
    expect(id).toMatch(/^[A-Z][0-9][A-Z]{2}[0-9]{2}[A-Z][0-9][A-Z]{2}$/);
  });

  it("finds the spans of assistant tokens that spell an identifier, either spelling, once each", () => {
    const tokens = [5, 1, 2, 3, 9, 7, 1, 2, 3, 4, 1, 2, 3];
    const mask = [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1];
    // [1, 2, 3] at 1 lies outside the assistant's tokens; [9, 7] and [1, 2, 3] are two spellings
    expect(
      identifierSpans(tokens, mask, [
        [1, 2, 3],
        [9, 7],
      ]),
    ).toEqual([
      [4, 6],
      [6, 9],
      [10, 13],
    ]);
    expect(identifierSpans(tokens, mask, [[]])).toEqual([]);
  });

  it("redraws the product ids of a real webshop expert episode, pages and clicks alike", async () => {
    const run = await runScripted(createWebShopTask(), 17, webshopExpert);
    expect(run.reward).toBe(1);
    const original = run.messages;
    const clicked = copiedIdentifiers(original);
    expect(clicked.length).toBeGreaterThan(0);
    expect(clicked.every((id) => id.startsWith("B0"))).toBe(true);
    const variant = identifierVariant(original, "B0", seededRandom(1)) ?? [];
    const fresh = copiedIdentifiers(variant);
    expect(fresh).toHaveLength(clicked.length);
    for (const id of clicked) expect(messagesText(variant)).not.toContain(id);
    for (const id of fresh) expect(messagesText(original)).not.toContain(id);
  });
});
