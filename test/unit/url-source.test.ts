/**
 * The url source against a real HTTP server on 127.0.0.1: success, digest
 * mismatch, a connection cut midway (resumed with Range, or restarted when the
 * server ignores Range), a server that always breaks off, and 404.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { UserError } from "../../builder/errors.js";
import type { SourceContext } from "../../builder/sources/gomod.js";
import { UrlArtifact } from "../../builder/sources/schema.js";
import { downloadsDir, ensureUrlFile } from "../../builder/sources/url.js";

const body = randomBytes(3 * 1024 * 1024 + 123);
const digest = createHash("sha256").update(body).digest("hex");

type Mode = "ok" | "cut-once-range" | "cut-once-norange" | "cut-always";
let mode: Mode = "ok";
let requests: { range?: string }[] = [];
let server: Server;
let base: string;
let root: string;
let store: ContentStore;
const lines: string[] = [];
const ctx = (): SourceContext => ({ baseDir: root, store, log: (scope, message) => void lines.push(`${scope}: ${message}`) });

function handler(req: IncomingMessage, res: ServerResponse): void {
  requests.push({ range: req.headers.range });
  if (req.url !== "/kube-apiserver" && req.url !== "/other") {
    res.writeHead(404).end("not found");
    return;
  }
  const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
  const honourRange = mode === "cut-once-range" || mode === "ok";
  const start = range && honourRange ? Number(range[1]) : 0;
  const cut = mode === "cut-always" || ((mode === "cut-once-range" || mode === "cut-once-norange") && requests.length === 1);
  const headers: Record<string, string | number> = {
    "content-type": "application/octet-stream",
    "content-length": body.length - start,
    "accept-ranges": honourRange ? "bytes" : "none",
  };
  if (start > 0) res.writeHead(206, { ...headers, "content-range": `bytes ${start}-${body.length - 1}/${body.length}` });
  else res.writeHead(200, headers);
  const rest = body.subarray(start);
  if (cut) {
    // Send about a third, then drop the connection mid-body.
    res.write(rest.subarray(0, Math.floor(rest.length / 3)), () => setTimeout(() => res.socket?.destroy(), 20));
  } else {
    res.end(rest);
  }
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-url-test-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await rm(root, { recursive: true, force: true });
});

beforeEach(async () => {
  mode = "ok";
  requests = [];
  lines.length = 0;
  await rm(join(root, "cache"), { recursive: true, force: true });
  store = new ContentStore();
});

const entry = (overrides: Partial<UrlArtifact> = {}) =>
  UrlArtifact.parse({ source: "url", url: `${base}/kube-apiserver`, sha256: digest, version: "v1.37.1", ...overrides });

async function leftovers(): Promise<string[]> {
  return readdir(downloadsDir()).catch(() => []);
}

describe("url source", () => {
  it("downloads, verifies, stores as executable, then hits the cache", async () => {
    const result = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect(result).toMatchObject({ status: "downloaded", sha256: digest, size: body.length, source: "url", version: "v1.37.1" });
    expect(result.path).toBe(store.pathOf(digest));
    expect((await readFile(result.path)).equals(body)).toBe(true);
    expect((await stat(result.path)).mode & 0o111).toBe(0o111);
    expect(await leftovers()).toEqual([]);

    const again = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect(again.status).toBe("cached");
    expect(requests).toHaveLength(1);
  });

  it("rejects a digest mismatch, naming artifact, expected and actual digest, and caches nothing", async () => {
    const wrong = "0".repeat(64);
    const error = await ensureUrlFile("kube-apiserver", entry({ sha256: wrong }), ctx()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toBe(`kube-apiserver: sha256 mismatch for ${base}/kube-apiserver: expected ${wrong}, got ${digest}`);
    expect((error as UserError).hint).toMatch(/nothing was cached/);
    expect(await store.has(wrong)).toBe(false);
    expect(await store.has(digest)).toBe(false);
    expect(await leftovers()).toEqual([]);
  });

  it("resumes an interrupted download with a Range request", async () => {
    mode = "cut-once-range";
    const result = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect(result.status).toBe("downloaded");
    expect((await readFile(result.path)).equals(body)).toBe(true);
    expect(requests).toHaveLength(2);
    expect(requests[0]!.range).toBeUndefined();
    expect(requests[1]!.range).toMatch(/^bytes=\d+-$/);
    expect(Number(/\d+/.exec(requests[1]!.range!)![0])).toBeGreaterThan(0);
    expect(lines.some((l) => /connection lost .*resuming/.test(l))).toBe(true);
    expect(await leftovers()).toEqual([]);
  });

  it("restarts cleanly when the server ignores the Range request", async () => {
    mode = "cut-once-norange";
    const result = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect((await readFile(result.path)).equals(body)).toBe(true);
    expect(requests).toHaveLength(2);
    expect(lines.some((l) => /does not support resuming.*restarting from zero/.test(l))).toBe(true);
  });

  it("gives up on a server that always breaks off, keeping the partial file out of the store", async () => {
    mode = "cut-always";
    const error = await ensureUrlFile("kube-apiserver", entry(), ctx(), { attempts: 3 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toMatch(/^kube-apiserver: download of .* kept breaking off \(3 attempts/);
    expect(requests).toHaveLength(3);
    expect(await store.has(digest)).toBe(false);
    // The partial download stays, under the downloads directory only, for the next run to resume.
    expect(await leftovers()).toEqual([`${digest}.partial`]);
    mode = "ok";
    const result = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect((await readFile(result.path)).equals(body)).toBe(true);
    expect(requests.at(-1)!.range).toMatch(/^bytes=[1-9]\d*-$/);
  });

  it("reports HTTP errors with the artifact and URL", async () => {
    const error = await ensureUrlFile("kube-apiserver", entry({ url: `${base}/missing` }), ctx()).catch((e: unknown) => e);
    expect((error as UserError).message).toBe(`kube-apiserver: download of ${base}/missing failed: HTTP 404 Not Found`);
  });

  it("re-downloads a corrupted cache entry and says so", async () => {
    const first = await ensureUrlFile("kube-apiserver", entry(), ctx());
    await rm(first.path);
    await import("node:fs/promises").then((fs) => fs.writeFile(first.path, "garbage"));
    const second = await ensureUrlFile("kube-apiserver", entry(), ctx());
    expect(second.status).toBe("downloaded");
    expect(second.repaired).toMatch(/cache entry for kube-apiserver is corrupted/);
  });
});
