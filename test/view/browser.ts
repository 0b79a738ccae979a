import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import puppeteer, { type Browser } from "puppeteer-core";

/** Screenshots and figures the browser tests leave behind (git-ignored). */
export const ARTIFACTS = fileURLToPath(new URL("../../test-artifacts/view", import.meta.url));

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it), or CHROMIUM_PATH. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Headless Chromium; fails with the install command when the browser is missing (never downloads one). */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}
