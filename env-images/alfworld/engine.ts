import {
  type AlfInstance,
  APPLIANCE,
  CLEANABLE,
  COOLABLE,
  type Goal,
  HEATABLE,
  kindOf,
  LAMPS,
  OPENABLE,
} from "./world.ts";

/**
 * The household simulator: ALFWorld's text commands over an instance's receptacles and objects,
 * with ALFWorld's wording ("You arrive at countertop 1. On the countertop 1, you see a apple 1.")
 * and "Nothing happens." for anything impossible. The agent carries at most one object.
 */

export const NOTHING_HAPPENS = "Nothing happens.";

export const HELP_TEXT = [
  "Available commands:",
  "  look, inventory, go to (receptacle), open (receptacle), close (receptacle),",
  "  take (object) from (receptacle), put (object) in/on (receptacle),",
  "  clean (object) with (receptacle), heat (object) with (receptacle), cool (object) with (receptacle),",
  "  use (lamp), examine (something), help",
].join("\n");

/** Lower-cases, trims, collapses spaces and drops a trailing period: the form actions are compared in. */
export function normalizeAction(action: string): string {
  return action.trim().toLowerCase().replace(/\s+/g, " ").replace(/\.$/, "").trim();
}

/** "a apple 1, a bread 1, and a knife 1" (ALFWorld lists everything with "a"). */
function listThings(names: readonly string[]): string {
  const items = names.map((n) => `a ${n}`);
  if (items.length === 0) return "nothing";
  if (items.length === 1) return items[0] as string;
  return `${items.slice(0, -1).join(", ")}, and ${items[items.length - 1]}`;
}

export interface StepOutcome {
  readonly observation: string;
  /** False when the action was impossible ("Nothing happens."). */
  readonly valid: boolean;
  readonly won: boolean;
}

export class AlfEngine {
  readonly receptacles: readonly string[];
  readonly goal: Goal;
  /** Object name -> receptacle name, or "agent" while carried. */
  readonly location = new Map<string, string>();
  readonly opened = new Set<string>();
  readonly cleaned = new Set<string>();
  readonly heated = new Set<string>();
  readonly cooled = new Set<string>();
  readonly lampsOn = new Set<string>();
  at: string | null = null;
  holding: string | null = null;

  constructor(instance: AlfInstance) {
    this.receptacles = instance.receptacles;
    this.goal = instance.goal;
    for (const [object, receptacle] of Object.entries(instance.placement)) this.location.set(object, receptacle);
  }

  /** "You are in the middle of a room. ... Your task is to: ..." */
  initialObservation(): string {
    return `${this.roomView()}\n\nYour task is to: ${this.goal.text}`;
  }

  isOpenable(receptacle: string): boolean {
    return OPENABLE.has(kindOf(receptacle));
  }

  /** True when the contents of `receptacle` can be seen and reached. */
  isAccessible(receptacle: string): boolean {
    return !this.isOpenable(receptacle) || this.opened.has(receptacle);
  }

  /** Objects in `receptacle`, in name order. */
  contents(receptacle: string): string[] {
    return [...this.location.entries()]
      .filter(([, where]) => where === receptacle)
      .map(([object]) => object)
      .sort();
  }

  /** Applies one action. Unknown or impossible actions change nothing and answer "Nothing happens.". */
  step(action: string): StepOutcome {
    const observation = this.apply(normalizeAction(action));
    const valid = observation !== null;
    return { observation: observation ?? NOTHING_HAPPENS, valid, won: valid && this.goalReached() };
  }

  /** Whether the goal holds in the current state. */
  goalReached(): boolean {
    const { goal } = this;
    if (goal.type === "look_at_obj_in_light") {
      const held = this.holding;
      if (held === null || kindOf(held) !== goal.object || this.at === null) return false;
      return [...this.lampsOn].some((lamp) => this.location.get(lamp) === this.at);
    }
    const needed = goal.type === "pick_two_obj" ? 2 : 1;
    return this.receptacles.some((r) => {
      if (kindOf(r) !== goal.receptacle) return false;
      return this.contents(r).filter((o) => kindOf(o) === goal.object && this.hasGoalState(o)).length >= needed;
    });
  }

  /** Whether `object` has the state the goal asks for (clean, hot, cool, or nothing). */
  hasGoalState(object: string): boolean {
    switch (this.goal.type) {
      case "pick_clean_then_place":
        return this.cleaned.has(object);
      case "pick_heat_then_place":
        return this.heated.has(object);
      case "pick_cool_then_place":
        return this.cooled.has(object);
      default:
        return true;
    }
  }

  private roomView(): string {
    return `You are in the middle of a room. Looking quickly around you, you see ${listThings(this.receptacles)}.`;
  }

  private describe(receptacle: string): string {
    const inside = listThings(this.contents(receptacle));
    if (!this.isOpenable(receptacle)) return `On the ${receptacle}, you see ${inside}.`;
    if (!this.opened.has(receptacle)) return `The ${receptacle} is closed.`;
    return `The ${receptacle} is open. In it, you see ${inside}.`;
  }

  private isReceptacle(name: string): boolean {
    return this.receptacles.includes(name);
  }

  /** The observation of a possible action, or null when it is impossible. */
  private apply(action: string): string | null {
    if (action === "look")
      return this.at === null ? this.roomView() : `You are facing the ${this.at}. ${this.describe(this.at)}`;
    if (action === "inventory")
      return this.holding ? `You are carrying: a ${this.holding}.` : "You are not carrying anything.";
    if (action === "help") return HELP_TEXT;
    let m = /^go to (.+)$/.exec(action);
    if (m) return this.goTo(m[1] as string);
    m = /^open (.+)$/.exec(action);
    if (m) return this.open(m[1] as string);
    m = /^close (.+)$/.exec(action);
    if (m) return this.close(m[1] as string);
    m = /^take (.+) from (.+)$/.exec(action);
    if (m) return this.take(m[1] as string, m[2] as string);
    m = /^(?:put|move) (.+?) (?:in\/on|in|on|into|onto|to) (.+)$/.exec(action);
    if (m) return this.put(m[1] as string, m[2] as string);
    m = /^(clean|heat|cool) (.+) with (.+)$/.exec(action);
    if (m) return this.transform(m[1] as "clean" | "heat" | "cool", m[2] as string, m[3] as string);
    m = /^(?:use|toggle) (.+)$/.exec(action);
    if (m) return this.use(m[1] as string);
    m = /^examine (.+)$/.exec(action);
    if (m) return this.examine(m[1] as string);
    return null;
  }

  private goTo(target: string): string | null {
    if (!this.isReceptacle(target) || this.at === target) return null;
    this.at = target;
    return `You arrive at ${target}. ${this.describe(target)}`;
  }

  private open(target: string): string | null {
    if (this.at !== target || !this.isOpenable(target) || this.opened.has(target)) return null;
    this.opened.add(target);
    return `You open the ${target}. ${this.describe(target)}`;
  }

  private close(target: string): string | null {
    if (this.at !== target || !this.opened.has(target)) return null;
    this.opened.delete(target);
    return `You close the ${target}.`;
  }

  private take(object: string, from: string): string | null {
    if (this.holding !== null || this.at !== from || !this.isAccessible(from)) return null;
    if (this.location.get(object) !== from || LAMPS.has(kindOf(object))) return null;
    this.location.set(object, "agent");
    this.holding = object;
    return `You pick up the ${object} from the ${from}.`;
  }

  private put(object: string, into: string): string | null {
    if (this.holding !== object || this.at !== into || !this.isAccessible(into)) return null;
    this.location.set(object, into);
    this.holding = null;
    return `You put the ${object} in/on the ${into}.`;
  }

  private transform(verb: "clean" | "heat" | "cool", object: string, using: string): string | null {
    if (this.holding !== object || this.at !== using) return null;
    const appliance = Object.values(APPLIANCE).find((a) => a.verb === verb);
    if (!appliance || kindOf(using) !== appliance.kind) return null;
    const kind = kindOf(object);
    const able = verb === "clean" ? CLEANABLE : verb === "heat" ? HEATABLE : COOLABLE;
    if (!able.has(kind)) return null;
    const states = { clean: this.cleaned, heat: this.heated, cool: this.cooled };
    states[verb].add(object);
    // Heating undoes cooling and vice versa.
    if (verb === "heat") this.cooled.delete(object);
    if (verb === "cool") this.heated.delete(object);
    return `You ${verb} the ${object} using the ${using}.`;
  }

  private use(lamp: string): string | null {
    if (!LAMPS.has(kindOf(lamp)) || this.at === null) return null;
    if (this.location.get(lamp) !== this.at || !this.isAccessible(this.at)) return null;
    if (this.lampsOn.has(lamp)) {
      this.lampsOn.delete(lamp);
      return `You turn off the ${lamp}.`;
    }
    this.lampsOn.add(lamp);
    return `You turn on the ${lamp}.`;
  }

  private examine(target: string): string | null {
    if (this.isReceptacle(target)) return this.at === target ? this.describe(target) : null;
    const where = this.location.get(target);
    const visible = where === "agent" || (where !== undefined && where === this.at && this.isAccessible(where));
    if (!visible) return null;
    if (LAMPS.has(kindOf(target))) return `The ${target} is ${this.lampsOn.has(target) ? "on" : "off"}.`;
    const states = [
      this.cleaned.has(target) ? "clean" : "",
      this.heated.has(target) ? "hot" : "",
      this.cooled.has(target) ? "cool" : "",
    ].filter(Boolean);
    return states.length > 0 ? `This is a ${states.join(", ")} ${target}.` : `There's nothing special about ${target}.`;
  }
}
