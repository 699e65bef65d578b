/**
 * Asking the appliance to upgrade itself to an uploaded appliance image. The REST API runs
 * in a pod and changes nothing on the host: it checks the request against what was
 * uploaded and leaves it as a file in the store; the host's icn-upgrade-request.path
 * starts `icn-upgrade request`, which copies the files out of the pod's reach, checks their
 * signatures with the keys the appliance trusts, and upgrades (docs/upgrade.md). The host
 * mirrors the upgrade's state back into the store, where GET reads it.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import { RequestError, type UploadRecord } from "../../common/uploads.js";
import { syncDir, syncFile } from "./durable.js";

export const REQUEST_FILE = "request.json";
export const STATE_FILE = "state.json";
/** What `icn-upgrade request` accepts as a name: the host checks it again. */
const IMAGE_NAME = /^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,100}\/){0,4}[A-Za-z0-9][A-Za-z0-9._-]{0,100}\.img$/;
const BODY_LIMIT = 4096;

export interface UpgradeRequest {
  image: string;
  report: string;
  requestedBy: string;
  requestedAt: string;
}

/** The request's JSON body, at most 4 KiB. */
export async function readRequestBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > BODY_LIMIT) throw new RequestError(413, `the request body is larger than ${BODY_LIMIT} bytes: send {"image": "<name>.img"}`);
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new RequestError(400, 'the request body is not JSON: send {"image": "<name>.img"}');
  }
}

/**
 * The request for `body`, checked against the published appliance images: the image, its
 * build report (NAME.report.json) and the report's signature must all have been uploaded.
 */
export function upgradeRequest(body: unknown, uploads: UploadRecord[], requestedBy: string, now = new Date()): UpgradeRequest {
  const image = (body as { image?: unknown } | null)?.image;
  if (typeof image !== "string" || !IMAGE_NAME.test(image))
    throw new RequestError(
      400,
      `"image" must name an uploaded USB image of a build, such as "icn-bootstrap.img" or "2026.12/icn-bootstrap.img" (got ${JSON.stringify(image ?? null)})`,
    );
  const published = new Set(uploads.filter((u) => u.kind === "appliance-image" && u.state === "published").map((u) => u.name));
  const report = `${image.slice(0, -".img".length)}.report.json`;
  const missing = [image, report, `${report}.sigstore.json`].filter((name) => !published.has(name));
  if (missing.length > 0)
    throw new RequestError(
      409,
      `not uploaded as appliance-image: ${missing.join(", ")}; upload the build's image, its report and the report's .sigstore.json first (icn-bootstrap upload FILE --kind appliance-image)`,
    );
  return { image, report, requestedBy, requestedAt: now.toISOString() };
}

export class ApplianceUpgrades {
  constructor(private readonly dir: string) {}

  /** Leaves the request for the host; one at a time. */
  async request(request: UpgradeRequest): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o755 });
    const pending = await this.pending();
    if (pending) throw new RequestError(409, `an upgrade to ${pending.image} was requested at ${pending.requestedAt} and has not started yet`);
    const state = await this.state();
    if (state && ["writing", "trying"].includes(String(state.phase)))
      throw new RequestError(409, `an upgrade to slot ${String(state.to)} is ${String(state.phase)}: wait for it to finish (GET this resource)`);
    const path = join(this.dir, REQUEST_FILE);
    const temporary = `${path}.tmp`;
    await writeFile(temporary, `${JSON.stringify(request, null, 2)}\n`, { mode: 0o644 });
    await syncFile(temporary);
    await rename(temporary, path);
    await syncDir(this.dir);
  }

  async pending(): Promise<UpgradeRequest | undefined> {
    return readJson<UpgradeRequest>(join(this.dir, REQUEST_FILE));
  }

  /** The last upgrade's state as the host mirrors it (icn-upgrade status). */
  async state(): Promise<Record<string, unknown> | undefined> {
    return readJson<Record<string, unknown>>(join(this.dir, STATE_FILE));
  }

  /** Withdraws a request the host has not taken yet. */
  async withdraw(): Promise<boolean> {
    const path = join(this.dir, REQUEST_FILE);
    const had = (await this.pending()) !== undefined;
    await rm(path, { force: true });
    return had;
  }
}

async function readJson<T>(path: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(path, "utf8")) as T;
  } catch {
    return undefined;
  }
}
