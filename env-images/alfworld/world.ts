import { type Rng, rngFor } from "../common/rng.ts";

/**
 * Seeded generator of ALFWorld-style households: a room (kitchen, bathroom, bedroom or living
 * room) with numbered receptacles ("cabinet 2"), objects on or in them ("apple 1"), and a goal of
 * one of ALFWorld's six task types. Rooms are kept small (5-11 receptacles) so that an episode's
 * text fits a ~2k-token context.
 */

export const TASK_TYPES = [
  "pick_and_place",
  "pick_clean_then_place",
  "pick_heat_then_place",
  "pick_cool_then_place",
  "look_at_obj_in_light",
  "pick_two_obj",
] as const;
export type TaskType = (typeof TASK_TYPES)[number];

export const ALFWORLD_TASK_NAME = "alfworld";
/** Disjoint index ranges: train [0, 10000), test [10000, 10500). */
export const ALFWORLD_SPLITS = { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_500 } } as const;

type Scene = "kitchen" | "bathroom" | "bedroom" | "livingroom";

/** Receptacle kinds that open and close (contents hidden while closed). */
export const OPENABLE = new Set(["cabinet", "drawer", "fridge", "microwave", "safe"]);
/** The appliance each transforming task uses. */
export const APPLIANCE: Partial<Record<TaskType, { kind: string; verb: "clean" | "heat" | "cool" }>> = {
  pick_clean_then_place: { kind: "sinkbasin", verb: "clean" },
  pick_heat_then_place: { kind: "microwave", verb: "heat" },
  pick_cool_then_place: { kind: "fridge", verb: "cool" },
};

export const CLEANABLE = new Set([
  "apple",
  "bowl",
  "butterknife",
  "cloth",
  "cup",
  "dishsponge",
  "egg",
  "fork",
  "kettle",
  "knife",
  "ladle",
  "lettuce",
  "mug",
  "pan",
  "plate",
  "pot",
  "potato",
  "soapbar",
  "spatula",
  "spoon",
  "tomato",
]);
export const HEATABLE = new Set(["apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"]);
export const COOLABLE = new Set([
  "apple",
  "bowl",
  "bread",
  "cup",
  "egg",
  "lettuce",
  "mug",
  "pan",
  "plate",
  "pot",
  "potato",
  "tomato",
  "winebottle",
]);
/** Objects that cannot be picked up (lamps are used in place). */
export const LAMPS = new Set(["desklamp"]);

interface SceneSpec {
  /** [kind, min count, max count]; kinds with min >= 1 are always present. */
  readonly receptacles: ReadonlyArray<readonly [string, number, number]>;
  readonly objects: readonly string[];
  /** Objects worth examining under a lamp (only scenes with a lamp). */
  readonly examinable?: readonly string[];
  /** Receptacle kinds a lamp may stand on. */
  readonly lampStands?: readonly string[];
}

const SCENES: Record<Scene, SceneSpec> = {
  kitchen: {
    receptacles: [
      ["countertop", 1, 2],
      ["fridge", 1, 1],
      ["microwave", 1, 1],
      ["sinkbasin", 1, 1],
      ["cabinet", 1, 4],
      ["drawer", 0, 3],
      ["stoveburner", 0, 2],
      ["diningtable", 0, 1],
      ["garbagecan", 0, 1],
      ["shelf", 0, 2],
      ["coffeemachine", 0, 1],
      ["toaster", 0, 1],
    ],
    objects: [
      "apple",
      "bread",
      "egg",
      "lettuce",
      "potato",
      "tomato",
      "mug",
      "cup",
      "plate",
      "bowl",
      "pan",
      "pot",
      "knife",
      "fork",
      "spoon",
      "spatula",
      "ladle",
      "saltshaker",
      "peppershaker",
      "soapbottle",
      "dishsponge",
      "winebottle",
      "kettle",
      "butterknife",
    ],
  },
  bathroom: {
    receptacles: [
      ["sinkbasin", 1, 2],
      ["toilet", 1, 1],
      ["countertop", 1, 1],
      ["cabinet", 1, 4],
      ["drawer", 0, 2],
      ["bathtubbasin", 0, 1],
      ["towelholder", 0, 1],
      ["garbagecan", 0, 1],
      ["shelf", 0, 2],
      ["toiletpaperhanger", 0, 1],
    ],
    objects: [
      "soapbar",
      "soapbottle",
      "spraybottle",
      "toiletpaper",
      "candle",
      "cloth",
      "dishsponge",
      "tissuebox",
      "scrubbrush",
      "handtowel",
    ],
  },
  bedroom: {
    receptacles: [
      ["bed", 1, 1],
      ["desk", 1, 1],
      ["drawer", 1, 4],
      ["dresser", 0, 1],
      ["shelf", 0, 3],
      ["sidetable", 0, 1],
      ["garbagecan", 0, 1],
      ["laundryhamper", 0, 1],
      ["safe", 0, 1],
    ],
    objects: [
      "book",
      "cellphone",
      "creditcard",
      "keychain",
      "pen",
      "pencil",
      "alarmclock",
      "cd",
      "laptop",
      "pillow",
      "mug",
      "bowl",
      "remotecontrol",
      "watch",
    ],
    examinable: [
      "book",
      "cellphone",
      "creditcard",
      "keychain",
      "pen",
      "pencil",
      "alarmclock",
      "cd",
      "mug",
      "bowl",
      "watch",
    ],
    lampStands: ["desk", "sidetable", "dresser"],
  },
  livingroom: {
    receptacles: [
      ["sofa", 1, 1],
      ["coffeetable", 1, 1],
      ["sidetable", 1, 2],
      ["armchair", 0, 1],
      ["tvstand", 0, 1],
      ["drawer", 0, 3],
      ["cabinet", 0, 2],
      ["shelf", 0, 2],
      ["dresser", 0, 1],
      ["garbagecan", 0, 1],
      ["diningtable", 0, 1],
    ],
    objects: [
      "remotecontrol",
      "keychain",
      "creditcard",
      "newspaper",
      "pillow",
      "laptop",
      "box",
      "statue",
      "vase",
      "watch",
      "book",
      "cellphone",
      "plate",
      "tissuebox",
    ],
    examinable: [
      "remotecontrol",
      "keychain",
      "creditcard",
      "newspaper",
      "box",
      "statue",
      "vase",
      "watch",
      "book",
      "cellphone",
      "plate",
    ],
    lampStands: ["sidetable", "dresser", "coffeetable"],
  },
};

/** Receptacle kinds that never serve as a goal's destination or an object's starting place. */
const NOT_DESTINATIONS = new Set([
  "sinkbasin",
  "microwave",
  "stoveburner",
  "toaster",
  "coffeemachine",
  "bathtubbasin",
  "towelholder",
  "toiletpaperhanger",
]);
const NOT_STARTS = new Set(["stoveburner", "toaster", "coffeemachine"]);

export interface Goal {
  readonly type: TaskType;
  /** Object kind the goal is about ("apple"). */
  readonly object: string;
  /** Destination receptacle kind; absent for look_at_obj_in_light. */
  readonly receptacle?: string;
  /** The lamp to examine under; only for look_at_obj_in_light. */
  readonly lamp?: string;
  /** "put a clean apple in fridge." */
  readonly text: string;
}

/** An instance: receptacles in listing order, where every object starts, and the goal. */
export interface AlfInstance {
  readonly index: number;
  readonly scene: Scene;
  readonly receptacles: readonly string[];
  /** Object name -> receptacle name it starts in. */
  readonly placement: Readonly<Record<string, string>>;
  readonly goal: Goal;
}

/** "apple 1" -> "apple". */
export function kindOf(name: string): string {
  return name.replace(/ \d+$/, "");
}

function goalText(rng: Rng, type: TaskType, object: string, receptacle: string | undefined): string {
  const r = receptacle ?? "";
  const templates: Record<TaskType, readonly string[]> = {
    pick_and_place: [`put a ${object} in ${r}.`, `put some ${object} on ${r}.`],
    pick_clean_then_place: [`put a clean ${object} in ${r}.`, `clean some ${object} and put it in ${r}.`],
    pick_heat_then_place: [`put a hot ${object} in ${r}.`, `heat some ${object} and put it in ${r}.`],
    pick_cool_then_place: [`put a cool ${object} in ${r}.`, `cool some ${object} and put it in ${r}.`],
    look_at_obj_in_light: [`look at ${object} under the desklamp.`, `examine the ${object} with the desklamp.`],
    pick_two_obj: [`put two ${object} in ${r}.`, `find two ${object} and put them in ${r}.`],
  };
  return rng.pick(templates[type]);
}

function scenesFor(type: TaskType): Scene[] {
  switch (type) {
    case "pick_clean_then_place":
      return ["kitchen", "bathroom"];
    case "pick_heat_then_place":
    case "pick_cool_then_place":
      return ["kitchen"];
    case "look_at_obj_in_light":
      return ["bedroom", "livingroom"];
    default:
      return ["kitchen", "bathroom", "bedroom", "livingroom"];
  }
}

function goalObjects(spec: SceneSpec, type: TaskType): readonly string[] {
  switch (type) {
    case "pick_clean_then_place":
      return spec.objects.filter((o) => CLEANABLE.has(o));
    case "pick_heat_then_place":
      return spec.objects.filter((o) => HEATABLE.has(o));
    case "pick_cool_then_place":
      return spec.objects.filter((o) => COOLABLE.has(o));
    case "look_at_obj_in_light":
      return spec.examinable ?? [];
    default:
      return spec.objects;
  }
}

function buildReceptacles(rng: Rng, spec: SceneSpec, needsLamp: boolean): string[] {
  const counts = new Map<string, number>();
  for (const [kind, min, max] of spec.receptacles) counts.set(kind, rng.int(min, max));
  if (needsLamp && !(spec.lampStands ?? []).some((k) => (counts.get(k) ?? 0) > 0)) {
    counts.set(rng.pick(spec.lampStands ?? []), 1);
  }
  // Keep rooms small: drop optional receptacles (never a required kind's last one) down to a budget.
  const budget = rng.int(5, 11);
  const required = new Set(spec.receptacles.filter(([, min]) => min >= 1).map(([kind]) => kind));
  let total = [...counts.values()].reduce((a, b) => a + b, 0);
  for (const kind of rng.shuffle([...counts.keys()])) {
    while (total > budget && (counts.get(kind) ?? 0) > (required.has(kind) ? 1 : 0)) {
      if (needsLamp && (spec.lampStands ?? []).includes(kind) && counts.get(kind) === 1) break;
      counts.set(kind, (counts.get(kind) ?? 0) - 1);
      total--;
    }
  }
  const names: string[] = [];
  for (const [kind] of spec.receptacles) for (let n = 1; n <= (counts.get(kind) ?? 0); n++) names.push(`${kind} ${n}`);
  return names.sort();
}

/** True when `index` belongs to the train or test split. */
export function isAlfIndex(index: number): boolean {
  return Number.isSafeInteger(index) && index >= ALFWORLD_SPLITS.train.start && index < ALFWORLD_SPLITS.test.end;
}

/** Builds instance `index` (deterministic). Throws a RangeError outside the splits. */
export function generateAlfInstance(index: number): AlfInstance {
  if (!isAlfIndex(index)) {
    throw new RangeError(
      `alfworld index ${index} is outside the task's indices [${ALFWORLD_SPLITS.train.start}, ${ALFWORLD_SPLITS.test.end})`,
    );
  }
  const rng = rngFor(ALFWORLD_TASK_NAME, index, "instance");
  const type = rng.pick(TASK_TYPES);
  const scene = rng.pick(scenesFor(type));
  const spec = SCENES[scene];
  const lookTask = type === "look_at_obj_in_light";
  const receptacles = buildReceptacles(rng, spec, lookTask);
  const object = rng.pick(goalObjects(spec, type));
  const appliance = APPLIANCE[type]?.kind;

  let destination: string | undefined;
  if (!lookTask) {
    const kinds = [...new Set(receptacles.map(kindOf))].filter((k) => !NOT_DESTINATIONS.has(k) && k !== appliance);
    destination = rng.pick(kinds);
  }

  const placement: Record<string, string> = {};
  const starts = receptacles.filter((r) => !NOT_STARTS.has(kindOf(r)) && kindOf(r) !== destination);
  const goalCount = type === "pick_two_obj" ? rng.int(2, 3) : rng.int(1, 2);
  for (let n = 1; n <= goalCount; n++) placement[`${object} ${n}`] = rng.pick(starts);

  let lamp: string | undefined;
  if (lookTask) {
    lamp = "desklamp 1";
    const stands = receptacles.filter((r) => (spec.lampStands ?? []).includes(kindOf(r)));
    placement[lamp] = rng.pick(stands);
  }

  const others = spec.objects.filter((o) => o !== object);
  const anywhere = receptacles.filter((r) => !NOT_STARTS.has(kindOf(r)));
  for (const kind of rng.sample(others, rng.int(2, 6))) {
    const copies = rng.chance(0.25) ? 2 : 1;
    for (let n = 1; n <= copies; n++) placement[`${kind} ${n}`] = rng.pick(anywhere);
  }

  const goal: Goal = {
    type,
    object,
    ...(destination === undefined ? {} : { receptacle: destination }),
    ...(lamp === undefined ? {} : { lamp }),
    text: goalText(rng, type, object, destination),
  };
  return { index, scene, receptacles, placement, goal };
}
