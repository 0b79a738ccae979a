import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { App, Aspects } from "aws-cdk-lib";
import { AwsSolutionsChecks } from "cdk-nag";
import { loadConfig } from "../shared/config/index.ts";
import { loadSweepSpec } from "../shared/config/sweep.ts";
import { buildAgentRlApp } from "./agentRlApp.ts";

/**
 * `cdk synth|deploy` entry (cdk.json: `npx tsx infra/app.ts`). Context parameters:
 *   -c config=experiment.yaml      experiment the services run (default: all defaults)
 *   -c gpuInstanceType=g5.2xlarge  default of the GpuInstanceType stack parameter
 *   -c sweeps=a.yaml,b.yaml        sweep specs to schedule (adds the AgentRlSweeps stack)
 *   -c natGateways=2               NAT gateways of the VPC
 * cdk-nag's AwsSolutions checks run on every synth; an unsuppressed finding fails it.
 */
const repositoryRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const app = new App();
const context = (key: string): string | undefined => {
  const value: unknown = app.node.tryGetContext(key);
  return typeof value === "string" && value.length > 0 ? value : undefined;
};
const configFile = context("config");
const config = await loadConfig(configFile);
const sweepFiles = (context("sweeps") ?? "").split(",").filter((file) => file.length > 0);
const sweeps = await Promise.all(sweepFiles.map((file) => loadSweepSpec(file)));
const natGateways = context("natGateways");
const gpuInstanceType = context("gpuInstanceType");

buildAgentRlApp(app, {
  config,
  repositoryRoot,
  sweeps,
  ...(gpuInstanceType ? { gpuInstanceType } : {}),
  ...(natGateways ? { natGateways: Number(natGateways) } : {}),
  ...(process.env.CDK_DEFAULT_ACCOUNT
    ? { env: { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION } }
    : {}),
});
Aspects.of(app).add(new AwsSolutionsChecks({ verbose: true }));
app.synth();
