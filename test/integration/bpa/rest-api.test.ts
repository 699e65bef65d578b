/**
 * The BPA's REST API against the real kube-apiserver: tokens checked by TokenReview and
 * permissions by SubjectAccessReview with the RBAC of manifests/bpa/api.yaml; tus uploads
 * over TLS cut and resumed, a wrong digest, size and disk limits, two uploads of one
 * name, OS images, the install status read from the API, and the OpenAPI document.
 * Container images through the real registry: rest-registry.test.ts.
 */
import { request } from "node:https";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../builder/registry/server.js";
import { mergePatch } from "../../../bpa/runtime/kube.js";
import { REPO } from "../../helpers/cli.js";
import type { RunningApi } from "../../../bpa/rest/main.js";
import { ROUTES } from "../../../bpa/rest/server.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { bmh } from "../../helpers/fixtures/bpa/hosts.js";
import type { V1ConfigMap, V1Deployment, V1PersistentVolume, V1PersistentVolumeClaim, V1Service } from "@kubernetes/client-node";
import yaml from "js-yaml";
import { builtOsImageManifest } from "../../../common/os-images.js";
import {
  applyCrds,
  clients,
  createHost,
  createProvisioning,
  deleteNamespace,
  kubeConfig,
  loadKubeYaml,
  newNamespace,
  setJobStatus,
  waitFor,
} from "../../helpers/operator-suite.js";
import { ApiClient, applyApiRbac, makeServerTls, sha256, startTestApi, tokenFor, type TestTls } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
const root = process.getuid?.() === 0;

let ns: string;
let tls: TestTls;
let stateDir: string;
let api: RunningApi;
let base: string;
let uploader: ApiClient;
let viewer: ApiClient;
let nobody: ApiClient;
let anonymous: ApiClient;

beforeAll(async () => {
  await applyCrds(kc);
  ns = await newNamespace(c, "rest");
  await applyApiRbac(c, ns);
  stateDir = await mkdtemp(join(tmpdir(), "icn-api-state-"));
  tls = makeServerTls(stateDir); // beside the store's directories; removed with it
  api = await startTestApi(kc, ns, stateDir, tls, { BPA_API_MAX_UPLOAD_BYTES: String(64 * 1024 * 1024) });
  base = `https://127.0.0.1:${api.port}`;
  uploader = new ApiClient(base, tls.ca, await tokenFor(c, ns, "bpa-api-uploader"));
  viewer = new ApiClient(base, tls.ca, await tokenFor(c, ns, "bpa-api-viewer"));
  nobody = new ApiClient(base, tls.ca, await tokenFor(c, ns, "nobody"));
  anonymous = new ApiClient(base, tls.ca);
}, 120_000);

afterAll(async () => {
  await api?.stop();
  if (ns) await deleteNamespace(c, ns);
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

const published = (...parts: string[]) => join(stateDir, "published", ...parts);
const incomingFiles = async () => (await readdir(join(stateDir, "incoming"))).sort();
async function records(client = viewer): Promise<UploadRecord[]> {
  const reply = await client.json<{ items: UploadRecord[] }>("/api/v1/uploads");
  expect(reply.status).toBe(200);
  return reply.body.items;
}

describe("the manifests", () => {
  it("the API's Deployment, Service, volume and claim are accepted, within the restricted Pod Security level", async () => {
    const restricted = await newNamespace(c, "rest-psa");
    try {
      await c.core.patchNamespace({ name: restricted, body: { metadata: { labels: { "pod-security.kubernetes.io/enforce": "restricted" } } } }, mergePatch);
      await c.core.createNamespacedServiceAccount({ namespace: restricted, body: { metadata: { name: "bpa-api" } } });
      const docs = await loadKubeYaml<{ kind: string; metadata: { name: string; namespace?: string } }>("manifests/bpa/api.yaml");
      const byKind = (kind: string) => docs.filter((d) => d.kind === kind).map((d) => ({ ...d, metadata: { ...d.metadata, namespace: restricted } }));
      const [deployment] = byKind("Deployment") as V1Deployment[];
      expect(deployment!.spec!.template.spec!.volumes!.every((v) => !v.hostPath)).toBe(true);
      // A pod is what Pod Security admission checks: the Deployment's template as a pod, server-side dry run.
      await c.core.createNamespacedPod({
        namespace: restricted,
        dryRun: "All",
        body: { metadata: { name: "bpa-api-psa" }, spec: deployment!.spec!.template.spec! },
      });
      // ... and the level is enforced here: the same pod with a hostPath volume is refused.
      const withHostPath = {
        ...deployment!.spec!.template.spec!,
        volumes: [...deployment!.spec!.template.spec!.volumes!, { name: "host", hostPath: { path: "/var/lib" } }],
      };
      await expect(
        c.core.createNamespacedPod({ namespace: restricted, dryRun: "All", body: { metadata: { name: "bpa-api-psa" }, spec: withHostPath } }),
      ).rejects.toThrow(/violates PodSecurity .*restricted:latest.*uses restricted volume type .*hostPath/);
      await c.apps.createNamespacedDeployment({ namespace: restricted, dryRun: "All", body: deployment! });
      await c.core.createNamespacedService({ namespace: restricted, dryRun: "All", body: (byKind("Service") as V1Service[])[0]! });
      await c.core.createNamespacedPersistentVolumeClaim({
        namespace: restricted,
        dryRun: "All",
        body: (byKind("PersistentVolumeClaim") as V1PersistentVolumeClaim[])[0]!,
      });
      const pv = docs.find((d) => d.kind === "PersistentVolume") as V1PersistentVolume;
      await c.core.createPersistentVolume({ dryRun: "All", body: pv });
      expect(pv.spec!.hostPath!.path).toBe("/var/lib/icn-bootstrap/bpa-api");
    } finally {
      await deleteNamespace(c, restricted);
    }
  });
});

describe("TLS", () => {
  it("serves the site certificate, and a re-issued one (new addresses) without a restart", async () => {
    const certOf = (client: ApiClient) =>
      new Promise<string>((resolve, reject) => {
        const req = request(new URL("/healthz", client.base), { ca: client.ca }, (res) => {
          res.resume();
          resolve((res.socket as import("node:tls").TLSSocket).getPeerCertificate().fingerprint256);
        });
        req.on("error", reject);
        req.end();
      });
    const dir = await mkdtemp(join(tmpdir(), "icn-api-reload-"));
    const first = makeServerTls(dir);
    await writeFile(join(dir, "tls.crt"), await readFile(first.certFile));
    await writeFile(join(dir, "tls.key"), await readFile(first.keyFile));
    const reloading = await startTestApi(
      kc,
      ns,
      join(dir, "state"),
      { ca: first.ca, certFile: join(dir, "tls.crt"), keyFile: join(dir, "tls.key") },
      { BPA_API_TLS_RELOAD_SECONDS: "0.2" },
    );
    try {
      const url = `https://127.0.0.1:${reloading.port}`;
      const before = await certOf(new ApiClient(url, first.ca));
      await expect(certOf(new ApiClient(url, tls.ca))).rejects.toThrow(/self[- ]signed|unable to verify|certificate/);
      // Re-issued (another CA here, to tell them apart): the key first, then the certificate, as a Secret update swaps both.
      const second = makeServerTls(dir);
      await writeFile(join(dir, "tls.key"), await readFile(second.keyFile));
      await writeFile(join(dir, "tls.crt"), await readFile(second.certFile));
      const after = await waitFor("the new certificate to be served", async () => certOf(new ApiClient(url, second.ca)).catch(() => undefined), 10_000, 100);
      expect(after).not.toBe(before);
    } finally {
      await reloading.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("who may do what", () => {
  it("serves the OpenAPI document and the page to anyone, describing every route it answers", async () => {
    const doc = await anonymous.json<{ openapi: string; paths: Record<string, Record<string, unknown>> }>("/openapi.json");
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe("3.1.0");
    for (const route of ROUTES) {
      expect(doc.body.paths[route.path]?.[route.method.toLowerCase()], `${route.method} ${route.path} in /openapi.json`).toBeDefined();
    }
    const page = await anonymous.send("GET", "/");
    expect(page.status).toBe(200);
    expect(page.headers["content-security-policy"]).toContain("script-src 'self'");
    expect(page.body).not.toMatch(/provisioning-|sha256:[a-f0-9]{8}/); // no data in the public HTML
  });

  it("refuses data without a token (401), with a token the cluster does not know (401), and without RBAC permission (403)", async () => {
    const none = await anonymous.send("GET", "/api/v1/uploads");
    expect(none.status).toBe(401);
    expect(none.headers["www-authenticate"]).toMatch(/^Bearer/);
    expect(JSON.parse(none.body).error).toMatch(/no bearer token.*kubectl create token/);
    const forged = await new ApiClient(base, tls.ca, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln").send("GET", "/api/v1/uploads");
    expect(forged.status).toBe(401);
    const denied = await nobody.send("GET", "/api/v1/uploads");
    // Right after the CRD is created the API server may answer 429 "storage is (re)initializing": passed on as 503.
    await waitFor("the viewer to read Provisionings", async () => {
      const r = await viewer.send("GET", "/api/v1/provisionings");
      expect(r.status, r.body).toBeOneOf([200, 503]);
      return r.status === 200;
    });
    expect(denied.status).toBe(403);
    expect(JSON.parse(denied.body).error).toContain(`system:serviceaccount:${ns}:nobody may not list uploads.bpa.akraino.org in namespace ${ns}`);
    expect((await nobody.send("GET", "/api/v1/provisionings")).status).toBe(403);
  });

  it("refuses anonymous and unauthorised uploads before storing anything", async () => {
    const data = randomBytes(1000);
    expect((await anonymous.upload("file", "sneaky.bin", data)).status).toBe(401);
    const byViewer = await viewer.upload("file", "sneaky.bin", data);
    expect(byViewer.status).toBe(403);
    expect(JSON.parse(byViewer.body).error).toContain("may not create uploads.bpa.akraino.org");
    expect(await incomingFiles()).toEqual([]);
    expect(existsSync(published("uploads", "sneaky.bin"))).toBe(false);
  });

  it("lets only the uploader who created an upload continue it", async () => {
    const other = new ApiClient(base, tls.ca, await tokenFor(c, ns, "other-uploader"));
    await c.rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: "other-uploader" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "bpa-api-uploader" },
        subjects: [{ kind: "ServiceAccount", name: "other-uploader", namespace: ns }],
      },
    });
    const data = randomBytes(2048);
    const created = await uploader.create({ kind: "file", name: "mine.bin", sha256: sha256(data) }, data.length);
    expect(created.status).toBe(201);
    const location = String(created.headers.location);
    const stolen = await waitFor("RBAC to admit the other uploader", async () => {
      const r = await other.patch(location, 0, data);
      return r.status === 403 && r.body.includes("belongs to") ? r : undefined;
    });
    expect(JSON.parse(stolen.body).error).toContain(`belongs to system:serviceaccount:${ns}:bpa-api-uploader`);
    expect((await uploader.patch(location, 0, data)).status).toBe(200);
  });
});

describe("uploads", () => {
  it("resumes an upload cut in the middle where the server stopped receiving, without sending a byte twice", async () => {
    const data = randomBytes(24 * 1024 * 1024);
    const created = await uploader.create({ kind: "file", name: "tools/big.bin", sha256: sha256(data) }, data.length);
    expect(created.status).toBe(201);
    const location = String(created.headers.location);
    // The link is cut after 40% of the bytes: the request is destroyed mid-body.
    const cutAt = Math.floor(data.length * 0.4);
    await new Promise<void>((resolve) => {
      const req = request(new URL(location, base), {
        method: "PATCH",
        ca: tls.ca,
        headers: {
          authorization: `Bearer ${uploader.token}`,
          "tus-resumable": "1.0.0",
          "upload-offset": 0,
          "content-type": "application/offset+octet-stream",
          "content-length": data.length,
        },
      });
      req.on("error", () => resolve());
      req.write(data.subarray(0, cutAt), () => {
        void waitFor("the server to receive the first part", async () => {
          const mine = (await records()).find((r) => r.name === "tools/big.bin");
          return (mine?.bytesReceived ?? 0) >= cutAt || undefined;
        }).then(() => {
          req.destroy();
          resolve();
        });
      });
    });
    const offset = await waitFor("the cut upload's offset", async () => {
      const head = await uploader.head(location);
      return head.status === 200 && Number(head.headers["upload-offset"]) > 0 ? Number(head.headers["upload-offset"]) : undefined;
    });
    expect(offset).toBe(cutAt); // every byte received was kept
    const listed = (await records()).find((r) => r.name === "tools/big.bin")!;
    expect(listed).toMatchObject({ state: "uploading", offset: cutAt, size: data.length, kind: "file" });
    expect(existsSync(published("uploads", "tools/big.bin"))).toBe(false);

    const done = await uploader.patch(location, offset, data.subarray(offset));
    expect(done.status, done.body).toBe(200);
    const record = JSON.parse(done.body) as UploadRecord;
    expect(record).toMatchObject({
      state: "published",
      kind: "file",
      name: "tools/big.bin",
      size: data.length,
      digest: `sha256:${sha256(data)}`,
      path: "/uploads/tools/big.bin",
    });
    expect(record.url).toBe(`http://127.0.0.1:8080/uploads/tools/big.bin`);
    expect(record.bytesReceived).toBe(data.length); // nothing sent twice
    expect(sha256(await readFile(published("uploads", "tools/big.bin")))).toBe(sha256(data));
    expect(await readFile(published("uploads", "tools/big.bin.sha256"), "utf8")).toBe(`${sha256(data)}  big.bin\n`);
    expect(await incomingFiles()).toEqual([]);
  });

  it("refuses a wrong digest after the last byte, naming both digests, and publishes nothing", async () => {
    const data = randomBytes(300_000);
    const stated = sha256("something else");
    const reply = await uploader.upload("file", "wrong.bin", data, stated);
    expect(reply.status).toBe(422);
    expect(reply.body).toContain(`the client stated ${stated}, the 300000 bytes received have ${sha256(data)}; nothing was published`);
    expect(existsSync(published("uploads", "wrong.bin"))).toBe(false);
    expect(existsSync(published("uploads", "wrong.bin.sha256"))).toBe(false);
    expect(await incomingFiles()).toEqual([]);
    expect((await records()).find((r) => r.name === "wrong.bin")).toMatchObject({ state: "rejected", kind: "file" });
  });

  it("refuses bad metadata and an upload over the size limit at creation, with the fix", async () => {
    const bad = await uploader.create({ kind: "firmware", name: "../etc/passwd", sha256: "abc" }, 10);
    expect(bad.status).toBe(400);
    expect(bad.body).toContain('metadata "kind" is "firmware": use one of file, container-image, os-image, chart');
    expect(bad.body).toContain('metadata "sha256" is "abc"');
    const traversal = await uploader.create({ kind: "file", name: "../etc/passwd", sha256: sha256("x") }, 10);
    expect(traversal.status).toBe(400);
    expect(traversal.body).toContain('name "../etc/passwd" is not a relative file path');
    const big = await uploader.create({ kind: "os-image", name: "huge.qcow2", sha256: sha256("x") }, 65 * 1024 * 1024);
    expect(big.status).toBe(413);
    expect(big.body).toContain('os-image "huge.qcow2" is 65.0 MiB (68157440 bytes), over this appliance\'s limit of 64.0 MiB');
    expect(big.body).toContain("BPA_API_MAX_UPLOAD_BYTES");
    expect(await incomingFiles()).toEqual([]);
  });

  it("takes one upload per name at a time; a later upload replaces the published file whole", async () => {
    const first = randomBytes(100_000);
    const second = randomBytes(120_000);
    const [a, b] = await Promise.all([
      uploader.create({ kind: "file", name: "same.bin", sha256: sha256(first) }, first.length),
      uploader.create({ kind: "file", name: "same.bin", sha256: sha256(second) }, second.length),
    ]);
    expect([a.status, b.status].sort()).toEqual([201, 409]);
    const [won, lost] = a.status === 201 ? [a, b] : [b, a];
    const wonData = a.status === 201 ? first : second;
    const otherData = a.status === 201 ? second : first;
    expect(lost.body).toContain(`file "same.bin" is being uploaded already (upload ${won.headers.location})`);
    expect((await uploader.patch(String(won.headers.location), 0, wonData)).status).toBe(200);
    expect(sha256(await readFile(published("uploads", "same.bin")))).toBe(sha256(wonData));
    // The name is free again: the next upload replaces the file (a rename: old or new, never a mix).
    expect((await uploader.upload("file", "same.bin", otherData)).status).toBe(200);
    expect(sha256(await readFile(published("uploads", "same.bin")))).toBe(sha256(otherData));
    const states = (await records())
      .filter((r) => r.name === "same.bin")
      .map((r) => r.state)
      .sort();
    expect(states).toEqual(["published", "replaced"]);
  });

  it("refuses a name that clashes with what is published (409), leaving the published files as they were", async () => {
    const before = await readdir(published("uploads", "tools"));
    const reply = await uploader.upload("file", "tools", randomBytes(1000)); // tools/ is a directory (tools/big.bin)
    expect(reply.status).toBe(409);
    expect(reply.body).toContain('name "tools" clashes with what is published');
    expect(existsSync(published("uploads", "tools.sha256"))).toBe(false);
    expect(await readdir(published("uploads", "tools"))).toEqual(before);
    expect((await readdir(published("uploads"))).filter((f) => f.startsWith("."))).toEqual([]);
    expect((await records()).find((r) => r.name === "tools")).toMatchObject({ state: "rejected" });
  });

  it("publishes an OS image with its checksum file and lists it as a BareMetalHost's spec.image takes it", async () => {
    const qcow2 = Buffer.concat([Buffer.from([0x51, 0x46, 0x49, 0xfb, 0, 0, 0, 3]), randomBytes(65_536)]);
    const reply = await uploader.upload("os-image", "ubuntu-test.qcow2", qcow2);
    expect(reply.status, reply.body).toBe(200);
    const images = await viewer.json<{ items: Record<string, unknown>[] }>("/api/v1/os-images");
    expect(images.body.items).toContainEqual(
      expect.objectContaining({
        name: "ubuntu-test.qcow2",
        url: "http://127.0.0.1:8080/os-images/ubuntu-test.qcow2",
        checksum: sha256(qcow2),
        checksumType: "sha256",
        checksumUrl: "http://127.0.0.1:8080/os-images/ubuntu-test.qcow2.sha256sum",
        sha256: sha256(qcow2),
        format: "qcow2",
        size: qcow2.length,
      }),
    );
    expect(await readFile(published("os-images", "ubuntu-test.qcow2.sha256sum"), "utf8")).toBe(`${sha256(qcow2)}  ubuntu-test.qcow2\n`);
  });

  it("lists the build's OS image (the ConfigMap the build writes among the first-boot manifests); an upload of its name is refused", async () => {
    const built = {
      name: "debian-13-compute-node.qcow2",
      path: "/os-images/debian-13-compute-node.qcow2",
      sha256: "a".repeat(64),
      size: 260898304,
      format: "qcow2" as const,
    };
    const manifest = yaml.load(builtOsImageManifest(built, "compute-node", ns)) as V1ConfigMap;
    await c.core.createNamespacedConfigMap({ namespace: ns, body: manifest });
    // A ConfigMap that is not an OS image announcement is not listed, a malformed one neither.
    await c.core.createNamespacedConfigMap({
      namespace: ns,
      body: {
        metadata: { name: "bad-os-image", labels: manifest.metadata!.labels },
        data: { name: "x.qcow2", path: "/os-images/x.qcow2", sha256: "nope", size: "1", format: "qcow2" },
      },
    });
    const listed = await viewer.json<{ items: Record<string, unknown>[] }>("/api/v1/os-images");
    expect(listed.status).toBe(200);
    expect(listed.body.items.filter((i) => i.source === "build")).toEqual([
      {
        name: built.name,
        url: `http://127.0.0.1:8080${built.path}`,
        checksum: built.sha256,
        checksumType: "sha256",
        checksumUrl: `http://127.0.0.1:8080${built.path}.sha256sum`,
        sha256: built.sha256,
        format: "qcow2",
        size: built.size,
        source: "build",
      },
    ]);
    // The build's names are nobody's to replace (rest-owners.test.ts); nginx serves the build's first.
    const replacement = Buffer.concat([Buffer.from([0x51, 0x46, 0x49, 0xfb, 0, 0, 0, 3]), randomBytes(4096)]);
    const refused = await uploader.upload("os-image", built.name, replacement);
    expect(refused.status).toBe(409);
    expect(refused.body).toContain(`os-image "${built.name}" belongs to the build`);
    const after = (await viewer.json<{ items: Record<string, unknown>[] }>("/api/v1/os-images")).body.items.filter((i) => i.name === built.name);
    expect(after).toEqual([expect.objectContaining({ source: "build", sha256: built.sha256 })]);
  });

  it("finishes an upload that was complete when the server stopped, after its restart", async () => {
    const data = randomBytes(50_000);
    const created = await uploader.create({ kind: "file", name: "restart.bin", sha256: sha256(data) }, data.length);
    // Bytes stored as tus stores them, but the server stops before publishing (a power cut).
    const id = String(created.headers.location).split("/").pop()!;
    await writeFile(join(stateDir, "incoming", id), data);
    await api.stop();
    api = await startTestApi(kc, ns, stateDir, tls, { BPA_API_MAX_UPLOAD_BYTES: String(64 * 1024 * 1024) });
    base = `https://127.0.0.1:${api.port}`;
    for (const client of [uploader, viewer, nobody, anonymous]) (client as { base: string }).base = base;
    await waitFor("the restarted server to publish restart.bin", async () => existsSync(published("uploads", "restart.bin")));
    expect(sha256(await readFile(published("uploads", "restart.bin")))).toBe(sha256(data));
  });
});

describe.runIf(root)("the file server (nginx with the shipped icn-bootstrap-files.conf)", () => {
  it("serves published files and OS images at /uploads/ and /os-images/, the build's OS images before an upload of the same name, and nothing of the upload store", async () => {
    const data = randomBytes(10_000);
    expect((await uploader.upload("file", "served/tool.bin", data)).status).toBe(200);
    const created = await uploader.create({ kind: "file", name: "secret-in-progress.bin", sha256: sha256("y") }, 100);
    const inProgressId = String(created.headers.location).split("/").pop()!;
    await writeFile(published("uploads", ".tmp-partial"), "partial");
    const work = await mkdtemp(join(tmpdir(), "icn-files-nginx-"));
    // The build's OS image, and an upload of its name in the store (as an earlier version published it).
    await mkdir(join(work, "os-images"));
    await writeFile(join(work, "os-images", "built.qcow2"), "the build's image");
    await writeFile(join(work, "os-images", "built.qcow2.sha256sum"), `${sha256("the build's image")}  built.qcow2\n`);
    await writeFile(published("os-images", "built.qcow2"), "an uploader's image");
    await writeFile(published("os-images", "built.qcow2.sha256sum"), `${sha256("an uploader's image")}  built.qcow2\n`);
    const port = await freePort();
    const site = (await readFile(join(REPO, "overlays/etc/nginx/conf.d/icn-bootstrap-files.conf"), "utf8"))
      .replaceAll("/var/lib/icn-bootstrap/bpa-api/", `${stateDir}/`)
      .replaceAll("root /srv/icn-bootstrap/files;", `root ${work};`)
      .replace("listen 8080 default_server;", `listen 127.0.0.1:${port} default_server;`)
      .replace("listen [::]:8080 default_server;", "");
    await writeFile(join(work, "site.conf"), site);
    await writeFile(
      join(work, "nginx.conf"),
      `user root;\npid ${work}/nginx.pid;\nerror_log ${work}/error.log;\nevents {}\nhttp {\n  access_log off;\n  include ${work}/site.conf;\n}\n`,
    );
    const nginx = (...args: string[]) => execa("nginx", ["-p", work, "-c", join(work, "nginx.conf"), ...args]);
    await nginx();
    try {
      const get = (path: string) => fetch(`http://127.0.0.1:${port}${path}`);
      const file = await get("/uploads/served/tool.bin");
      expect(file.status).toBe(200);
      expect(Buffer.from(await file.arrayBuffer()).equals(data)).toBe(true);
      expect(await (await get("/uploads/served/tool.bin.sha256")).text()).toBe(`${sha256(data)}  tool.bin\n`);
      expect((await get("/os-images/ubuntu-test.qcow2.sha256sum")).status).toBe(200);
      expect(await (await get("/os-images/built.qcow2")).text()).toBe("the build's image");
      expect(await (await get("/os-images/built.qcow2.sha256sum")).text()).toBe(`${sha256("the build's image")}  built.qcow2\n`);
      expect((await get("/uploads/.tmp-partial")).status).toBe(404);
      expect((await get(`/uploads/../incoming/${inProgressId}`)).status).not.toBe(200);
      expect((await get(`/incoming/${inProgressId}`)).status).toBe(404);
      expect((await get("/uploads/secret-in-progress.bin")).status).toBe(404);
    } finally {
      await nginx("-s", "stop").catch(() => undefined);
      await rm(work, { recursive: true, force: true });
    }
  });
});

describe("install status from the Kubernetes API", () => {
  it("lists Provisionings with phase, conditions, assigned hosts and the install Job's state, and the BareMetalHosts", async () => {
    await createHost(c, ns, bmh({ name: "node-1", cpu: 16, ram: 32768, ip: "10.9.0.11" }));
    await createProvisioning(c, ns, { metadata: { name: "site-a" }, spec: { master: { cpu: 8, memory: "8Gi" } } });
    await c.batch.createNamespacedJob({
      namespace: ns,
      body: {
        metadata: { name: "site-a-install-0123abcd", labels: { "app.kubernetes.io/managed-by": "bpa-operator", "bpa.akraino.org/component": "install" } },
        spec: { template: { spec: { restartPolicy: "Never", containers: [{ name: "kubespray", image: "runner" }] } } },
      },
    });
    await setJobStatus(c, ns, "site-a-install-0123abcd", "failed");
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    await c.custom.patchNamespacedCustomObjectStatus(
      {
        group: "bpa.akraino.org",
        version: "v1alpha1",
        namespace: ns,
        plural: "provisionings",
        name: "site-a",
        body: {
          status: {
            phase: "Failed",
            installJob: "site-a-install-0123abcd",
            assignedHosts: [
              { name: "node-1", namespace: ns, role: "master", index: 0, mac: "52:54:00:00:00:01", ip: "10.9.0.11", cpu: 16, ramMebibytes: 32768 },
            ],
            conditions: [
              { type: "Ready", status: "False", reason: "InstallFailed", message: "install Job site-a-install-0123abcd failed", lastTransitionTime: now },
            ],
          },
        },
      },
      mergePatch,
    );
    const list = await viewer.json<{ items: Record<string, unknown>[] }>("/api/v1/provisionings");
    const mine = list.body.items.find((p) => p.namespace === ns && p.name === "site-a");
    expect(mine).toMatchObject({
      phase: "Failed",
      ready: { status: "False", reason: "InstallFailed" },
      hosts: [{ name: "node-1", role: "master", ip: "10.9.0.11" }],
      installJob: { name: "site-a-install-0123abcd", state: "failed", message: "Job has reached the specified backoff limit" },
    });
    const hosts = await viewer.json<{ items: Record<string, unknown>[] }>("/api/v1/hosts");
    expect(hosts.body.items).toContainEqual(
      expect.objectContaining({ namespace: ns, name: "node-1", state: "provisioned", cpu: 16, ramMebibytes: 32768, ip: "10.9.0.11" }),
    );
  });
});

describe.runIf(root)("a full disk", () => {
  let small: string;
  let smallApi: RunningApi;
  let client: ApiClient;

  beforeAll(async () => {
    small = await mkdtemp(join(tmpdir(), "icn-api-small-"));
    await execa("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", small]);
    smallApi = await startTestApi(kc, ns, small, tls);
    client = new ApiClient(`https://127.0.0.1:${smallApi.port}`, tls.ca, uploader.token);
  });

  afterAll(async () => {
    await smallApi?.stop();
    if (small) {
      await execa("umount", [small], { reject: false });
      await rm(small, { recursive: true, force: true });
    }
  });

  it("refuses an upload the disk cannot hold at creation (507), naming the free space", async () => {
    const reply = await client.create({ kind: "file", name: "too-big.bin", sha256: sha256("x") }, 20 * 1024 * 1024);
    expect(reply.status).toBe(507);
    expect(reply.body).toMatch(/not enough disk space for file "too-big.bin" \(20\.0 MiB\): the upload store has 1\d\.\d MiB free/);
    expect(await readdir(join(small, "incoming"))).toEqual([]);
  });

  it("a disk that fills up during the upload: 507, the received bytes kept, resumed once there is space, nothing published before", async () => {
    const data = randomBytes(8 * 1024 * 1024);
    const created = await client.create({ kind: "file", name: "fills.bin", sha256: sha256(data) }, data.length);
    expect(created.status).toBe(201);
    const location = String(created.headers.location);
    const filler = join(small, "filler");
    await execa("dd", ["if=/dev/zero", `of=${filler}`, "bs=1M", "count=12"], { reject: false }); // someone else fills the disk
    const full = await client.patch(location, 0, data);
    expect(full.status, full.body).toBe(507);
    expect(full.body).toContain("the upload store is full");
    expect(existsSync(join(small, "published", "uploads", "fills.bin"))).toBe(false);
    await rm(filler);
    const offset = Number((await client.head(location)).headers["upload-offset"]);
    expect(offset).toBeLessThan(data.length);
    const done = await client.patch(location, offset, data.subarray(offset));
    expect(done.status, done.body).toBe(200);
    expect(sha256(await readFile(join(small, "published", "uploads", "fills.bin")))).toBe(sha256(data));
  });
});
