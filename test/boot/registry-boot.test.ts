/**
 * The booted appliance serves its local registry (port 5000) and file server (port 8080):
 * the qcow2 is booted in QEMU with both ports forwarded to loopback; once the ready
 * marker is on the console, the test reads the registry's catalog and a pinned manifest
 * by digest, pushes a blob (the registry accepts uploads), and fetches kubeadm's .sha256
 * from files_repo. QEMU is then stopped by its pid.
 */
import { createHash } from "node:crypto";
import { readdir, readFile, rm, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, READY_MARKER } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { REPO, runCli, type CliResult } from "../helpers/cli.js";
import { withoutKubernetes, writeDefinition } from "../helpers/definition.js";

const ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
let out: string;
let build: CliResult;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-regboot-"));
  // The registry and file server do not need the Kubernetes cluster: the lean appliance boots fast.
  build = await runCli(["build", "--definition", await writeDefinition(withoutKubernetes), "--format", "qcow2", "--out", out]);
}, 60 * 60_000);

afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

async function killQemuListeningOn(port: number): Promise<void> {
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (cmdline.startsWith("qemu-system-x86_64") && cmdline.includes(`hostfwd=tcp:127.0.0.1:${port}-:5000`)) process.kill(Number(pid), "SIGTERM");
  }
}

async function poll<T>(what: string, fn: () => Promise<T>, seconds: number): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      return await fn();
    } catch (error) {
      last = error;
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
  throw new Error(`${what}: ${String(last)}`);
}

describe("the booted appliance", () => {
  it("serves the seeded registry on port 5000 (and takes pushes) and the files on port 8080", { timeout: 20 * 60_000 }, async () => {
    expect(build.exitCode, build.all).toBe(0);
    const registryPort = await freePort();
    const filesPort = await freePort();
    const seed = yaml.load(await readFile(join(REPO, "registry-seed/bootstrap.yaml"), "utf8")) as { images: { ref: string; digest?: string; requires?: string }[] };
    const pause = seed.images.find((i) => i.ref === "registry.k8s.io/pause:3.10.2")!;
    const checks: { catalog?: string[]; pauseDigest?: string; pushed?: number; kubeadmSha?: string; error?: string } = {};
    let checking: Promise<void> | undefined;
    const result = await bootImage({
      image: join(out, "icn-bootstrap.qcow2"),
      firmware: "bios",
      timeoutSeconds: 15 * 60,
      hostForwards: [`tcp:127.0.0.1:${registryPort}-:5000`, `tcp:127.0.0.1:${filesPort}-:8080`],
      readyPattern: /^$ICN-NEVER/,
      onLine: (line) => {
        if (checking || !READY_MARKER.test(line)) return;
        checking = (async () => {
          try {
            const base = `http://127.0.0.1:${registryPort}`;
            checks.catalog = await poll("registry catalog", async () => ((await (await fetch(`${base}/v2/_catalog`)).json()) as { repositories: string[] }).repositories, 120);
            const manifest = await fetch(`${base}/v2/pause/manifests/3.10.2`, { headers: { Accept: ACCEPT } });
            checks.pauseDigest = `sha256:${createHash("sha256").update(Buffer.from(await manifest.arrayBuffer())).digest("hex")}`;
            const blob = Buffer.from("pushed after boot\n");
            const digest = `sha256:${createHash("sha256").update(blob).digest("hex")}`;
            const start = await fetch(`${base}/v2/icn/uploads/blobs/uploads/`, { method: "POST" });
            const location = new URL(start.headers.get("location")!, base);
            location.searchParams.set("digest", digest);
            checks.pushed = (await fetch(location, { method: "PUT", body: blob, headers: { "Content-Type": "application/octet-stream" } })).status;
            checks.kubeadmSha = (await poll("file server", async () => {
              const r = await fetch(`http://127.0.0.1:${filesPort}/kubespray/dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubeadm.sha256`);
              if (!r.ok) throw new Error(`HTTP ${r.status}`);
              return r.text();
            }, 60)).trim();
          } catch (error) {
            checks.error = String(error);
          } finally {
            await killQemuListeningOn(registryPort);
          }
        })();
      },
    });
    await checking;
    expect(checks.error, result.lastLines.join("\n")).toBeUndefined();
    expect(checks.catalog).toEqual(expect.arrayContaining(["kube-apiserver", "pause", "etcd", "coredns/coredns", "icn/bpa"]));
    expect(checks.pauseDigest).toBe(pause.digest);
    expect(checks.pushed).toBe(201);
    expect(checks.kubeadmSha).toMatch(/^[0-9a-f]{64}$/);
  });
});
