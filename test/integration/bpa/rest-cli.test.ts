/**
 * `icn-bootstrap upload` (tus-js-client) against the API: killed in the middle of an upload
 * (the link cut from the client's side), run again, it resumes where the server stopped
 * receiving: the server counts every byte it received for the upload, and they add up to
 * the file's size (nothing sent twice).
 */
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { finished } from "node:stream/promises";
import { execa } from "execa";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { RunningApi } from "../../../bpa/rest/main.js";
import type { UploadRecord } from "../../../common/uploads.js";
import { REPO } from "../../helpers/cli.js";
import { clients, kubeConfig } from "../../helpers/operator-suite.js";
import { ApiClient, startApiFixture, type ApiFixture, sha256, tokenFor, type TestTls } from "../../helpers/rest-suite.js";

const kc = kubeConfig();
const c = clients(kc);
let fixture: ApiFixture;
let ns: string;
let work: string;
let tls: TestTls;
let api: RunningApi;
let token: string;

beforeAll(async () => {
  fixture = await startApiFixture(kc, c, "rest-cli");
  ({ ns, work, tls, api } = fixture);
  token = await tokenFor(c, ns, "bpa-api-uploader");
}, 120_000);

afterAll(async () => {
  await fixture?.stop();
});

it("resumes after the upload command is killed mid-way, sending only what the server does not have", async () => {
  const file = join(work, "payload.bin");
  const out = createWriteStream(file);
  const hash = createHash("sha256");
  for (let i = 0; i < 192; i++) {
    const chunk = randomBytes(1024 * 1024);
    hash.update(chunk);
    out.write(chunk);
  }
  out.end();
  await finished(out);
  const digest = hash.digest("hex");
  await writeFile(join(work, "ca.crt"), tls.ca);
  const server = `https://127.0.0.1:${api.port}`;
  const args = [
    "--import",
    "tsx",
    "builder/cli.ts",
    "upload",
    file,
    "--kind",
    "file",
    "--name",
    "big/payload.bin",
    "--server",
    server,
    "--cacert",
    join(work, "ca.crt"),
  ];
  const env = { ...process.env, ICN_BPA_TOKEN: token, XDG_STATE_HOME: join(work, "xdg") };

  // First run: killed (SIGKILL: no goodbye on the wire) once it reports 20% sent.
  const first = spawn(process.execPath, args, { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"] });
  let firstErr = "";
  const killed = new Promise<void>((resolve) => {
    first.stderr.on("data", (d: Buffer) => {
      firstErr += d;
      const percents = [...firstErr.matchAll(/: (\d+\.\d)%/g)].map((m) => Number(m[1]));
      if (percents.some((p) => p >= 20)) first.kill("SIGKILL");
    });
    first.on("exit", () => resolve());
  });
  await killed;
  expect(firstErr).not.toMatch(/100\.0%/);
  const viewer = new ApiClient(server, tls.ca, await tokenFor(c, ns, "bpa-api-viewer"));
  const cut = (await viewer.json<{ items: UploadRecord[] }>("/api/v1/uploads")).body.items.find((u) => u.name === "big/payload.bin");
  expect(cut?.state).toBe("uploading");
  expect(cut!.offset).toBeGreaterThan(0);
  expect(cut!.offset).toBeLessThan(cut!.size);

  // Second run: the same command resumes.
  const second = await execa(process.execPath, args, { cwd: REPO, env, reject: false });
  expect(second.exitCode, second.stderr).toBe(0);
  expect(second.stderr).toContain("resuming the upload started");
  const record = JSON.parse(second.stdout) as UploadRecord;
  expect(record).toMatchObject({ state: "published", name: "big/payload.bin", digest: `sha256:${digest}` });
  expect(record.bytesReceived).toBe(192 * 1024 * 1024);
  expect(sha256(await readFile(join(work, "state/published/uploads/big/payload.bin")))).toBe(digest);

  // The finished upload is forgotten before the command exits: nothing to resume, no lock
  // left behind, so an upload right after it works (it failed with ELOCKED when tus's
  // removal raced the exit).
  const state = join(work, "xdg", "icn-bootstrap", "uploads.json");
  expect(Object.keys(JSON.parse(await readFile(state, "utf8")) as object)).toEqual([]);
  expect(await stat(`${state}.lock`).catch(() => undefined)).toBeUndefined();
  const small = join(work, "small.bin");
  await writeFile(small, randomBytes(4096));
  const next = await execa(process.execPath, [...args.slice(0, 4), small, "--kind", "file", "--name", "small.bin", ...args.slice(9)], {
    cwd: REPO,
    env,
    reject: false,
  });
  expect(next.exitCode, next.stderr).toBe(0);
  expect(next.stderr).not.toContain("resuming");
}, 180_000);
