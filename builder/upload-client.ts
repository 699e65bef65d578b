/**
 * The client side of `icn-bootstrap upload`: a tus upload (tus-js-client) of one file to
 * the BPA's REST API, resumed where it stopped when the same file is uploaded again
 * under the same kind and name (the upload URL is remembered in a small state file), with
 * progress on stderr. Runs on an admin's workstation; needs nothing of the appliance but
 * its address, a token and the site CA.
 */
import { createReadStream } from "node:fs";
import { mkdir, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import * as tus from "tus-js-client";
import { sha256File } from "../common/hash.js";
import { parseUploadRequest, type Kind, type UploadRecord } from "../common/uploads.js";

export interface UploadCommand {
  file: string;
  kind: Kind;
  name: string;
  /** https://appliance:port of the API. */
  server: string;
  token: string;
  /** PEM of the CA that signed the API's certificate (the appliance's site CA). */
  ca?: string;
  /** sha256 of the file, if known (else computed). */
  sha256?: string;
  /** Where upload URLs are remembered for resuming. */
  stateFile?: string;
  progress?: (sent: number, total: number) => void;
  say?: (line: string) => void;
}

export class UploadFailed extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "UploadFailed";
  }
}

export function defaultStateFile(): string {
  const base = process.env.XDG_STATE_HOME || join(homedir(), ".local", "state");
  return join(base, "icn-bootstrap", "uploads.json");
}

/** Uploads the file; resolves with the server's record of the published result. */
export async function upload(cmd: UploadCommand): Promise<UploadRecord> {
  const say = cmd.say ?? (() => undefined);
  const size = (await stat(cmd.file)).size;
  let sha256 = cmd.sha256;
  if (!sha256) {
    say(`computing the sha256 of ${cmd.file} (${size} bytes)`);
    sha256 = await sha256File(cmd.file);
  }
  parseUploadRequest({ kind: cmd.kind, name: cmd.name, sha256 }); // the server's rules, before any request
  const stateFile = cmd.stateFile ?? defaultStateFile();
  await mkdir(dirname(stateFile), { recursive: true });
  const endpoint = `${cmd.server.replace(/\/+$/, "")}/api/v1/uploads`;
  const fingerprint = `bpa-upload::${endpoint}::${cmd.kind}::${cmd.name}::${sha256}::${size}`;

  const storage = new (tus as unknown as { FileUrlStorage: new (path: string) => tus.UrlStorage }).FileUrlStorage(stateFile);

  return new Promise<UploadRecord>((resolve, reject) => {
    const u = new tus.Upload(createReadStream(cmd.file), {
      endpoint,
      uploadSize: size,
      metadata: { kind: cmd.kind, name: cmd.name, sha256, filename: cmd.file.split("/").pop() ?? "" },
      headers: { authorization: `Bearer ${cmd.token}` },
      httpStack: new tus.DefaultHttpStack(cmd.ca ? { ca: cmd.ca } : {}),
      urlStorage: storage,
      fingerprint: async () => fingerprint,
      storeFingerprintForResuming: true,
      // Forgotten below, awaited: tus's own removal is not, and a command that exits during
      // it leaves the state file's lock behind (the next upload within 10 s failed, ELOCKED).
      removeFingerprintOnSuccess: false,
      retryDelays: [0, 1000, 3000, 5000, 10000, 20000],
      // Retry cut links and server restarts, not refusals (4xx) nor a full disk or a refused push.
      onShouldRetry: (error) => {
        const status = (error as tus.DetailedError).originalResponse?.getStatus() ?? 0;
        return status === 0 || (status >= 500 && status !== 502 && status !== 507);
      },
      onProgress: (sent, total) => cmd.progress?.(sent, total),
      onError: (error) => {
        const response = (error as tus.DetailedError).originalResponse;
        const status = response?.getStatus();
        const body = response?.getBody()?.trim();
        reject(new UploadFailed(status ? `HTTP ${status}: ${body || error.message}` : error.message, status));
      },
      onSuccess: ({ lastResponse }) => {
        let record: UploadRecord;
        try {
          record = JSON.parse(lastResponse.getBody()) as UploadRecord;
        } catch {
          reject(new UploadFailed(`the server finished the upload but sent no record: ${lastResponse.getBody().slice(0, 200)}`));
          return;
        }
        forgetUpload(storage, fingerprint).then(
          () => resolve(record),
          (error: Error) => {
            say(`the upload is published, but ${stateFile} still names it: ${error.message}`);
            resolve(record);
          },
        );
      },
    });
    u.findPreviousUploads().then(
      (previous) => {
        if (previous[0]) {
          say(`resuming the upload started ${previous[0].creationTime}`);
          u.resumeFromPreviousUpload(previous[0]);
        }
        u.start();
      },
      (error: unknown) => reject(error as Error),
    );
  });
}

/** Removes the finished upload from the resume state, so that the same file is uploaded anew next time. */
async function forgetUpload(storage: tus.UrlStorage, fingerprint: string): Promise<void> {
  for (const previous of await storage.findUploadsByFingerprint(fingerprint)) {
    if (previous.urlStorageKey) await storage.removeUpload(previous.urlStorageKey);
  }
}
