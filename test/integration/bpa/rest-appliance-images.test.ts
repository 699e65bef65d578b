/**
 * What an upgrade of the appliance reads (kind appliance-image) is an administrator's to
 * upload: with the real server and the real kube-apiserver, an uploader's token (and one
 * granted update on uploads) is refused with 403 naming the ClusterRole to bind, before a
 * byte is stored; a token bound to bpa-api-appliance-admin uploads, and the file lands
 * with its .sha256 in the store's appliance-images/, outside the tree the file server
 * serves. Only the build's outputs an upgrade reads are taken as names.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UploadRecord } from "../../../common/uploads.js";
import { clients, kubeConfig } from "./helpers.js";
import { sha256, startApiFixture, uploaderClient, type ApiClient, type ApiFixture } from "./rest-helpers.js";

const kc = kubeConfig();
const c = clients(kc);
let fixture: ApiFixture;
let uploader: ApiClient;
let replacer: ApiClient;
let operator: ApiClient;
const state = (...parts: string[]) => join(fixture.work, "state", ...parts);

beforeAll(async () => {
  fixture = await startApiFixture(kc, c, "rest-appliance");
  uploader = await uploaderClient(c, fixture, "uploader");
  replacer = await uploaderClient(c, fixture, "replacer", true);
  operator = await uploaderClient(c, fixture, "operator", false, "bpa-api-appliance-admin");
}, 120_000);

afterAll(async () => {
  await fixture?.stop();
});

describe("appliance images", () => {
  it("an uploader's token, even one granted update on uploads, is refused before a byte is stored, naming the role to bind", async () => {
    for (const client of [uploader, replacer]) {
      const image = randomBytes(4096);
      const refused = await client.create({ kind: "appliance-image", name: "2026.12/icn-bootstrap.img", sha256: sha256(image) }, image.length);
      expect(refused.status, refused.body).toBe(403);
      expect(refused.body).toContain("may not create applianceimages.bpa.akraino.org in namespace");
      expect(refused.body).toContain("--clusterrole=bpa-api-appliance-admin");
    }
    expect(await readdir(state("incoming"))).toEqual([]);
    expect(await readdir(state("appliance-images"))).toEqual([]);
  });

  it("an administrator's binding uploads it: stored with its checksum outside what the file server serves", async () => {
    const image = randomBytes(64 * 1024);
    const reply = await operator.upload("appliance-image", "2026.12/icn-bootstrap.img", image);
    expect(reply.status, reply.body).toBe(200);
    const record = JSON.parse(reply.body) as UploadRecord;
    expect(record).toMatchObject({ kind: "appliance-image", state: "published", digest: `sha256:${sha256(image)}` });
    expect(record.path).toBeUndefined();
    expect(record.url).toBeUndefined();
    expect((await readFile(state("appliance-images", "2026.12", "icn-bootstrap.img"))).equals(image)).toBe(true);
    expect(await readFile(state("appliance-images", "2026.12", "icn-bootstrap.img.sha256"), "utf8")).toBe(`${sha256(image)}  icn-bootstrap.img\n`);
    expect(existsSync(state("published", "uploads", "2026.12"))).toBe(false);

    const bundle = Buffer.from('{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}\n');
    expect((await operator.upload("appliance-image", "2026.12/icn-bootstrap.img.sigstore.json", bundle)).status).toBe(200);
    // A file of the same name is another tree: the appliance image is not what a file upload replaces.
    expect((await uploader.upload("file", "2026.12/icn-bootstrap.img", randomBytes(10))).status).toBe(200);
    expect((await readFile(state("appliance-images", "2026.12", "icn-bootstrap.img"))).equals(image)).toBe(true);
  });

  it("takes only the names of the build's outputs an upgrade reads, and relative paths", async () => {
    for (const [name, problem] of [
      ["2026.12/notes.txt", "is not one of the build's outputs an upgrade reads: end it in .img, .qcow2, .report.json, .cdx.json, .sigstore.json"],
      ["../icn-bootstrap.img", "is not a relative file path"],
      [".hidden/icn-bootstrap.img", "is not a relative file path"],
    ] as const) {
      const refused = await operator.create({ kind: "appliance-image", name, sha256: sha256("x") }, 1);
      expect(refused.status, `${name}: ${refused.body}`).toBe(400);
      expect(refused.body).toContain(problem);
    }
  });
});
