/**
 * Resumable uploads (the tus protocol, @tus/server with its file store) and what happens
 * when one is complete: the stated sha256 checked, then the file published or the image
 * pushed. Until then the bytes live under incoming/<random id>, which nothing serves.
 *
 * Rules checked when an upload is created (before a byte is stored): metadata (kind,
 * name, sha256), that an appliance image comes from an administrator's binding, the size
 * limit, one upload at a time per published name, that the name is not the build's nor
 * another user's (owners.ts), and free space (this upload plus what the uploads in
 * progress still need). The owner is checked again when the upload is
 * published, one publication per name at a time.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { FileStore } from "@tus/file-store";
import { EVENTS, Server as TusServer, type Upload } from "@tus/server";
import type { Clients } from "../runtime/kube.js";
import type { Logger } from "../runtime/log.js";
import type { Caller } from "./auth.js";
import { Owners, publishedName, recordName, type PublishedName } from "./owners.js";
import { RequestError, parseUploadRequest, type Kind, type UploadRecord, type UploadRequest } from "../../common/uploads.js";
import { publishFile } from "./publish-file.js";
import { checkChart, pushChart } from "./push-chart.js";
import { pushImageArchive } from "./push-image.js";
import { RegistryError, type RegistryClient } from "./registry.js";
import { sha256File } from "../../common/hash.js";
import { withUrls, type Store } from "./store.js";

/** Who sent a request, set by the server after authentication, read by the tus hooks. */
const callers = new WeakMap<IncomingMessage, Caller>();
/** The upload id the server checked the caller owns: the only one tus may act on for that request. */
const checkedIds = new WeakMap<IncomingMessage, string>();

/** The node request under the web Request that @tus/server (srvx) hands its hooks. */
function nodeRequest(req: unknown): IncomingMessage | undefined {
  return (req as { runtime?: { node?: { req?: IncomingMessage } } }).runtime?.node?.req;
}

export interface UploadOptions {
  store: Store;
  /** Mount path of the tus endpoint, e.g. /api/v1/uploads */
  path: string;
  maxUploadBytes: number;
  /** Space kept free on the store's file system beyond what uploads need. */
  reserveBytes: number;
  /** Unfinished uploads are removed this long after their creation. */
  expirationMs: number;
  /** The file server's base URL for a request's Host (configured, or that host at port 8080). */
  filesBase: (host: string | null) => string;
  /** A registry client with current credentials (read at each push), and the host nodes pull from. */
  registry: () => Promise<{ client: RegistryClient; pullHost: string }>;
  /** The cluster and the API's namespace, where the build announces its names. */
  clients: Clients;
  namespace: string;
  /** Whether RBAC grants the caller the right to replace what another user published. */
  mayReplaceOthers: (caller: Caller) => Promise<boolean>;
  /** 403 unless RBAC grants the caller the right to upload appliance images (bpa-api-appliance-admin). */
  authorizeApplianceImages: (caller: Caller) => Promise<void>;
  log: Logger;
}

const GiB = 1024 ** 3;
const human = (n: number) => (n >= GiB ? `${(n / GiB).toFixed(2)} GiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`);
/** The claim of an upload in progress: its published name (a chart's without its version, unknown until it is read). */
const key = (kind: Kind, name: string) => publishedName(kind, name).key;
/** States of a record written when processing starts, before its outcome is known. */
const PROCESSING: readonly string[] = ["verifying", "publishing"];
const STOPPED_WHILE_PROCESSING =
  "the server stopped while processing this upload (out of memory?): it is not processed again, so that it cannot stop the server again; nothing was published. If the server was stopped for another reason (a power cut, a restart), upload the file again";

/** tus hooks fail a request by throwing { status_code, body }. */
function tusError(status: number, message: string) {
  return { status_code: status, body: `${message}\n` };
}

export class Uploads {
  readonly tus: TusServer;
  private readonly datastore: FileStore;
  /** published name -> id of the unfinished upload that holds the name. */
  private readonly claims = new Map<string, string>();
  /** Ids accepted by onCreate that the store has not created yet. */
  private readonly creating = new Set<string>();
  /** id -> state while verifying or publishing. */
  private readonly busy = new Map<string, "verifying" | "publishing">();
  /** id -> bytes this process received for it (tests and the benchmark check resumes with it). */
  private readonly received = new Map<string, number>();
  private createChain: Promise<unknown> = Promise.resolve();
  private expiryTimer: NodeJS.Timeout | undefined;
  private readonly owners: Owners;
  /** published name -> the publication under way: one at a time per name, so the owner checked is the owner replaced. */
  private readonly publishing = new Map<string, Promise<unknown>>();

  constructor(private readonly o: UploadOptions) {
    this.owners = new Owners({ clients: o.clients, namespace: o.namespace, records: () => o.store.readRecords(), registry: o.registry });
    this.datastore = new FileStore({ directory: o.store.incoming, expirationPeriodInMilliseconds: o.expirationMs });
    const write = this.datastore.write.bind(this.datastore);
    this.datastore.write = async (readable: Readable, id: string, offset: number) => {
      readable.on("data", (chunk: Buffer) => this.received.set(id, (this.received.get(id) ?? 0) + chunk.length));
      return write(readable, id, offset);
    };
    this.tus = new TusServer({
      path: o.path,
      datastore: this.datastore,
      relativeLocation: true,
      // tus' own id (the URL's last segment) must be the one whose owner was checked; else 404.
      getFileIdFromRequest: (req, lastSegment) => {
        const node = nodeRequest(req);
        const checked = node ? checkedIds.get(node) : undefined;
        return checked !== undefined && checked === lastSegment ? checked : undefined;
      },
      // No cross-origin use: the API's own status page is same-origin, other sites get no CORS grant.
      allowedOrigins: () => false,
      // Creation needs the whole length: free space and the size limit are checked up front.
      onUploadCreate: (req, upload) => {
        const node = nodeRequest(req);
        const caller = node ? callers.get(node) : undefined;
        if (!caller) throw tusError(500, "internal error: the upload request reached the store unauthenticated");
        return this.serialised(() => this.onCreate(caller, upload));
      },
      onUploadFinish: async (req, upload) => {
        const record = withUrls(await this.finish(upload), o.filesBase(req.headers.get("host")));
        return { status_code: 200, headers: { "content-type": "application/json" }, body: `${JSON.stringify(record)}\n` };
      },
      onResponseError: async (_req, error) => this.explainWriteError(error),
    });
    this.tus.on(EVENTS.POST_CREATE, (_req: unknown, upload: Upload) => this.creating.delete(upload.id));
  }

  async start(): Promise<void> {
    await this.o.store.init();
    // A record is written when processing starts: one still processing means that processing
    // stopped the server (or a power cut did). Processed again, it could stop it again, for ever.
    const records = await this.o.store.readRecords();
    for (const record of records.filter((r) => PROCESSING.includes(r.state))) {
      await this.o.store.writeRecord({ ...record, state: "failed", error: STOPPED_WHILE_PROCESSING, finished: new Date().toISOString() });
      this.o.log.warn("upload failed: the server stopped while processing it", { id: record.id, kind: record.kind, name: record.name });
    }
    const over = new Set(records.map((r) => r.id));
    for (const upload of await this.inProgress()) {
      if (over.has(upload.id)) {
        await this.removeUploadFiles(upload.id);
        continue;
      }
      const m = upload.metadata ?? {};
      if (m.kind && m.name) this.claims.set(key(m.kind as Kind, m.name), upload.id);
      // Complete before a restart, but not yet published: finish it now.
      if (upload.size !== undefined && upload.offset === upload.size) {
        void this.finish(upload).catch((error: unknown) =>
          this.o.log.warn("finishing an upload after a restart failed", { id: upload.id, error: String(error) }),
        );
      }
    }
    this.expiryTimer = setInterval(() => void this.removeExpired(), 10 * 60_000);
    this.expiryTimer.unref();
  }

  stop(): void {
    if (this.expiryTimer) clearInterval(this.expiryTimer);
  }

  /** Hands an authenticated request (caller = who sent it; id = the upload whose owner the server checked) to the tus server. */
  handle(req: IncomingMessage, res: ServerResponse, caller?: Caller, id?: string): Promise<void> {
    if (caller) callers.set(req, caller);
    if (id) checkedIds.set(req, id);
    return this.tus.handle(req, res);
  }

  /** The user who created an upload (404 when there is no such upload). */
  async owner(id: string): Promise<string> {
    const upload = await this.datastore.getUpload(id).catch(() => undefined);
    if (!upload) throw new RequestError(404, `no upload ${id} in progress (finished, removed, or expired): GET /api/v1/uploads lists them`);
    return upload.metadata?.user ?? "";
  }

  private serialised<T>(work: () => Promise<T>): Promise<T> {
    const next = this.createChain.then(work, work);
    this.createChain = next.catch(() => undefined);
    return next;
  }

  private async onCreate(caller: Caller, upload: Upload): Promise<{ metadata: Record<string, string> }> {
    const user = caller.username;
    let request: UploadRequest;
    try {
      request = parseUploadRequest(upload.metadata);
    } catch (error) {
      throw tusError((error as RequestError).status, (error as Error).message);
    }
    if (request.kind === "appliance-image") {
      try {
        await this.o.authorizeApplianceImages(caller);
      } catch (error) {
        if (error instanceof RequestError) throw tusError(error.status, error.message);
        throw error;
      }
    }
    if (upload.sizeIsDeferred || upload.size === undefined) {
      throw tusError(400, "Upload-Length is missing: the size must be known when the upload is created (free space and the size limit are checked then)");
    }
    const size = upload.size;
    if (size > this.o.maxUploadBytes) {
      throw tusError(
        413,
        `${request.kind} "${request.name}" is ${human(size)} (${size} bytes), over this appliance's limit of ${human(this.o.maxUploadBytes)}: split it, or raise the limit (BPA_API_MAX_UPLOAD_BYTES of Deployment bpa-system/bpa-api)`,
      );
    }
    const holder = this.claims.get(key(request.kind, request.name));
    if (holder && (this.creating.has(holder) || (await this.datastore.getUpload(holder).catch(() => undefined)))) {
      throw tusError(
        409,
        `${request.kind} "${request.name}" is being uploaded already (upload ${this.o.path}/${holder}): resume that upload, or remove it (DELETE ${this.o.path}/${holder}) before starting another`,
      );
    }
    let replaces: string | undefined;
    try {
      replaces = await this.mayPublish(publishedName(request.kind, request.name), user, () => this.o.mayReplaceOthers(caller));
    } catch (error) {
      if (error instanceof RequestError) throw tusError(error.status, error.message);
      throw error;
    }
    const unpacked = request.kind === "container-image" ? size : 0; // the archive is unpacked before the push
    let pending = 0; // the bytes still to come of every upload in progress, and the unpacking of their images
    for (const u of await this.inProgress()) pending += (u.size ?? 0) - u.offset + (u.metadata?.kind === "container-image" ? (u.size ?? 0) : 0);
    const free = await this.o.store.freeBytes();
    const needed = size + unpacked + pending + this.o.reserveBytes;
    if (needed > free) {
      throw tusError(
        507,
        `not enough disk space for ${request.kind} "${request.name}" (${human(size)}): the upload store has ${human(free)} free, ` +
          `this upload needs ${human(size + unpacked)}, uploads in progress ${human(pending)} more, and ${human(this.o.reserveBytes)} stay free: ` +
          `remove unneeded uploads or images, or wait for the uploads in progress`,
      );
    }
    this.claims.set(key(request.kind, request.name), upload.id);
    this.creating.add(upload.id);
    setTimeout(() => this.creating.delete(upload.id), 60_000).unref();
    const filename = upload.metadata?.filename;
    return {
      metadata: { kind: request.kind, name: request.name, sha256: request.sha256, user, ...(filename ? { filename } : {}), ...(replaces ? { replaces } : {}) },
    };
  }

  /**
   * 409 unless `user` may publish `target`: it is nobody's, or `user`'s, or another user's
   * and `granted(owner)`. Returns that other user when it is replaced.
   */
  private async mayPublish(target: PublishedName, user: string, granted: (owner: string) => Promise<boolean>): Promise<string | undefined> {
    const owner = await this.owners.owner(target);
    if (!owner) return undefined;
    if ("build" in owner) {
      throw new RequestError(
        409,
        `${target.kind} "${target.name}" belongs to the build: ${owner.build}. Nobody may replace what the appliance ships: upload under another name`,
      );
    }
    if (owner.user === user) return undefined;
    if (await granted(owner.user)) return owner.user;
    throw new RequestError(
      409,
      `${target.kind} "${target.name}" was published by ${owner.user} (upload ${owner.upload}): a name belongs to whoever published it, so only ${owner.user} may replace it. ` +
        `Upload under another name, or ask an administrator for the right to replace others' uploads (RBAC verb update on uploads.bpa.akraino.org in namespace ${this.o.namespace})`,
    );
  }

  /** Runs `work` when no other publication of the same name is under way. */
  private holdingName<T>(key: string, work: () => Promise<T>): Promise<T> {
    const next = (this.publishing.get(key) ?? Promise.resolve()).then(work);
    const settled = next.catch(() => undefined);
    this.publishing.set(key, settled);
    void settled.then(() => this.publishing.get(key) === settled && this.publishing.delete(key));
    return next;
  }

  /** A write that failed because the disk is full says so (tus' own answer is a bare 500). */
  private async explainWriteError(error: Error | { status_code: number; body: string }) {
    const failedWrite = "status_code" in error ? error.status_code === 500 : (error as NodeJS.ErrnoException).code === "ENOSPC" || /ENOSPC/.test(error.message);
    if (!failedWrite) return undefined;
    const free = await this.o.store.freeBytes().catch(() => Number.NaN);
    if (!(free < 1024 * 1024)) return undefined;
    return tusError(
      507,
      `the upload store is full (${human(free)} free): the bytes received so far are kept; remove unneeded uploads (DELETE ${this.o.path}/ID) or other files, then resume (HEAD for the offset)`,
    );
  }

  /** id -> the verification and publication under way (a retried last PATCH joins it). */
  private readonly finishing = new Map<string, Promise<UploadRecord>>();

  /** Verifies a complete upload, then publishes it, once however often it is asked. */
  private finish(upload: Upload): Promise<UploadRecord> {
    let running = this.finishing.get(upload.id);
    if (!running) {
      running = this.verifyAndPublish(upload);
      this.finishing.set(upload.id, running);
      const forget = () => setTimeout(() => this.finishing.delete(upload.id), 60_000).unref();
      running.then(forget, forget);
    }
    return running;
  }

  /** The record says how it ended; a failure also rejects with the HTTP answer. */
  private async verifyAndPublish(upload: Upload): Promise<UploadRecord> {
    const m = upload.metadata ?? {};
    const record: UploadRecord = {
      id: upload.id,
      kind: m.kind as Kind,
      name: m.name ?? "",
      sha256: m.sha256 ?? "",
      size: upload.size ?? 0,
      state: "verifying",
      ...(m.user ? { user: m.user } : {}),
      ...(upload.creation_date ? { created: upload.creation_date } : {}),
    };
    const source = this.o.store.uploadPath(upload.id);
    const log = this.o.log.child({ upload: upload.id, kind: record.kind, name: record.name });
    let status = 200;
    try {
      this.busy.set(upload.id, "verifying");
      await this.o.store.writeRecord(record);
      const actual = await sha256File(source);
      if (actual !== record.sha256) {
        throw new RequestError(
          422,
          `sha256 mismatch for ${record.kind} "${record.name}": the client stated ${record.sha256}, the ${record.size} bytes received have ${actual}; nothing was published and the upload is removed: check the file and upload it again`,
        );
      }
      this.busy.set(upload.id, "publishing");
      const chart = record.kind === "chart" ? await checkChart(source, record.name) : undefined;
      const target = publishedName(record.kind, record.name, chart?.meta.version);
      // Checked again: another upload may have published the name, or the build announced it, since this one was created.
      await this.holdingName(target.key, async () => {
        await this.mayPublish(target, record.user ?? "", async (owner) => m.replaces === owner);
        if (record.kind === "container-image") {
          const { client, pullHost } = await this.o.registry();
          const pushed = await pushImageArchive(source, join(this.o.store.work, upload.id), record.name, client, pullHost);
          Object.assign(record, { digest: pushed.digest, url: pushed.url });
        } else if (chart) {
          const { client, pullHost } = await this.o.registry();
          Object.assign(record, await pushChart(source, join(this.o.store.work, upload.id), chart, client, pullHost));
        } else {
          Object.assign(record, await publishFile(this.o.store, record, source));
        }
        record.state = "published";
        record.finished = new Date().toISOString();
        await this.o.store.writeRecord(record);
      });
      log.info("published", { digest: record.digest, where: record.path ?? record.url });
    } catch (error) {
      status = error instanceof RequestError ? error.status : error instanceof RegistryError ? 502 : 500;
      record.state = status < 500 ? "rejected" : "failed";
      record.error = (error as Error).message;
      log.warn(`upload ${record.state}`, { error: record.error });
    } finally {
      this.busy.delete(upload.id);
    }
    record.finished ??= new Date().toISOString();
    const received = this.received.get(upload.id);
    if (received !== undefined) record.bytesReceived = received;
    this.received.delete(upload.id);
    await this.o.store.writeRecord(record);
    // The upload is over either way: its bytes were moved, or are not wanted.
    await this.removeUploadFiles(upload.id);
    if (this.claims.get(key(record.kind, record.name)) === upload.id) this.claims.delete(key(record.kind, record.name));
    if (record.state !== "published") throw tusError(status, record.error!);
    return record;
  }

  private async removeUploadFiles(id: string): Promise<void> {
    await rm(this.o.store.uploadPath(id), { force: true });
    await this.datastore.configstore.delete(id).catch(() => undefined);
  }

  private async inProgress(): Promise<Upload[]> {
    const ids = await this.datastore.configstore.list!();
    const uploads: Upload[] = [];
    for (const id of ids) {
      const upload = await this.datastore.getUpload(id).catch(() => undefined);
      if (upload) uploads.push(upload);
    }
    return uploads;
  }

  private async removeExpired(): Promise<void> {
    const removed = await this.tus.cleanUpExpiredUploads().catch(() => 0);
    if (removed) this.o.log.info("removed expired uploads", { count: removed });
  }

  /** Every upload: in progress (from the tus store), being verified or published, and finished (records). */
  async list(): Promise<UploadRecord[]> {
    const out: UploadRecord[] = [];
    for (const u of await this.inProgress()) {
      const m = u.metadata ?? {};
      out.push({
        id: u.id,
        kind: m.kind as Kind,
        name: m.name ?? "",
        sha256: m.sha256 ?? "",
        size: u.size ?? 0,
        offset: u.offset,
        state: this.busy.get(u.id) ?? "uploading",
        ...(m.user ? { user: m.user } : {}),
        ...(u.creation_date ? { created: u.creation_date } : {}),
        ...(this.received.has(u.id) ? { bytesReceived: this.received.get(u.id)! } : {}),
      });
    }
    // Records still processing are listed above, as uploads in progress.
    const finished = (await this.o.store.readRecords())
      .filter((r) => !PROCESSING.includes(r.state))
      .sort((a, b) => (a.finished ?? "").localeCompare(b.finished ?? ""));
    // A later upload of the same published name replaced an earlier one.
    const latest = new Map<string, string>();
    for (const r of finished) if (r.state === "published") latest.set(recordName(r).key, r.id);
    for (const r of finished) {
      out.push(r.state === "published" && latest.get(recordName(r).key) !== r.id ? { ...r, state: "replaced" } : r);
    }
    return out;
  }
}
