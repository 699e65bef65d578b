/**
 * What an upgrade of the appliance reads (kind appliance-image) is an administrator's to
 * upload: with the real server and the real kube-apiserver, an uploader's token (and one
 * granted update on uploads) is refused with 403 naming the ClusterRole to bind, before a
 * byte is stored; a token bound to bpa-api-appliance-admin uploads, and the file lands
 * with its .sha256 in the store's appliance-images/, outside the tree the file server
 * serves. Only the build's outputs an upgrade reads are taken as names. Asking the
 * appliance to upgrade (POST /api/v1/appliance/upgrade) is the administrator's too: it
 * leaves a request for the host only when the image, its report and the report's
 * signature were all uploaded, one request at a time, and GET shows the host's state.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UploadRecord } from "../../../common/uploads.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import { sha256, startApiFixture, uploaderClient, type ApiClient, type ApiFixture } from "../../helpers/rest-suite.js";

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

  it("an upgrade is asked for by an administrator only, for an image whose report and signature were uploaded", async () => {
    const ask = (client: ApiClient, body: unknown) =>
      client.send("POST", "/api/v1/appliance/upgrade", { "content-type": "application/json" }, Buffer.from(JSON.stringify(body)));
    const refused = await ask(uploader, { image: "2026.12/icn-bootstrap.img" });
    expect(refused.status, refused.body).toBe(403);
    expect(refused.body).toContain("may not create applianceupgrades.bpa.akraino.org");
    expect((await uploader.send("GET", "/api/v1/appliance/upgrade")).status).toBe(403);

    // The image was uploaded above, its report not yet.
    const early = await ask(operator, { image: "2026.12/icn-bootstrap.img" });
    expect(early.status, early.body).toBe(409);
    expect(early.body).toContain("not uploaded as appliance-image: 2026.12/icn-bootstrap.report.json, 2026.12/icn-bootstrap.report.json.sigstore.json");
    for (const [body, problem] of [
      [{ image: "../icn-bootstrap.img" }, "must name an uploaded USB image of a build"],
      [{ image: "2026.12/icn-bootstrap.qcow2" }, "must name an uploaded USB image of a build"],
      [{}, "must name an uploaded USB image"],
    ] as const) {
      const bad = await ask(operator, body);
      expect(bad.status, bad.body).toBe(400);
      expect(bad.body).toContain(problem);
    }
    expect(existsSync(state("appliance-upgrade", "request.json"))).toBe(false);

    for (const name of ["2026.12/icn-bootstrap.report.json", "2026.12/icn-bootstrap.report.json.sigstore.json"])
      expect((await operator.upload("appliance-image", name, Buffer.from(`{"name":"${name}"}\n`))).status).toBe(200);
    const asked = await ask(operator, { image: "2026.12/icn-bootstrap.img" });
    expect(asked.status, asked.body).toBe(202);
    const request = JSON.parse(await readFile(state("appliance-upgrade", "request.json"), "utf8"));
    expect(request).toMatchObject({ image: "2026.12/icn-bootstrap.img", report: "2026.12/icn-bootstrap.report.json" });
    expect(request.requestedBy).toContain("operator");
    const again = await ask(operator, { image: "2026.12/icn-bootstrap.img" });
    expect(again.status, again.body).toBe(409);
    expect(again.body).toContain("has not started yet");

    // The host's mirror of the upgrade's state is what GET shows.
    await writeFile(state("appliance-upgrade", "state.json"), JSON.stringify({ phase: "trying", from: "a", to: "b" }));
    const shown = await operator.json<{ pending: unknown; state: { phase: string } }>("/api/v1/appliance/upgrade");
    expect(shown.status).toBe(200);
    expect(shown.body.pending).toMatchObject({ image: "2026.12/icn-bootstrap.img" });
    expect(shown.body.state.phase).toBe("trying");
    expect((await operator.send("DELETE", "/api/v1/appliance/upgrade")).status).toBe(200);
    expect(existsSync(state("appliance-upgrade", "request.json"))).toBe(false);
    const during = await ask(operator, { image: "2026.12/icn-bootstrap.img" });
    expect(during.status, during.body).toBe(409);
    expect(during.body).toContain("is trying");
  });
});
