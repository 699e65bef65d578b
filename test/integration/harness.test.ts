/** The harness itself: a second, private server starts, answers, and leaves nothing behind. */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { expect, it } from "vitest";
import { startKubeTestServer } from "../helpers/kube-apiserver.js";

it("starts etcd + kube-apiserver on loopback and stop() removes processes and files", async () => {
  const server = await startKubeTestServer({ log: () => {} });
  const pids = (await readFile(`${server.dir}/pids`, "utf8")).trim().split(/\s+/).map(Number);
  try {
    expect(server.server).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(pids).toHaveLength(2);
    const kc = new KubeConfig();
    kc.loadFromFile(server.kubeconfigPath);
    const core = kc.makeApiClient(CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: "harness-check" } } });
    expect((await core.readNamespace({ name: "harness-check" })).metadata?.name).toBe("harness-check");
  } finally {
    await server.stop();
  }
  expect(existsSync(server.dir)).toBe(false);
  for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
});
