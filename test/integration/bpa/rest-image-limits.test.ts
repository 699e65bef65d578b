/**
 * Container image archives and charts that would take the REST API down or fill its disk
 * (issues 32, 48). The API runs as its own process (`bpa api`, as in the pod) against the
 * real kube-apiserver, with its V8 heap capped at 160 MiB as a stand-in for the pod's 256
 * MiB memory limit, so that a document read whole kills it as the limit would. The registry
 * it pushes to answers what the API asks before an upload (a repository's tags: none) and
 * refuses pushes at once, so that a refusal the API missed fails the test in seconds; for
 * the last test it holds pushes for ever, which holds an upload in processing while the
 * test kills the API (SIGKILL, as the OOM killer does).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import { c as tarCreate } from "tar";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { freePort } from "../../../builder/registry/server.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { REPO } from "../../helpers/cli.js";
import { aliasBombChartYaml } from "../../helpers/fixtures/bpa/alias-bomb.js";
import { clients, deleteNamespace, kubeConfig, newNamespace, waitFor } from "../../helpers/operator-suite.js";
import { ApiClient, applyApiRbac, createRegistryAccess, impersonating, makeServerTls, tokenFor, type TestTls } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
const MiB = 1024 * 1024;

let ns: string;
let work: string;
let tls: TestTls;
let registry: Server;
let registryPort: number;
let registryEnv: Record<string, string>;
/** Pushes held without an answer (holdPushes), or refused at once. */
let holdPushes = false;
const heldPushes: ServerResponse[] = [];
let pushesRefused = 0;

function fakeRegistry(req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  if (req.method === "GET" && /^\/v2\/.+\/tags\/list$/.test(req.url ?? "")) {
    res.writeHead(404, { "content-type": "application/json" }).end('{"errors":[{"code":"NAME_UNKNOWN"}]}');
  } else if (holdPushes) heldPushes.push(res);
  else {
    pushesRefused++;
    res.writeHead(503).end("this test's registry takes no pushes");
  }
}
let api: { child: ChildProcess; exited: Promise<void>; output: () => string } | undefined;
let uploader: ApiClient;
let viewer: ApiClient;

/** Starts `bpa api` as a process on a new port; the clients follow it. */
async function startApiProcess(): Promise<void> {
  const port = await freePort();
  const kubeconfig = join(work, "kubeconfig");
  await writeFile(kubeconfig, impersonating(kc, `system:serviceaccount:${ns}:bpa-api`).exportConfig(), { mode: 0o600 });
  const child = spawn(process.execPath, ["--max-old-space-size=160", "--import", "tsx", "bpa/main.ts", "api", "--kubeconfig", kubeconfig], {
    cwd: REPO,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      POD_NAMESPACE: ns,
      BPA_API_PORT: String(port),
      BPA_API_HOST: "127.0.0.1",
      BPA_API_TLS_CERT: tls.certFile,
      BPA_API_TLS_KEY: tls.keyFile,
      BPA_API_STATE_DIR: join(work, "state"),
      BPA_API_RESERVE_BYTES: "0",
      BPA_API_REGISTRY_URL: `http://127.0.0.1:${registryPort}`,
      BPA_API_PULL_HOST: `127.0.0.1:${registryPort}`,
      ...registryEnv,
    },
  });
  let output = "";
  child.stdout!.on("data", (d: Buffer) => (output += d));
  child.stderr!.on("data", (d: Buffer) => (output += d));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  api = { child, exited, output: () => output };
  const base = `https://127.0.0.1:${port}`;
  for (const client of [uploader, viewer]) (client as { base: string }).base = base;
  await waitFor(
    "bpa api to answer",
    async () => {
      if (child.exitCode !== null) throw new Error(`bpa api exited: ${output}`);
      return (await viewer.send("GET", "/healthz").catch(() => undefined))?.status === 200;
    },
    60_000,
    200,
  );
}

async function killApi(signal: NodeJS.Signals): Promise<void> {
  if (!api) return;
  if (api.child.exitCode === null && api.child.signalCode === null) api.child.kill(signal);
  await api.exited;
  api = undefined;
}

beforeAll(async () => {
  ns = await newNamespace(c, "rest-limits");
  await applyApiRbac(c, ns);
  work = await mkdtemp(join(tmpdir(), "icn-rest-limits-"));
  tls = makeServerTls(work);
  // What the appliance's first boot creates, for the test's registry.
  registryEnv = await createRegistryAccess(c, ns, { username: "push", password: "secret", ca: tls.ca });
  registry = createServer(fakeRegistry);
  registryPort = await new Promise<number>((resolve) => registry.listen(0, "127.0.0.1", () => resolve((registry.address() as { port: number }).port)));
  uploader = new ApiClient("https://127.0.0.1", tls.ca, await tokenFor(c, ns, "bpa-api-uploader"));
  viewer = new ApiClient("https://127.0.0.1", tls.ca, await tokenFor(c, ns, "bpa-api-viewer"));
  await startApiProcess();
}, 180_000);

// Each test with a running API, even after one that killed it.
beforeEach(async () => {
  if (!api || api.child.exitCode !== null || api.child.signalCode !== null) await startApiProcess();
}, 120_000);

afterAll(async () => {
  await killApi("SIGTERM");
  registry?.closeAllConnections();
  await new Promise<void>((resolve) => (registry ? registry.close(() => resolve()) : resolve()));
  if (ns) await deleteNamespace(c, ns);
  if (work) await rm(work, { recursive: true, force: true });
});

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

/** An OCI image layout in `dir` with one small image; `index` replaces its index.json when given. */
async function ociLayout(dir: string, index?: (json: string) => Promise<void>): Promise<void> {
  await mkdir(join(dir, "blobs/sha256"), { recursive: true });
  const put = async (data: Buffer | string) => {
    const digest = `sha256:${sha256(data)}`;
    await writeFile(join(dir, "blobs/sha256", digest.slice(7)), data);
    return { digest, size: Buffer.byteLength(data) };
  };
  const layer = await put(randomBytes(4096));
  const config = await put(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [layer.digest] } }));
  const manifest = await put(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...layer }],
    }),
  );
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  const json = JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...manifest }] });
  if (index) await index(json);
  else await writeFile(join(dir, "index.json"), json);
}

async function archive(name: string, make: (dir: string) => Promise<void>, gzip = false): Promise<Buffer> {
  const dir = join(work, name);
  await make(dir);
  const file = join(work, `${name}.tar`);
  await tarCreate({ file, cwd: dir, gzip, portable: true }, await readdir(dir));
  const bytes = await readFile(file);
  await rm(dir, { recursive: true, force: true });
  await rm(file);
  return bytes;
}

async function record(name: string): Promise<UploadRecord | undefined> {
  const list = await viewer.json<{ items: UploadRecord[] }>("/api/v1/uploads");
  return list.body.items.find((r) => r.name === name);
}

describe("image archives an uploader could take the API down with", () => {
  it("refuses an OCI layout with a 300 MB index.json by its size, naming the member and the cap; the API keeps answering", async () => {
    const data = await archive("big-index", (dir) =>
      ociLayout(dir, async (json) => {
        // Valid JSON: the image's index with 300 MB of padding in a field.
        const out = createWriteStream(join(dir, "index.json"));
        out.write(`${json.slice(0, -1)},"padding":"`);
        const chunk = Buffer.alloc(MiB, "a");
        for (let i = 0; i < 300; i++) if (!out.write(chunk)) await new Promise<void>((resolve) => out.once("drain", () => resolve()));
        out.end('"}');
        await finished(out);
      }),
    );
    const reply = await uploader.upload("container-image", "limits/big-index:1", data);
    expect(reply.status, `${reply.body}\n${api?.output().slice(-2000)}`).toBe(422);
    expect(reply.body).toMatch(/the image archive's index\.json is 300\.\d MiB \(\d+ bytes\), over the 4\.0 MiB this API reads of a JSON document/);
    expect(api!.child.exitCode).toBeNull();
    expect((await viewer.send("GET", "/healthz")).status).toBe(200);
    expect(await record("limits/big-index:1")).toMatchObject({ state: "rejected" });
    expect(pushesRefused).toBe(0);
    expect(await readdir(join(work, "state", "work"))).toEqual([]);
  }, 120_000);

  it("refuses a gzip bomb by its unpacked size, before it fills the disk", async () => {
    const block = randomBytes(16 * 1024); // repeated: gzip packs it about 100:1 (under tar's own 1000:1 ratio check)
    const data = await archive(
      "bomb",
      (dir) =>
        ociLayout(dir, async (json) => {
          await writeFile(join(dir, "index.json"), json);
          const out = createWriteStream(join(dir, "blobs", "filler"));
          for (let i = 0; i < (512 * MiB) / block.length; i++) if (!out.write(block)) await new Promise<void>((resolve) => out.once("drain", () => resolve()));
          out.end();
          await finished(out);
        }),
      true,
    );
    expect(data.length).toBeLessThan(16 * MiB);
    const reply = await uploader.upload("container-image", "limits/bomb:1", data);
    expect(reply.status, reply.body).toBe(422);
    expect(reply.body).toContain(`the container image archive unpacks to more than its own ${data.length} bytes`);
    expect(await record("limits/bomb:1")).toMatchObject({ state: "rejected" });
    expect(await readdir(join(work, "state", "work"))).toEqual([]);
    expect(pushesRefused).toBe(0);
  }, 120_000);
});

describe("charts an uploader could take the API down with", () => {
  it("refuses a chart whose Chart.yaml nests YAML aliases (billion laughs in a few hundred bytes), and keeps answering", async () => {
    const dir = join(work, "laughs-src");
    await mkdir(join(dir, "laughs"), { recursive: true });
    await writeFile(join(dir, "laughs", "Chart.yaml"), aliasBombChartYaml("laughs"));
    const tgz = join(work, "laughs.tgz");
    await tarCreate({ file: tgz, cwd: dir, gzip: true, portable: true }, ["laughs"]);
    const data = await readFile(tgz);
    expect(data.length).toBeLessThan(1024);
    const reply = await uploader.upload("chart", "limits/laughs:1.0.0", data);
    expect(reply.status, `${reply.body}\n${api?.output().slice(-2000)}`).toBe(422);
    expect(reply.body).toContain("the chart's Chart.yaml uses YAML aliases (&anchor and *alias): this API does not expand them");
    expect(api!.child.exitCode).toBeNull();
    expect((await viewer.send("GET", "/healthz")).status).toBe(200);
    expect(await record("limits/laughs:1.0.0")).toMatchObject({ state: "rejected" });
    expect(pushesRefused).toBe(0);
  }, 60_000);
});

describe("an upload whose processing stopped the API", () => {
  it("is failed at the restart with the reason, not processed again", async () => {
    const data = await archive("hangs", (dir) => ociLayout(dir));
    holdPushes = true;
    // The push reaches the registry, which never answers: the upload is being processed when the API is killed.
    const sent = uploader.upload("container-image", "limits/hangs:1", data).catch((error: unknown) => error);
    await waitFor("the push to reach the registry", async () => heldPushes.length > 0, 60_000, 100);
    await killApi("SIGKILL");
    await sent;

    const after = heldPushes.length;
    await startApiProcess();
    const failed = await waitFor("the upload to be listed as failed", async () => {
      const r = await record("limits/hangs:1");
      return r?.state === "failed" ? r : undefined;
    });
    expect(failed.error).toContain("the server stopped while processing this upload (out of memory?)");
    expect(await readdir(join(work, "state", "incoming"))).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    expect(heldPushes.length).toBe(after); // not pushed again
    expect((await record("limits/hangs:1"))?.state).toBe("failed");
  }, 180_000);
});
