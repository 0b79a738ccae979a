import { describe, expect, it } from "vitest";
import { AGENTBENCH_OS_IMAGES, osImagesFrom } from "../../shared/agentbench/osImages.ts";

/** The OS episode images: the local stand-ins unless the deployment names its own (ECS does). */
describe("osImagesFrom", () => {
  it("keeps the stand-ins when nothing is set, or only blanks", () => {
    expect(osImagesFrom({})).toEqual(AGENTBENCH_OS_IMAGES);
    expect(osImagesFrom({ AGENTRL_OS_IMAGE_DEFAULT: "  " })).toEqual(AGENTBENCH_OS_IMAGES);
  });

  it("takes each subtype's image from its own variable", () => {
    const ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:abc";
    expect(osImagesFrom({ AGENTRL_OS_IMAGE_PACKAGES: ecr })).toEqual({
      default: AGENTBENCH_OS_IMAGES.default,
      packages: ecr,
    });
  });
});
