/**
 * A published name belongs to whoever published it, and the build's names to nobody
 * (issue 48), with the real server, the real kube-apiserver and two (three) uploaders with
 * tokens of their own: a second uploader's re-upload of a file or an OS image is refused
 * (409 naming the first) before a byte is stored, the first replaces it; a user an
 * administrator granted `update uploads` replaces another's; the build's OS image and the
 * addons catalog's charts are refused to everyone; a name the build announced while an
 * upload was under way is refused when it would be published.
 * Container images and charts in the registry (shipped tags, a chart race): rest-registry.test.ts.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { V1ConfigMap } from "@kubernetes/client-node";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addonsCatalogManifest } from "../../../common/addons-catalog.js";
import { builtOsImageManifest } from "../../../common/os-images.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import { sha256, startApiFixture, uploaderClient, type ApiClient, type ApiFixture } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let fixture: ApiFixture;
let alice: ApiClient;
let bob: ApiClient;
let admin: ApiClient;
const user = (name: string) => `system:serviceaccount:${fixture.ns}:${name}`;
const qcow2 = (bytes = 4096) => Buffer.concat([Buffer.from([0x51, 0x46, 0x49, 0xfb, 0, 0, 0, 3]), randomBytes(bytes)]);
const published = (...parts: string[]) => join(fixture.work, "state", "published", ...parts);
const incoming = () => readdir(join(fixture.work, "state", "incoming"));

beforeAll(async () => {
  fixture = await startApiFixture(kc, c, "rest-owners");
  alice = await uploaderClient(c, fixture, "alice");
  bob = await uploaderClient(c, fixture, "bob");
  admin = await uploaderClient(c, fixture, "admin", true);
}, 120_000);

afterAll(async () => {
  await fixture?.stop();
});

async function records(name: string): Promise<UploadRecord[]> {
  return (await alice.json<{ items: UploadRecord[] }>("/api/v1/uploads")).body.items.filter((r) => r.name === name);
}

async function announceBuiltOsImage(name: string, recipe: string): Promise<void> {
  const image = { name, path: `/os-images/${name}`, sha256: "b".repeat(64), size: 1000, format: "qcow2" as const };
  await c.core.createNamespacedConfigMap({ namespace: fixture.ns, body: yaml.load(builtOsImageManifest(image, recipe, fixture.ns)) as V1ConfigMap });
}

describe("a published name belongs to whoever published it", () => {
  it("a file: another uploader's re-upload is refused at creation, naming the first and the fix; the first replaces it", async () => {
    const first = randomBytes(2000);
    expect((await alice.upload("file", "shared/tool.bin", first)).status).toBe(200);

    const theirs = randomBytes(3000);
    const refused = await bob.create({ kind: "file", name: "shared/tool.bin", sha256: sha256(theirs) }, theirs.length);
    expect(refused.status, refused.body).toBe(409);
    expect(refused.body).toContain(`file "shared/tool.bin" was published by ${user("alice")} (upload `);
    expect(refused.body).toContain(`only ${user("alice")} may replace it`);
    expect(refused.body).toContain(
      `Upload under another name, or ask an administrator for the right to replace others' uploads (RBAC verb update on uploads.bpa.akraino.org in namespace ${fixture.ns})`,
    );
    expect(await incoming()).toEqual([]);
    expect((await readFile(published("uploads", "shared/tool.bin"))).equals(first)).toBe(true);

    const second = randomBytes(2500);
    expect((await alice.upload("file", "shared/tool.bin", second)).status).toBe(200);
    expect((await readFile(published("uploads", "shared/tool.bin"))).equals(second)).toBe(true);
    expect((await records("shared/tool.bin")).map((r) => r.state).sort()).toEqual(["published", "replaced"]);
  });

  it("an OS image and its checksum: the same, and its record gives the checksum as BareMetalHost spec.image takes it", async () => {
    const image = qcow2();
    const reply = await alice.upload("os-image", "site-os.qcow2", image);
    expect(reply.status, reply.body).toBe(200);
    expect(JSON.parse(reply.body)).toMatchObject({ checksum: sha256(image), checksumType: "sha256", checksumPath: "/os-images/site-os.qcow2.sha256sum" });

    const refused = await bob.upload("os-image", "site-os.qcow2", qcow2());
    expect(refused.status).toBe(409);
    expect(refused.body).toContain(`os-image "site-os.qcow2" was published by ${user("alice")}`);
    expect(await readFile(published("os-images", "site-os.qcow2.sha256sum"), "utf8")).toBe(`${sha256(image)}  site-os.qcow2\n`);
  });

  it("a user an administrator granted update on uploads replaces another's upload, and then owns the name", async () => {
    expect((await alice.upload("file", "granted.bin", randomBytes(100))).status).toBe(200);
    const replacement = randomBytes(200);
    expect((await admin.upload("file", "granted.bin", replacement)).status).toBe(200);
    expect((await readFile(published("uploads", "granted.bin"))).equals(replacement)).toBe(true);
    const refused = await alice.upload("file", "granted.bin", randomBytes(300));
    expect(refused.status).toBe(409);
    expect(refused.body).toContain(`file "granted.bin" was published by ${user("admin")}`);
  });
});

describe("the build's names belong to nobody", () => {
  it("refuses the build's OS image name to every uploader, even one granted update on uploads, before a byte is stored", async () => {
    await announceBuiltOsImage("debian-13-compute-node.qcow2", "compute-node");
    for (const client of [alice, admin]) {
      const refused = await client.create({ kind: "os-image", name: "debian-13-compute-node.qcow2", sha256: sha256("x") }, 1000);
      expect(refused.status, refused.body).toBe(409);
      expect(refused.body).toContain('os-image "debian-13-compute-node.qcow2" belongs to the build: an OS image of the build');
      expect(refused.body).toContain("Nobody may replace what the appliance ships: upload under another name");
    }
    expect(await incoming()).toEqual([]);
    expect(existsSync(published("os-images", "debian-13-compute-node.qcow2"))).toBe(false);
  });

  it("refuses a name the build announced while the upload was under way, when it would be published: nothing published", async () => {
    const image = qcow2();
    const created = await alice.create({ kind: "os-image", name: "late.qcow2", sha256: sha256(image) }, image.length);
    expect(created.status).toBe(201);
    await announceBuiltOsImage("late.qcow2", "late");
    const refused = await alice.patch(String(created.headers.location), 0, image);
    expect(refused.status, refused.body).toBe(409);
    expect(refused.body).toContain('os-image "late.qcow2" belongs to the build');
    expect(existsSync(published("os-images", "late.qcow2"))).toBe(false);
    expect(existsSync(published("os-images", "late.qcow2.sha256sum"))).toBe(false);
    expect(await records("late.qcow2")).toEqual([expect.objectContaining({ state: "rejected" })]);
  });

  it("refuses the addons catalog's chart repositories, as charts and as container images, at creation", async () => {
    const catalog = [
      { name: "multus", chart: "oci://bootstrap.icn:5000/charts/multus", version: "4.3.0", namespace: "kube-system", default: true },
      { name: "node-feature-discovery", chart: "oci://bootstrap.icn:5000/charts/node-feature-discovery", version: "0.19.0", namespace: "nfd", default: false },
    ];
    await c.core.createNamespacedConfigMap({ namespace: fixture.ns, body: yaml.load(addonsCatalogManifest(catalog, fixture.ns)) as V1ConfigMap });
    for (const [kind, name] of [
      ["chart", "charts/multus:4.3.0"],
      ["chart", "charts/multus:9.9.9"],
      ["chart", "charts/multus"],
      ["container-image", "charts/node-feature-discovery:0.19.0"],
    ] as const) {
      const refused = await admin.create({ kind, name, sha256: sha256("x") }, 1000);
      expect(refused.status, `${kind} ${name}: ${refused.body}`).toBe(409);
      expect(refused.body).toContain(
        `${kind} "${name}" belongs to the build: the chart of addon ${name.includes("multus") ? "multus" : "node-feature-discovery"} in the appliance's addons catalog`,
      );
    }
    expect(await incoming()).toEqual([]);
  });
});

describe("GET /api/v1/os-images", () => {
  it("gives the checksum as the value spec.image.checksum takes, with checksumType, and the checksum file's URL beside it", async () => {
    const listed = await alice.json<{ items: Record<string, unknown>[] }>("/api/v1/os-images");
    expect(listed.status).toBe(200);
    const uploaded = listed.body.items.find((i) => i.name === "site-os.qcow2")!;
    expect(uploaded).toMatchObject({ checksumType: "sha256", checksumUrl: "http://127.0.0.1:8080/os-images/site-os.qcow2.sha256sum" });
    expect(uploaded.checksum).toMatch(/^[0-9a-f]{64}$/);
    expect(uploaded.checksum).toBe(uploaded.sha256);
    expect(listed.body.items.find((i) => i.name === "debian-13-compute-node.qcow2")).toMatchObject({
      source: "build",
      checksum: "b".repeat(64),
      checksumType: "sha256",
      checksumUrl: "http://127.0.0.1:8080/os-images/debian-13-compute-node.qcow2.sha256sum",
    });
  });
});
