import { describe } from "vitest";
import { registerTransportConformance } from "./conformance.ts";
import { registerCrashSafety } from "./crash.ts";
import { localTarget } from "./target.ts";

const target = localTarget();

describe("local transport conformance", () => {
  registerTransportConformance(() => target);
  registerCrashSafety(() => target, { objectBytes: 4 * 1024 * 1024 });
});
