import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Match } from "aws-cdk-lib/assertions";
import { describe, expect, it } from "vitest";
import type { RoleService } from "../../infra/constructs/roleService.ts";
import { REPOSITORY_ROOT, synthAgentRl } from "./synth.ts";

describe("the GPU roles' image follows policy.backend", () => {
  it("webgpu: the trainer and both policy servers run the trainer image's WebGPU variant, on GPU capacity", () => {
    const webgpu = synthAgentRl({ config: { policy: { backend: "webgpu" } } });
    const compute = webgpu.stacks.compute;
    const image = (service: RoleService) => JSON.stringify(compute.resolve(service.container.imageName));
    expect(image(compute.policyServers.current)).toBe(image(compute.trainer));
    expect(image(compute.policyServers.stale)).toBe(image(compute.trainer));
    expect(compute.images.builds).toContainEqual({
      file: "trainer-image/Dockerfile",
      buildArgs: { TFJS_BACKEND: "webgpu" },
    });
    // Not the CUDA image a default (tensorflow/auto) config gets.
    const cuda = synthAgentRl({}).stacks.compute;
    expect(JSON.stringify(cuda.resolve(cuda.trainer.container.imageName))).not.toBe(image(compute.trainer));
    expect(cuda.images.builds).not.toContainEqual({
      file: "trainer-image/Dockerfile",
      buildArgs: { TFJS_BACKEND: "webgpu" },
    });
    // One GPU per task, as on the CUDA image.
    webgpu.templates.compute.hasResourceProperties("AWS::ECS::TaskDefinition", {
      ContainerDefinitions: Match.arrayWith([
        Match.objectLike({
          Environment: Match.arrayWith([{ Name: "AGENTRL_ROLE", Value: "trainer" }]),
          ResourceRequirements: [{ Type: "GPU", Value: "1" }],
        }),
      ]),
    });
    expect(webgpu.nag.unsuppressed).toEqual([]);
  }, 180_000);

  it("the Dockerfile's webgpu stage has the Vulkan loader, the NVIDIA ICD manifest and the graphics capability, and no CUDA", () => {
    const text = readFileSync(join(REPOSITORY_ROOT, "trainer-image/Dockerfile"), "utf8");
    const stage = /^FROM node:20-bookworm-slim AS base-webgpu\n([\s\S]*?)\n\n/m.exec(text)?.[1] ?? "";
    expect(stage).toMatch(/apt-get install -y --no-install-recommends libvulkan1\b/);
    expect(stage).toMatch(/"library_path":"libGLX_nvidia\.so\.0"/);
    expect(stage).toMatch(/> \/etc\/vulkan\/icd\.d\/nvidia_icd\.json/);
    expect(stage).toMatch(/NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics/);
    expect(stage).not.toMatch(/cuda/i);
    // Dawn keeps only this platform's binary in that variant; the others drop it.
    expect(text).toMatch(/if \[ "\$\{TFJS_BACKEND\}" = webgpu \]; then/);
  });
});
