#!/usr/bin/env node
// Package entry: registers the TypeScript loader, then hands over to the CLI.
import { register } from "tsx/esm/api";

register();
await import("../cli/main.ts");
