import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { commandText, PersistentShell, SentinelReader, type ShellProcess } from "../../env-images/osbench/shell.ts";

/**
 * The shell protocol without a container: the sentinel reader on crafted streams, and a local
 * bash driven exactly as the container's is (the container tests add isolation and limits).
 */
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const enc = (s: string) => new TextEncoder().encode(s);

function localBash(): ShellProcess {
  const child = spawn("bash", [], { stdio: ["pipe", "pipe", "pipe"] });
  child.stdin.write("exec 2>&1\n");
  return {
    write: (t) => child.stdin.write(t),
    onData: (listener) => {
      child.stdout.on("data", listener);
      child.stderr.on("data", listener);
    },
    onExit: (listener) => child.on("close", listener),
    interrupt: async () => {
      child.kill("SIGKILL");
    },
    kill: () => child.kill("SIGKILL"),
  };
}

describe("SentinelReader", () => {
  it("splits at the numbered sentinel, removing the newline it starts with", () => {
    const reader = new SentinelReader("s3cr3t", 1 << 16);
    reader.push(enc("a\n\n__agentrl_s3cr3t_1_0__\nno newline"));
    reader.push(enc("\n__agentrl_s3cr3t_2_7__\n"));
    const first = reader.take(1)!;
    expect([text(first.output), first.exitCode]).toEqual(["a\n", 0]);
    const second = reader.take(2)!;
    expect([text(second.output), second.exitCode]).toEqual(["no newline", 7]);
    expect(reader.take(3)).toBeUndefined();
  });

  it("cuts a late sentinel of an earlier command out of the next one's output", () => {
    const reader = new SentinelReader("k", 1 << 16);
    reader.push(enc("late\n\n__agentrl_k_1_0__\nnext\n\n__agentrl_k_2_0__\n"));
    expect(text(reader.take(2)!.output)).toBe("late\nnext\n");
  });

  it("a sentinel with another secret is output like any other", () => {
    const reader = new SentinelReader("k", 1 << 16);
    reader.push(enc("__agentrl_x_1_0__\n\n__agentrl_k_1_0__\n"));
    expect(text(reader.take(1)!.output)).toBe("__agentrl_x_1_0__\n");
  });

  it("keeps at most maxBytes of a flood but still finds the sentinel", () => {
    const reader = new SentinelReader("k", 100);
    for (let i = 0; i < 50; i++) reader.push(enc("y\n".repeat(100)));
    reader.push(enc("\n__agentrl_k_1_0__\n"));
    expect(reader.take(1)!.output.length).toBeLessThanOrEqual(100);
  });

  it("quotes any script as one word (single quotes, newlines, dollar signs)", () => {
    expect(commandText("echo 'a' $HOME\n", "k", 4)).toBe(
      "eval 'echo '\\''a'\\'' $HOME\n'\nprintf '\\n__agentrl_k_4_%d__\\n' \"$?\"\n",
    );
  });
});

describe("PersistentShell on a local bash", () => {
  it("keeps state, returns at the sentinel, reports status; quiet commands return at the idle limit", async () => {
    const shell = new PersistentShell(localBash(), { idleMs: 1_000, totalMs: 10_000, maxBytes: 1 << 16 });
    try {
      await shell.run("cd /tmp; V='it''s'");
      const state = await shell.run('pwd; echo "$V"; (exit 3)');
      expect(text(state.output)).toBe("/tmp\nits\n");
      expect(state.exitCode).toBe(3);
      expect((await shell.run("echo $((1+")).exitCode).not.toBe(0);
      expect(text((await shell.run("echo still")).output)).toBe("still\n");
      const quiet = await shell.run("sleep 1.5; echo done");
      expect(quiet.ended).toBe("idle");
      expect(text((await shell.run("true")).output)).toBe("done\n");
    } finally {
      shell.close();
    }
  }, 30_000);

  it("a command over the total limit is killed with its shell", async () => {
    const shell = new PersistentShell(localBash(), { idleMs: 5_000, totalMs: 1_500, maxBytes: 1 << 16 });
    try {
      const busy = await shell.run("while :; do echo y; sleep 0.1; done");
      expect(busy.ended).toBe("total");
      expect(text(busy.output)).toMatch(/^y\ny\n/);
      expect(shell.alive).toBe(false);
    } finally {
      shell.close();
    }
  }, 30_000);

  it("an exit ends the shell and later commands say so", async () => {
    const shell = new PersistentShell(localBash());
    await shell.run("exit");
    expect(shell.alive).toBe(false);
    expect((await shell.run("echo x")).ended).toBe("exited");
  }, 30_000);

  it("an aborted command returns at once", async () => {
    const shell = new PersistentShell(localBash());
    try {
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 200);
      expect((await shell.run("sleep 3", controller.signal)).ended).toBe("aborted");
    } finally {
      shell.close();
    }
  }, 30_000);
});
