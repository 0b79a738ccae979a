#!/usr/bin/env node
// Package entry: runs the CLI from its cached bundle (bin/cliBundle.mjs: role processes start in
// half the time), or from the TypeScript sources through tsx where no bundle can be made or
// AGENTRL_BUNDLE=0 asks for the sources (source-level stack traces, a debugger).
import { cliBundle } from "./cliBundle.mjs";

const bundle = await cliBundle();
if (bundle) {
  // stack traces name the sources' lines, not the bundle's
  process.setSourceMapsEnabled(true);
  await import(bundle);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../cli/main.ts");
}
