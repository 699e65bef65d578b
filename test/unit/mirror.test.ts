/**
 * The upstream mirror of url artifacts (builder/sources/mirror.ts): a directory laid out
 * by upstream URL, served on 127.0.0.1 and tried before the real URL, with the lock's
 * sha256 deciding as always; a file the mirror lacks falls back to the URL itself.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { UserError } from "../../builder/errors.js";
import type { SourceContext } from "../../builder/sources/gomod.js";
import { MIRROR_ENV, mirroredUrl, serveDirectory } from "../../builder/sources/mirror.js";
import { UrlArtifact } from "../../builder/sources/schema.js";
import { ensureUrlFile } from "../../builder/sources/url.js";

const body = randomBytes(256 * 1024 + 7);
const digest = createHash("sha256").update(body).digest("hex");
const URL_IN_MIRROR = "https://github.example/owner/project/archive/refs/tags/v1.0.0.tar.gz";
let root: string;
let mirror: string;
let previous: string | undefined;
const lines: string[] = [];
const ctx = (): SourceContext => ({ baseDir: root, store: new ContentStore(), log: (scope, message) => void lines.push(`${scope}: ${message}`) });
const entry = (url: string, sha256 = digest) => UrlArtifact.parse({ source: "url", url, sha256, executable: false });

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-mirror-test-"));
  mirror = join(root, "mirror");
  await mkdir(join(mirror, "github.example/owner/project/archive/refs/tags"), { recursive: true });
  await writeFile(join(mirror, "github.example/owner/project/archive/refs/tags/v1.0.0.tar.gz"), body);
  previous = process.env[MIRROR_ENV];
  process.env[MIRROR_ENV] = mirror;
});

afterAll(async () => {
  if (previous === undefined) delete process.env[MIRROR_ENV];
  else process.env[MIRROR_ENV] = previous;
  await rm(root, { recursive: true, force: true });
});

beforeEach(async () => {
  lines.length = 0;
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  await rm(join(root, "cache"), { recursive: true, force: true });
});

describe("the upstream mirror", () => {
  it("maps https://host/path to <base>/host/path", () => {
    expect(mirroredUrl(URL_IN_MIRROR, "http://127.0.0.1:9")).toBe("http://127.0.0.1:9/github.example/owner/project/archive/refs/tags/v1.0.0.tar.gz");
  });

  it("serves a directory read-only on loopback with byte ranges, and nothing outside it", async () => {
    const { base } = await serveDirectory(mirror);
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const path = "/github.example/owner/project/archive/refs/tags/v1.0.0.tar.gz";
    const partial = await fetch(`${base}${path}`, { headers: { range: "bytes=1000-" } });
    expect(partial.status).toBe(206);
    expect(partial.headers.get("content-range")).toBe(`bytes 1000-${body.length - 1}/${body.length}`);
    expect(Buffer.from(await partial.arrayBuffer()).equals(body.subarray(1000))).toBe(true);
    expect((await fetch(`${base}/github.example/../../etc/passwd`)).status).toBe(404);
    expect((await fetch(`${base}${path}`, { method: "PUT", body: "x" })).status).toBe(405);
  });

  it("fetches a pinned URL from the mirror when the mirror has it, verified by the lock's sha256", async () => {
    const result = await ensureUrlFile("project", entry(URL_IN_MIRROR), ctx());
    expect(result).toMatchObject({ status: "downloaded", sha256: digest });
    expect((await readFile(result.path)).equals(body)).toBe(true);
    expect(lines.some((l) => l.includes(`fetching ${URL_IN_MIRROR} from the mirror ${mirror}`))).toBe(true);
  });

  it("still refuses a mirrored file whose sha256 is not the lock's", async () => {
    const error = await ensureUrlFile("project", entry(URL_IN_MIRROR, "1".repeat(64)), ctx()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toContain(`sha256 mismatch for ${URL_IN_MIRROR}`);
  });

  it("falls back to the URL itself for a file the mirror lacks, and says both failed", async () => {
    const missing = "https://127.0.0.1:1/owner/project/other.tar.gz";
    const error = await ensureUrlFile("other", entry(missing), ctx(), { attempts: 1 }).catch((e: unknown) => e);
    expect(lines.some((l) => l.includes(`not in the mirror; fetching ${missing}`))).toBe(true);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toMatch(
      /cannot download https:\/\/127\.0\.0\.1:1\/owner\/project\/other\.tar\.gz: .*\(and the mirror .* has no copy at http:\/\/127\.0\.0\.1:\d+\/127\.0\.0\.1:1\/owner\/project\/other\.tar\.gz\)/,
    );
  });
});
