/**
 * The REST API against attacks by its own users (issue 32), with the real server and the
 * real kube-apiserver: an uploader reaching another's upload through a URL whose path and
 * query disagree on the id; tokens made for another audience than this API's; a file name
 * that collides with the directory of another's checksum file; container images still
 * uploading whose unpacking the disk budget forgot.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect } from "node:tls";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRegistry } from "../../../builder/registry/server.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import type { UploadRecord } from "../../../common/uploads.js";
import {
  ApiClient,
  sha256,
  startApiFixture,
  startTestApi,
  tokenFor,
  uploaderClient as uploaderClientOf,
  createRegistryAccess,
  type ApiFixture,
  type Reply,
} from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let fixture: ApiFixture;

beforeAll(async () => {
  fixture = await startApiFixture(kc, c, "rest-security");
}, 120_000);

afterAll(async () => {
  await fixture?.stop();
});

/** A request with the target written as given (no URL parsing on the way), as an attacker's client sends it. */
function rawRequest(method: string, target: string, headers: Record<string, string | number>, body = Buffer.alloc(0)): Promise<Reply> {
  const { port } = new URL(fixture.url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: Number(port), ca: fixture.tls.ca, servername: "localhost" }, () => {
      const lines = [
        `${method} ${target} HTTP/1.1`,
        `host: 127.0.0.1:${port}`,
        "connection: close",
        `content-length: ${body.length}`,
        ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
      ];
      socket.write(Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`), body]));
    });
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const [head = "", ...rest] = text.split("\r\n\r\n");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      const replyHeaders: Record<string, string> = {};
      for (const line of head.split("\r\n").slice(1)) {
        const colon = line.indexOf(":");
        replyHeaders[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ status, headers: replyHeaders, body: rest.join("\r\n\r\n") });
    });
  });
}

const uploaderClient = (name: string) => uploaderClientOf(c, fixture, name);

describe("one uploader cannot reach another's upload", () => {
  it("HEAD, PATCH and DELETE with the attacker's id in the path and the victim's elsewhere in the URL: 403/404, the victim's upload untouched", async () => {
    const victim = await uploaderClient("victim");
    const attacker = await uploaderClient("attacker");
    const victimData = randomBytes(64 * 1024);
    const created = await victim.create({ kind: "file", name: "victim.bin", sha256: sha256(victimData) }, victimData.length);
    expect(created.status).toBe(201);
    const victimLocation = String(created.headers.location);
    const victimId = victimLocation.split("/").pop()!;
    const firstPart = victimData.subarray(0, 1000);
    expect((await victim.patch(victimLocation, 0, firstPart)).status).toBe(204);
    const mine = await attacker.create({ kind: "file", name: "attacker.bin", sha256: sha256("x") }, 5000);
    expect(mine.status).toBe(201);
    const mineLocation = String(mine.headers.location);

    const { port } = new URL(fixture.url);
    const targets = [
      `${mineLocation}?x=/${victimId}`,
      `${mineLocation}?/${victimId}`,
      `${mineLocation};/${victimId}`,
      `${mineLocation}%2F${victimId}`,
      `${mineLocation}%2f..%2f${victimId}`,
      `${mineLocation}/${victimId}`,
      `${mineLocation}//${victimId}`,
      `${mineLocation}#/${victimId}`,
      `${mineLocation}/?/${victimId}`,
      `/api/v1/uploads//${victimId}`,
      `https://127.0.0.1:${port}${mineLocation}?x=/${victimId}`,
    ];
    const tus = { authorization: `Bearer ${attacker.token}`, "tus-resumable": "1.0.0" };
    const evil = Buffer.alloc(1000, "E");
    for (const target of targets) {
      const head = await rawRequest("HEAD", target, tus);
      expect(head.status, `HEAD ${target}`).toBeOneOf([403, 404]);
      expect(head.headers["upload-offset"], `HEAD ${target}`).toBeUndefined();
      const patch = await rawRequest("PATCH", target, { ...tus, "upload-offset": firstPart.length, "content-type": "application/offset+octet-stream" }, evil);
      expect(patch.status, `PATCH ${target}: ${patch.body}`).toBeOneOf([403, 404]);
      const del = await rawRequest("DELETE", target, tus);
      expect(del.status, `DELETE ${target}: ${del.body}`).toBeOneOf([403, 404]);
    }

    // The victim's upload is as it was: listed, its offset and bytes unchanged; it finishes with the victim's bytes.
    const victimHead = await victim.head(victimLocation);
    expect(victimHead.status).toBe(200);
    expect(victimHead.headers["upload-offset"]).toBe(String(firstPart.length));
    expect((await readFile(join(fixture.work, "state", "incoming", victimId))).equals(firstPart)).toBe(true);
    const done = await victim.patch(victimLocation, firstPart.length, victimData.subarray(firstPart.length));
    expect(done.status, done.body).toBe(200);
    expect(sha256(await readFile(join(fixture.work, "state", "published", "uploads", "victim.bin")))).toBe(sha256(victimData));
    // The plain canonical URL still works for its owner.
    expect((await attacker.head(mineLocation)).status).toBe(200);
    expect((await attacker.send("DELETE", mineLocation, { "tus-resumable": "1.0.0" })).status).toBe(204);
  });
});

describe("tokens are bound to this API's audience", () => {
  it("refuses a token of the cluster's default audience (plain kubectl create token) or of another audience, with the command that makes a good one; takes one for icn-bpa-api", async () => {
    const plain = new ApiClient(fixture.url, fixture.tls.ca, await tokenFor(c, fixture.ns, "bpa-api-viewer", []));
    const otherAudience = new ApiClient(fixture.url, fixture.tls.ca, await tokenFor(c, fixture.ns, "bpa-api-viewer", ["vault"]));
    const bound = new ApiClient(fixture.url, fixture.tls.ca, await tokenFor(c, fixture.ns, "bpa-api-viewer", ["icn-bpa-api"]));
    for (const refused of [plain, otherAudience]) {
      const reply = await refused.send("GET", "/api/v1/uploads");
      expect(reply.status, reply.body).toBe(401);
      expect(JSON.parse(reply.body).error).toContain("kubectl create token SERVICEACCOUNT -n NAMESPACE --audience icn-bpa-api");
      expect((await refused.upload("file", "by-a-foreign-token.bin", randomBytes(100))).status).toBe(401);
    }
    expect((await bound.send("GET", "/api/v1/uploads")).status).toBe(200);
  });
});

describe("a file and the directory where another's checksum goes", () => {
  it("refuses a directory named like a checksum file (a.sha256/b) at creation, and a file whose checksum name is a directory before publishing anything", async () => {
    const uploader = new ApiClient(fixture.url, fixture.tls.ca, await tokenFor(c, fixture.ns, "bpa-api-uploader"));
    const published = (...parts: string[]) => join(fixture.work, "state", "published", "uploads", ...parts);
    const data = randomBytes(1000);
    const nested = await uploader.create({ kind: "file", name: "clash.sha256/b", sha256: sha256(data) }, data.length);
    expect(nested.status, nested.body).toBe(400);
    expect(nested.body).toContain('directory "clash.sha256" is named like the checksum file of "clash"');
    expect(existsSync(published("clash.sha256"))).toBe(false);

    // Such a directory published by an earlier version: publishing "old" is refused whole, and listed so.
    await mkdir(published("old.sha256"), { recursive: true });
    await writeFile(published("old.sha256", "b"), "earlier\n");
    const reply = await uploader.upload("file", "old", data);
    expect(reply.status, reply.body).toBe(409);
    expect(reply.body).toContain('name "old" clashes with what is published');
    expect(existsSync(published("old"))).toBe(false);
    expect(await readdir(published("old.sha256"))).toEqual(["b"]);
    const records = (await uploader.json<{ items: UploadRecord[] }>("/api/v1/uploads")).body.items;
    expect(records.find((r) => r.name === "old")).toMatchObject({ state: "rejected" });
  });
});

describe.runIf(process.getuid?.() === 0)("the disk budget of uploads in progress", () => {
  it("counts the unpacking of container images still uploading, not only their remaining bytes", async () => {
    const small = await mkdtemp(join(tmpdir(), "icn-api-budget-"));
    await execa("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", small]);
    // Whose the names are is asked of the registry before the disk: a real, empty one.
    const registry = await startRegistry(join(fixture.work, "budget-registry"));
    const env = await createRegistryAccess(c, fixture.ns, { username: "push", password: "unused", ca: fixture.tls.ca });
    const api = await startTestApi(kc, fixture.ns, small, fixture.tls, { ...env, BPA_API_REGISTRY_URL: registry.url });
    try {
      const client = new ApiClient(`https://127.0.0.1:${api.port}`, fixture.tls.ca, await tokenFor(c, fixture.ns, "bpa-api-uploader"));
      const MiB = 1024 * 1024;
      // 6 MiB, and 6 more to unpack it: 12 of the 16.
      expect((await client.create({ kind: "container-image", name: "budget/first:1", sha256: sha256("a") }, 6 * MiB)).status).toBe(201);
      // 3 + 3 more: with the first's 6 + 6 still to come, over 16.
      const second = await client.create({ kind: "container-image", name: "budget/second:1", sha256: sha256("b") }, 3 * MiB);
      expect(second.status, second.body).toBe(507);
      expect(second.body).toMatch(/uploads in progress 12\.0 MiB more/);
    } finally {
      await api.stop();
      await registry.stop();
      await execa("umount", [small], { reject: false });
      await rm(small, { recursive: true, force: true });
    }
  });
});
