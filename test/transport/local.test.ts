import { describe } from "vitest";
import { registerTransportConformance } from "./conformance.ts";
import { localTarget } from "./target.ts";

const target = localTarget();

describe("local transport conformance", () => {
  registerTransportConformance(() => target);
});
