/**
 * icn-upgrade takes etcd's snapshot before it writes a slot, through etcd's own JSON
 * gateway (the appliance's host has no etcdctl). Against the real pinned etcd: a key put
 * before is in the snapshot, which the real etcdutl reads as a valid snapshot and restores.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../builder/registry/server.js";
import { artifactPaths } from "../../builder/sources/index.js";
import { withUpgradeModule } from "../helpers/upgrade-script.js";

let work: string;
let etcd: ChildProcess | undefined;
let endpoint: string;
let etcdutl: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-etcd-snapshot-"));
  const paths = await artifactPaths(["etcd", "etcdutl"]);
  etcdutl = paths.etcdutl;
  const [client, peer] = [await freePort(), await freePort()];
  endpoint = `http://127.0.0.1:${client}`;
  etcd = spawn(
    paths.etcd,
    [
      "--name=snap",
      `--data-dir=${join(work, "data")}`,
      `--listen-client-urls=${endpoint}`,
      `--advertise-client-urls=${endpoint}`,
      `--listen-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-cluster=snap=http://127.0.0.1:${peer}`,
      "--log-level=warn",
    ],
    { stdio: "ignore" },
  );
  for (let i = 0; i < 120; i++) {
    const health = await fetch(`${endpoint}/health`)
      .then((r) => r.text())
      .catch(() => "");
    if (health.includes('"health":"true"')) return;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error("etcd did not become healthy");
}, 30 * 60_000);

afterAll(async () => {
  etcd?.kill();
  await rm(work, { recursive: true, force: true });
});

describe("etcd's snapshot before an upgrade", () => {
  it("holds what etcd held, and etcdutl reads and restores it", async () => {
    const b64 = (text: string) => Buffer.from(text).toString("base64");
    const put = await fetch(`${endpoint}/v3/kv/put`, {
      method: "POST",
      body: JSON.stringify({ key: b64("/registry/secrets/kept"), value: b64("before-upgrade") }),
    });
    expect(put.status).toBe(200);
    const snapshot = join(work, "etcd-before-upgrade.db");
    const [bytes, sha256] = JSON.parse(
      await withUpgradeModule(`print(json.dumps(u.etcd_snapshot(${JSON.stringify(snapshot)}, ${JSON.stringify(endpoint)})))`),
    ) as [number, string];
    expect(bytes).toBeGreaterThan(4096);
    expect((await execa("sha256sum", [snapshot])).stdout.split(" ")[0]).toBe(sha256);
    const status = JSON.parse((await execa(etcdutl, ["snapshot", "status", snapshot, "-w", "json"])).stdout) as { totalKey: number };
    expect(status.totalKey).toBeGreaterThanOrEqual(1);
    const restored = join(work, "restored");
    await execa(etcdutl, ["snapshot", "restore", snapshot, "--data-dir", restored]);
    const dump = await execa("sh", ["-c", `grep -c before-upgrade ${restored}/member/snap/db`]);
    expect(Number(dump.stdout)).toBeGreaterThanOrEqual(1);
  });
});
