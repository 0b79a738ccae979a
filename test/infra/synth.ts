import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { App, Aspects } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { AwsSolutionsChecks, type INagLogger } from "cdk-nag";
import { type AgentRlStacks, buildAgentRlApp } from "../../infra/agentRlApp.ts";
import { parseConfig } from "../../shared/config/index.ts";
import type { SweepSpec } from "../../shared/config/sweep.ts";
import { tempDir } from "../support/tmp.ts";

export const REPOSITORY_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** The feature flags of cdk.json, so tests synthesize exactly what `cdk synth` does. */
export function cdkJsonContext(): Record<string, unknown> {
  const cdkJson = JSON.parse(readFileSync(join(REPOSITORY_ROOT, "cdk.json"), "utf8")) as {
    context?: Record<string, unknown>;
  };
  return cdkJson.context ?? {};
}

/** A fresh App with cdk.json's flags, writing into a temp dir; asset staging skipped (fingerprints only). */
export function testApp(): App {
  return new App({
    // Removed after the test file: each synth writes megabytes.
    outdir: tempDir("agentrl-cdk-"),
    context: { ...cdkJsonContext(), "aws:cdk:disable-asset-staging": true },
  });
}

/** A finding cdk-nag reported without a suppression (or a rule that could not run). */
export interface NagFinding {
  readonly rule: string;
  readonly path: string;
}

/** Collects cdk-nag results during synth (no second synth, unlike reading annotations back). */
export class CollectingNagLogger implements INagLogger {
  readonly unsuppressed: NagFinding[] = [];
  readonly suppressed: Array<NagFinding & { reason: string }> = [];
  onCompliance(): void {}
  onNotApplicable(): void {}
  onNonCompliance(data: { findingId: string; ruleId: string; resource: { node: { path: string } } }): void {
    this.unsuppressed.push({ rule: `${data.ruleId}[${data.findingId}]`, path: data.resource.node.path });
  }
  onSuppressed(data: {
    findingId: string;
    ruleId: string;
    resource: { node: { path: string } };
    suppressionReason: string;
  }): void {
    this.suppressed.push({
      rule: `${data.ruleId}[${data.findingId}]`,
      path: data.resource.node.path,
      reason: data.suppressionReason,
    });
  }
  onError(data: { ruleId: string; errorMessage: string; resource: { node: { path: string } } }): void {
    this.unsuppressed.push({
      rule: `${data.ruleId} (rule error: ${data.errorMessage})`,
      path: data.resource.node.path,
    });
  }
  onSuppressedError(): void {}
}

/** The whole app, synthesized in-process with cdk-nag attached (as infra/app.ts does). */
export function synthAgentRl(options: { config?: unknown; sweeps?: SweepSpec[] } = {}): {
  app: App;
  nag: CollectingNagLogger;
  stacks: AgentRlStacks;
  templates: Record<"stores" | "messaging" | "compute", Template> & { sweeps?: Template };
} {
  const app = testApp();
  const stacks = buildAgentRlApp(app, {
    config: parseConfig(options.config ?? {}),
    repositoryRoot: REPOSITORY_ROOT,
    ...(options.sweeps ? { sweeps: options.sweeps } : {}),
  });
  const nag = new CollectingNagLogger();
  Aspects.of(app).add(new AwsSolutionsChecks({ verbose: true, additionalLoggers: [nag] }));
  app.synth();
  return {
    app,
    nag,
    stacks,
    templates: {
      stores: Template.fromStack(stacks.stores),
      messaging: Template.fromStack(stacks.messaging),
      compute: Template.fromStack(stacks.compute),
      ...(stacks.sweeps ? { sweeps: Template.fromStack(stacks.sweeps) } : {}),
    },
  };
}
