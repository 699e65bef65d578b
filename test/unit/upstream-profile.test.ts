/**
 * The upstream profile end to end against a stand-in release host on 127.0.0.1
 * (the real one, dl.k8s.io, is not reachable here): pin the release binaries of
 * the pinned Kubernetes version by their published .sha256 files, then fetch them
 * with --profile upstream while the default profile still builds from source.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { UserError } from "../../builder/errors.js";
import { ensureArtifacts, loadArtifacts, selectTargets } from "../../builder/sources/index.js";
import { lockUpstreamKubernetes } from "../../builder/sources/lock.js";

const binary = randomBytes(256 * 1024);
const digest = createHash("sha256").update(binary).digest("hex");
let server: Server;
let base: string;
let root: string;
let lockPath: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-upstream-test-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  server = createServer((req, res) => {
    if (req.url === "/release/v1.37.1/bin/linux/amd64/kube-apiserver") res.writeHead(200, { "content-length": binary.length }).end(binary);
    else if (req.url === "/release/v1.37.1/bin/linux/amd64/kube-apiserver.sha256") res.end(`${digest}\n`);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/release`;
  lockPath = join(root, "appliance.lock.yaml");
  await writeFile(
    lockPath,
    `version: 1
artifacts:
  kubernetes:
    source: gomod
    module: k8s.io/kubernetes
    version: v1.37.1
    dir: go/kubernetes
    goSum: sha256:${"a".repeat(64)}
    binaries:
      kube-apiserver: k8s.io/kubernetes/cmd/kube-apiserver
`,
  );
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await rm(root, { recursive: true, force: true });
});

it("pins release binaries of the pinned version and fetches them with the upstream profile", async () => {
  await lockUpstreamKubernetes({ lockPath, baseUrl: base, log: () => {} });
  const loaded = await loadArtifacts(lockPath);
  expect(loaded.artifacts["kube-apiserver"]).toEqual({
    source: "url",
    url: `${base}/v1.37.1/bin/linux/amd64/kube-apiserver`,
    sha256: digest,
    version: "v1.37.1",
    executable: true,
    profile: "upstream",
  });
  expect(selectTargets(loaded).map((t) => t.source)).toEqual(["gomod"]);
  expect(selectTargets(loaded, { profile: "upstream" }).map((t) => t.source)).toEqual(["url"]);

  const [result] = await ensureArtifacts({ lockPath, profile: "upstream", log: () => {} });
  expect(result).toMatchObject({ name: "kube-apiserver", source: "url", status: "downloaded", sha256: digest, version: "v1.37.1" });
  expect((await readFile(result!.path)).equals(binary)).toBe(true);
});

it("explains that the upstream profile needs the release host", async () => {
  const error = await lockUpstreamKubernetes({ lockPath, baseUrl: `${base}/nowhere`, log: () => {} }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(UserError);
  expect((error as UserError).message).toMatch(/^kube-apiserver: cannot read the published digest .*HTTP 404/);
});
