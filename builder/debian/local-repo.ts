/**
 * A throwaway apt repository made of exactly the pinned files (from the cache, each
 * re-hashed), indexed by apt-ftparchive and served on 127.0.0.1 for the length of one
 * mmdebstrap run. apt still resolves dependencies, but against nothing except the lock,
 * so the installed set is the lock by construction.
 */
import { createReadStream } from "node:fs";
import { copyFile, link, mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { basename, join, normalize } from "node:path";
import { execa } from "execa";
import { cacheRoot, ContentStore } from "../cache.js";
import type { PinnedPackage } from "./schema.js";

/** `suite` names the repository (Suite/Codename): mmdebstrap picks the Essential set by it. */
export async function withLocalRepo<T>(
  suite: string,
  packages: Record<string, PinnedPackage>,
  use: (sourcesLine: string) => Promise<T>,
  store = new ContentStore(),
): Promise<T> {
  const parent = join(cacheRoot(), "debian-repos");
  await mkdir(parent, { recursive: true });
  const dir = await mkdtemp(join(parent, "repo-"));
  let server: Server | undefined;
  try {
    await mkdir(join(dir, "pool"));
    for (const [name, pin] of Object.entries(packages)) {
      const file = await store.get(pin.sha256, `${name} ${pin.version}`);
      if (!file) throw new Error(`${name} ${pin.version} is not in the cache: the build fetches every pinned file before its stages (builder/debian/fetch.ts)`);
      const target = join(dir, "pool", basename(pin.filename));
      await link(file, target).catch(() => copyFile(file, target));
    }
    const { stdout: index } = await execa("apt-ftparchive", ["packages", "pool"], { cwd: dir, maxBuffer: 256 * 1024 * 1024 });
    await writeFile(join(dir, "Packages"), index);
    const { stdout: release } = await execa(
      "apt-ftparchive",
      ["-o", `APT::FTPArchive::Release::Suite=${suite}`, "-o", `APT::FTPArchive::Release::Codename=${suite}`, "release", "."],
      { cwd: dir },
    );
    await writeFile(join(dir, "Release"), release);
    server = await serve(dir);
    const { port } = server.address() as AddressInfo;
    // Files verified against the lock's sha256 just above; the repository itself needs no signature.
    return await use(`deb [trusted=yes] http://127.0.0.1:${port}/ ./`);
  } finally {
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    await rm(dir, { recursive: true, force: true });
  }
}

/** A read-only static server for the repository directory, on loopback only. */
function serve(root: string): Promise<Server> {
  const server = createServer(async (request, response) => {
    const path = normalize(decodeURIComponent((request.url ?? "/").split("?")[0]!)).replace(/^(\.\.[/\\])+/, "");
    const file = join(root, path);
    const info = await stat(file).catch(() => undefined);
    if ((request.method !== "GET" && request.method !== "HEAD") || !file.startsWith(root) || !info?.isFile()) {
      response.writeHead(request.method === "GET" || request.method === "HEAD" ? 404 : 405).end();
      return;
    }
    response.writeHead(200, { "content-length": info.size });
    if (request.method === "HEAD") response.end();
    else createReadStream(file).pipe(response);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}
