/**
 * A small Debian archive made by the test: real .deb files (dpkg-deb), indexes by
 * apt-ftparchive, an InRelease signed with a throwaway gpg key, served on 127.0.0.1.
 * It can move on like the real one (a new version in the index, the old file left in
 * the pool), lose files, and have a file's bytes changed.
 */
import { createReadStream } from "node:fs";
import { copyFile, link, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import { gzipSync } from "node:zlib";
import { execa } from "execa";

export interface ToyPackage {
  name: string;
  version: string;
  depends?: string;
  /** Text of /usr/share/<name>/VERSION inside the package. */
  payload?: string;
}

export interface BuiltDeb extends ToyPackage {
  /** Pool path relative to the archive root. */
  filename: string;
}

/** A throwaway signing key and the keyring that verifies it. */
export class TestKey {
  private constructor(
    readonly home: string,
    readonly keyring: string,
  ) {}

  static async create(): Promise<TestKey> {
    const home = await mkdtemp(join(tmpdir(), "icn-gpg-"));
    const env = { GNUPGHOME: home };
    await execa(
      "gpg",
      ["--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", "ICN test archive <archive@test.invalid>", "ed25519", "sign", "never"],
      { env },
    );
    const { stdout } = await execa("gpg", ["--batch", "--export"], { env, encoding: "buffer" });
    const keyring = join(home, "archive-keyring.gpg");
    await writeFile(keyring, stdout);
    return new TestKey(home, keyring);
  }

  async clearsign(input: string, output: string): Promise<void> {
    await execa("gpg", ["--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "", "--clearsign", "-o", output, input], {
      env: { GNUPGHOME: this.home },
    });
  }

  async dispose(): Promise<void> {
    await execa("gpgconf", ["--kill", "gpg-agent"], { env: { GNUPGHOME: this.home }, reject: false });
    await rm(this.home, { recursive: true, force: true });
  }
}

export async function buildDeb(workDir: string, pkg: ToyPackage): Promise<string> {
  const root = await mkdtemp(join(workDir, "deb-"));
  await mkdir(join(root, "DEBIAN"));
  await mkdir(join(root, "usr/share", pkg.name), { recursive: true });
  await writeFile(join(root, "usr/share", pkg.name, "VERSION"), pkg.payload ?? `${pkg.name} ${pkg.version}\n`);
  const control = [
    `Package: ${pkg.name}`,
    `Version: ${pkg.version}`,
    "Architecture: all",
    "Maintainer: ICN tests <tests@test.invalid>",
    "Priority: optional",
    "Section: misc",
    ...(pkg.depends ? [`Depends: ${pkg.depends}`] : []),
    `Description: test package ${pkg.name}`,
    "",
  ].join("\n");
  await writeFile(join(root, "DEBIAN/control"), control);
  const out = join(workDir, `${pkg.name}_${pkg.version}_all.deb`);
  await execa("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", root, out]);
  await rm(root, { recursive: true, force: true });
  return out;
}

export class ToyArchive {
  private server?: Server;
  url = "";

  constructor(
    readonly root: string,
    private readonly key: TestKey,
    /** Pool prefix: `pool/main` (or `pool/updates/main` for a security archive). */
    private readonly poolPrefix = "pool/main",
  ) {}

  poolPath(pkg: ToyPackage): string {
    return `${this.poolPrefix}/${pkg.name[0]}/${pkg.name}/${pkg.name}_${pkg.version}_all.deb`;
  }

  /** Puts the .deb files into the pool (old ones stay) and publishes exactly `packages` in the suite's signed index. */
  async publish(suite: string, packages: ToyPackage[], workDir: string): Promise<BuiltDeb[]> {
    const built: BuiltDeb[] = [];
    const stage = await mkdtemp(join(workDir, "index-"));
    for (const pkg of packages) {
      const filename = this.poolPath(pkg);
      const target = join(this.root, filename);
      if (!(await stat(target).catch(() => undefined))) {
        await mkdir(dirname(target), { recursive: true });
        await copyFile(await buildDeb(workDir, pkg), target);
      }
      await mkdir(dirname(join(stage, filename)), { recursive: true });
      await link(target, join(stage, filename));
      built.push({ ...pkg, filename });
    }
    const { stdout: packagesText } = await execa("apt-ftparchive", ["packages", "pool"], { cwd: stage, reject: false });
    await rm(stage, { recursive: true, force: true });
    const dists = join(this.root, "dists", suite);
    await mkdir(join(dists, "main/binary-amd64"), { recursive: true });
    await writeFile(join(dists, "main/binary-amd64/Packages"), packagesText ? `${packagesText}\n` : "");
    await writeFile(join(dists, "main/binary-amd64/Packages.gz"), gzipSync(packagesText ? `${packagesText}\n` : ""));
    const { stdout: release } = await execa(
      "apt-ftparchive",
      [
        "-o",
        `APT::FTPArchive::Release::Suite=${suite}`,
        "-o",
        `APT::FTPArchive::Release::Codename=${suite}`,
        "-o",
        "APT::FTPArchive::Release::Architectures=amd64",
        "-o",
        "APT::FTPArchive::Release::Components=main",
        "release",
        ".",
      ],
      { cwd: dists },
    );
    await writeFile(join(dists, "Release"), `${release}\n`);
    await this.key.clearsign(join(dists, "Release"), join(dists, "InRelease"));
    return built;
  }

  async start(): Promise<void> {
    this.server = await serveDir(this.root, (path) => path);
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await closeServer(this.server);
    this.server = undefined;
  }
}

/** The snapshot service stand-in: `/<archive>/<timestamp>/<pool path>` from `<root>/<archive>/<pool path>`, whatever the timestamp. */
export class SnapshotStandIn {
  private server?: Server;
  url = "";
  readonly requests: string[] = [];

  constructor(readonly root: string) {}

  async keep(archiveName: string, filename: string, file: string): Promise<void> {
    const target = join(this.root, archiveName, filename);
    await mkdir(dirname(target), { recursive: true });
    await copyFile(file, target);
  }

  async start(): Promise<void> {
    this.server = await serveDir(this.root, (path) => {
      this.requests.push(path);
      const match = /^\/([^/]+)\/(\d{8}T\d{6}Z)\/(.+)$/.exec(path);
      return match ? `/${match[1]}/${match[3]}` : undefined;
    });
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await closeServer(this.server);
  }
}

function serveDir(root: string, map: (path: string) => string | undefined): Promise<Server> {
  const server = createServer(async (request, response) => {
    const mapped = map(decodeURIComponent((request.url ?? "/").split("?")[0]!));
    const file = mapped ? join(root, normalize(mapped)) : undefined;
    const info = file?.startsWith(root) ? await stat(file).catch(() => undefined) : undefined;
    if (!file || !info?.isFile()) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { "content-length": info.size });
    if (request.method === "HEAD") response.end();
    else createReadStream(file).pipe(response);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function closeServer(server: Server | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (!server) return resolve();
    server.closeAllConnections();
    server.close(() => resolve());
  });
}

export async function readInstalledVersion(root: string, name: string): Promise<string> {
  return (await readFile(join(root, "usr/share", name, "VERSION"), "utf8")).trim();
}
