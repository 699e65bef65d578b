/**
 * gosrc artifacts (builder/sources/gosrc.ts): a Go program built from a pinned source
 * archive served on 127.0.0.1, with the archive's own go.mod; cached by its inputs; a
 * wrong archive digest builds nothing. The archive's files for image and chart recipes
 * (`module:<entry>:<path>`, pinnedModuleDir) come from the same verified archive.
 */
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import { access, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ContentStore } from "../../builder/cache.js";
import { UserError } from "../../builder/errors.js";
import type { SourceContext } from "../../builder/sources/gomod.js";
import { ensureGoSrcBinary } from "../../builder/sources/gosrc.js";
import { pinnedModuleDir } from "../../builder/sources/index.js";
import { GoSrcArtifact } from "../../builder/sources/schema.js";

let root: string;
let server: Server;
let url: string;
let archiveSha: string;
const lines: string[] = [];
const ctx = (): SourceContext => ({ baseDir: root, store: new ContentStore(), log: (scope, message) => void lines.push(`${scope}: ${message}`) });

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-gosrc-test-"));
  process.env.ICN_BOOTSTRAP_CACHE = join(root, "cache");
  const src = join(root, "hello-1.0.0");
  await mkdir(join(src, "cmd/hello"), { recursive: true });
  await writeFile(join(src, "go.mod"), "module example.org/hello\n\ngo 1.22\n");
  await writeFile(join(src, "cmd/hello/main.go"), 'package main\n\nimport "fmt"\n\nvar Version = "dev"\n\nfunc main() { fmt.Println("hello", Version) }\n');
  const archive = join(root, "hello-1.0.0.tar.gz");
  await execa("sh", ["-c", `tar --sort=name --mtime=@0 --owner=0 --group=0 -C ${root} -cf - hello-1.0.0 | gzip -n > ${archive}`]);
  const bytes = await readFile(archive);
  archiveSha = createHash("sha256").update(bytes).digest("hex");
  server = createServer((req, res) =>
    req.url === "/hello-1.0.0.tar.gz" ? res.writeHead(200, { "content-length": bytes.length }).end(bytes) : res.writeHead(404).end(),
  );
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hello-1.0.0.tar.gz`;
});

afterAll(async () => {
  await new Promise((r) => server.close(r));
  await rm(root, { recursive: true, force: true });
});

const entry = (sha256 = archiveSha) =>
  GoSrcArtifact.parse({ source: "gosrc", url, sha256, version: "v1.0.0", mod: "mod", binaries: { hello: "./cmd/hello" }, ldflags: ["-X main.Version=v1.0.0"] });

describe("gosrc artifacts", () => {
  it("builds the program from the pinned archive with its own go.mod and the entry's ldflags, then hits the cache", async () => {
    const built = await ensureGoSrcBinary("hello", "hello-src", entry(), "./cmd/hello", ctx());
    expect(built).toMatchObject({ source: "gosrc", status: "built", version: "v1.0.0" });
    expect((await execa(built.path)).stdout).toBe("hello v1.0.0");
    const again = await ensureGoSrcBinary("hello", "hello-src", entry(), "./cmd/hello", ctx());
    expect(again).toMatchObject({ status: "cached", sha256: built.sha256 });
  }, 120_000);

  it("builds nothing from an archive whose sha256 is not the pinned one", async () => {
    const error = await ensureGoSrcBinary("hello", "hello-src", entry("2".repeat(64)), "./cmd/hello", ctx()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toContain(`sha256 mismatch for ${url}`);
  });

  it("gives recipes the files of the pinned archive, extracted once into the cache; none from an archive of another sha256", async () => {
    const lock = join(root, "lock.yaml");
    await writeFile(lock, yaml.dump({ artifacts: { "hello-src": entry() } }));
    const tree = await pinnedModuleDir("hello-src", "a test recipe", lock);
    expect(tree).toMatchObject({ dir: join(root, "cache", "gosrc-trees", archiveSha), version: "v1.0.0" });
    expect(await readFile(join(tree.dir, "cmd/hello/main.go"), "utf8")).toContain("func main()");
    expect((await pinnedModuleDir("hello-src", "a test recipe", lock)).dir).toBe(tree.dir);

    const wrong = "3".repeat(64);
    const badLock = join(root, "bad-lock.yaml");
    await writeFile(badLock, yaml.dump({ artifacts: { "hello-src": entry(wrong) } }));
    const error = await pinnedModuleDir("hello-src", "a test recipe", badLock).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UserError);
    expect((error as UserError).message).toContain(`sha256 mismatch for ${url}`);
    await expect(access(join(root, "cache", "gosrc-trees", wrong))).rejects.toThrow();
  });
});
