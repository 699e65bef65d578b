/**
 * A real registry server for the build and the tests: Debian's `docker-registry`
 * (CNCF distribution 2.x) with filesystem storage, listening on a free port of the
 * given address. Stopped with stop(); its log is kept for error messages.
 */
import { createServer } from "node:net";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { UserError } from "../errors.js";
import { findTool } from "../host-tools.js";

export interface RegistryServer {
  /** host:port */
  address: string;
  url: string;
  storage: string;
  pid: number;
  stop(): Promise<void>;
  log(): Promise<string>;
}

export async function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

export function registryConfig(storage: string, listen: string, opts: { readOnly?: boolean } = {}): string {
  return [
    "version: 0.1",
    "log:",
    "  level: info",
    "  accesslog: { disabled: true }",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${storage}`,
    "  delete: { enabled: false }",
    "  maintenance:",
    "    uploadpurging: { enabled: false }",
    ...(opts.readOnly ? ["    readonly: { enabled: true }"] : []),
    "http:",
    `  addr: ${listen}`,
    "  headers:",
    "    X-Content-Type-Options: [nosniff]",
    "health:",
    "  storagedriver: { enabled: true, interval: 10s, threshold: 3 }",
  ].join("\n");
}

/** Starts docker-registry serving `storage` on `host` (a free port) and waits until it answers /v2/. */
export async function startRegistry(storage: string, opts: { host?: string; port?: number; readOnly?: boolean } = {}): Promise<RegistryServer> {
  const bin = await findTool("docker-registry");
  if (!bin)
    throw new UserError("missing host tool: docker-registry", "install it with 'apt-get install docker-registry' (or run scripts/setup-host.sh as root)");
  const host = opts.host ?? "127.0.0.1";
  await mkdir(storage, { recursive: true });
  const dir = await mkdtemp(join(tmpdir(), "icn-registry-"));
  const logPath = join(dir, "registry.log");
  let lastError = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = opts.port ?? (await freePort(host));
    const address = `${host}:${port}`;
    await writeFile(join(dir, "config.yml"), registryConfig(storage, address, { readOnly: opts.readOnly }));
    const fd = openSync(logPath, "a");
    const child = spawn(bin, ["serve", join(dir, "config.yml")], { stdio: ["ignore", fd, fd] });
    closeSync(fd);
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    const url = `http://${address}`;
    const deadline = Date.now() + 20_000;
    let up = false;
    while (Date.now() < deadline && child.exitCode === null) {
      try {
        const response = await fetch(`${url}/v2/`, { signal: AbortSignal.timeout(1000) });
        if (response.status === 200) {
          up = true;
          break;
        }
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (up) {
      const stop = async () => {
        if (child.exitCode === null) {
          child.kill("SIGTERM");
          const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
          await exited;
          clearTimeout(timer);
        }
        await rm(dir, { recursive: true, force: true });
      };
      return { address, url, storage, pid: child.pid!, stop, log: () => readFile(logPath, "utf8").catch(() => "") };
    }
    child.kill("SIGKILL");
    await exited;
    lastError = (await readFile(logPath, "utf8").catch(() => "")).split("\n").slice(-5).join("\n");
    if (opts.port) break;
  }
  await rm(dir, { recursive: true, force: true });
  throw new UserError(`docker-registry did not start: ${lastError}`, "run 'docker-registry serve CONFIG' by hand to see why");
}
