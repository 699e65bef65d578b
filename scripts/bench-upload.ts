/**
 * REST API upload benchmark (npm run bench:upload [-- --size-mib 2048] [--json FILE]).
 *
 * One file of random bytes (2 GiB by default) is copied three ways in the same run, on
 * the same disk, each copy deleted before the next:
 *   cp        a local copy (the disk's own speed);
 *   curl      curl -T over HTTPS to a minimal Node server that writes the body to a file
 *             (what a plain upload costs: TLS, one stream, no protocol);
 *   upload    icn-bootstrap upload (tus-js-client) to `bpa api` run as its own process
 *             from the image's bundle (npm run build:bpa; node out/bpa/bpa.mjs api) against a
 *             real kube-apiserver (token checked by TokenReview/SAR), including
 *             the server's sha256 verification pass and the publishing rename.
 * Prints times, throughput and ratios against cp and curl, and peak RSS (VmHWM) of each
 * process, the API's at rest and after the upload: streaming keeps it flat.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { execa } from "execa";
import { freePort } from "../builder/registry/server.js";
import { makeClients } from "../bpa/runtime/kube.js";
import { makeServerTls } from "../test/helpers/fixtures/bpa/server-tls.js";
import { startKubeTestServer } from "../test/helpers/kube-apiserver.js";
import { TOKEN_AUDIENCE } from "../bpa/rest/auth.js";

const { values } = parseArgs({ options: { "size-mib": { type: "string", default: "2048" }, json: { type: "string" }, dir: { type: "string" } } });
const root = resolve(import.meta.dirname, "..");
const sizeMiB = Number(values["size-mib"]);
const bytes = sizeMiB * 1024 * 1024;

/** Peak resident memory (VmHWM) of a running process, in MiB. */
async function peakMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/** Runs a command under /usr/bin/time; returns seconds and its peak RSS in MiB. */
async function timed(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ seconds: number; peakMiB: number; stdout: string }> {
  const started = performance.now();
  const r = await execa("/usr/bin/time", ["-f", "%M", cmd, ...args], { env, cwd: root, reject: false });
  const seconds = (performance.now() - started) / 1000;
  if (r.exitCode !== 0) throw new Error(`${cmd} failed (${r.exitCode}): ${r.stderr.slice(-2000)}`);
  const kb = Number(r.stderr.trim().split("\n").pop());
  return { seconds, peakMiB: kb / 1024, stdout: r.stdout };
}

const work = values.dir ? resolve(values.dir) : await mkdtemp(join(tmpdir(), "icn-bench-upload-"));
await mkdir(work, { recursive: true });
const kube = await startKubeTestServer();
const children: ChildProcess[] = [];
try {
  // ------------------------------------------------------------------ the file
  const file = join(work, "payload.bin");
  process.stderr.write(`writing ${sizeMiB} MiB of random bytes to ${file}\n`);
  await execa("sh", ["-c", `head -c ${bytes} /dev/urandom > '${file}'`]);
  const sha256 = (await execa("sha256sum", [file])).stdout.split(" ")[0]!;
  const hashSeconds = (await timed("sha256sum", [file])).seconds;

  // ------------------------------------------------------------------ cp
  const cp = await timed("cp", [file, join(work, "cp-copy")]);
  await rm(join(work, "cp-copy"));

  // ------------------------------------------------------------------ curl to a plain sink
  const tls = makeServerTls(work);
  const tlsOptions = { cert: await readFile(tls.certFile), key: await readFile(tls.keyFile) };
  const sink = createServer(tlsOptions, (req, res) => {
    void pipeline(req, createWriteStream(join(work, "curl-copy"))).then(() => res.writeHead(201).end());
  });
  const sinkPort = await freePort();
  await new Promise<void>((r) => sink.listen(sinkPort, "127.0.0.1", () => r()));
  await writeFile(join(work, "ca.crt"), tls.ca);
  const curl = await timed("curl", ["-sS", "--fail", "--cacert", join(work, "ca.crt"), "-T", file, `https://127.0.0.1:${sinkPort}/payload.bin`]);
  sink.close();
  if ((await stat(join(work, "curl-copy"))).size !== bytes) throw new Error("the curl sink did not receive the whole file");
  await rm(join(work, "curl-copy"));

  // ------------------------------------------------------------------ the API
  const kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  const c = makeClients(kc);
  const ns = "bpa-system";
  await c.core.createNamespace({ body: { metadata: { name: ns } } });
  await c.core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: "bench" } } });
  await c.rbac.createClusterRole({
    body: { metadata: { name: "bpa-api-uploader" }, rules: [{ apiGroups: ["bpa.akraino.org"], resources: ["uploads"], verbs: ["create", "get", "list"] }] },
  });
  await c.rbac.createNamespacedRoleBinding({
    namespace: ns,
    body: {
      metadata: { name: "bench" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "bpa-api-uploader" },
      subjects: [{ kind: "ServiceAccount", name: "bench", namespace: ns }],
    },
  });
  const token = (
    await c.core.createNamespacedServiceAccountToken({ namespace: ns, name: "bench", body: { spec: { audiences: [TOKEN_AUDIENCE], expirationSeconds: 7200 } } })
  ).status!.token;
  await execa("npm", ["run", "--silent", "build:bpa"], { cwd: root });
  const apiPort = await freePort();
  const api = spawn(
    process.execPath,
    [
      "out/bpa/bpa.mjs",
      "api",
      "--kubeconfig",
      kube.kubeconfigPath,
      "--port",
      String(apiPort),
      "--tls-cert",
      tls.certFile,
      "--tls-key",
      tls.keyFile,
      "--state-dir",
      join(work, "state"),
    ],
    {
      cwd: root,
      env: { ...process.env, POD_NAMESPACE: ns, BPA_API_RESERVE_BYTES: "0", BPA_LOG_LEVEL: "warn" },
      stdio: ["ignore", "inherit", "inherit"],
    },
  );
  children.push(api);
  const base = `https://127.0.0.1:${apiPort}`;
  for (let i = 0; ; i++) {
    const ok = await execa("curl", ["-sS", "--cacert", join(work, "ca.crt"), `${base}/healthz`], { reject: false });
    if (ok.exitCode === 0) break;
    if (i > 300) throw new Error("bpa api did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiIdle = await peakMiB(api.pid!);
  const upload = await timed(
    process.execPath,
    [
      "--import",
      "tsx",
      "builder/cli.ts",
      "upload",
      file,
      "--kind",
      "file",
      "--name",
      "bench/payload.bin",
      "--server",
      base,
      "--cacert",
      join(work, "ca.crt"),
      "--sha256",
      sha256,
    ],
    { ...process.env, ICN_BPA_TOKEN: token, XDG_STATE_HOME: join(work, "xdg") },
  );
  const apiPeak = await peakMiB(api.pid!);
  const record = JSON.parse(upload.stdout) as { state: string; bytesReceived?: number };
  if (record.state !== "published" || record.bytesReceived !== bytes) throw new Error(`upload ended ${JSON.stringify(record)}`);
  api.kill("SIGTERM");

  const rate = (s: number) => (sizeMiB / s).toFixed(0);
  const rows = [
    ["cp (local copy)", cp.seconds, cp.peakMiB, "1.00", ""],
    ["curl -T, HTTPS, to a plain sink", curl.seconds, curl.peakMiB, (curl.seconds / cp.seconds).toFixed(2), "1.00"],
    [
      "icn-bootstrap upload -> bpa api (tus, TLS, + server sha256 check)",
      upload.seconds,
      upload.peakMiB,
      (upload.seconds / cp.seconds).toFixed(2),
      (upload.seconds / curl.seconds).toFixed(2),
    ],
  ] as const;
  console.log(
    `\nupload benchmark: ${sizeMiB} MiB, ${new Date().toISOString()}, ${(await execa("nproc")).stdout} cores, load ${(await readFile("/proc/loadavg", "utf8")).split(" ").slice(0, 3).join(" ")}`,
  );
  console.log(`${"".padEnd(68)} ${"seconds".padStart(8)} ${"MiB/s".padStart(6)} ${"peak RSS MiB".padStart(13)} ${"x cp".padStart(6)} ${"x curl".padStart(7)}`);
  for (const [name, s, peak, xcp, xcurl] of rows) {
    console.log(
      `${name.padEnd(68)} ${s.toFixed(1).padStart(8)} ${rate(s).padStart(6)} ${peak.toFixed(0).padStart(13)} ${xcp.padStart(6)} ${xcurl.padStart(7)}`,
    );
  }
  console.log(`sha256sum of the file alone (what the server's verification pass costs): ${hashSeconds.toFixed(1)} s`);
  console.log(
    `bpa api process: peak RSS ${apiIdle.toFixed(0)} MiB at rest, ${apiPeak.toFixed(0)} MiB after receiving, verifying and publishing ${sizeMiB} MiB`,
  );
  if (values.json) {
    await writeFile(
      values.json,
      `${JSON.stringify({ sizeMiB, cp, curl: { seconds: curl.seconds, peakMiB: curl.peakMiB }, upload: { seconds: upload.seconds, peakMiB: upload.peakMiB }, hashSeconds, apiIdleMiB: apiIdle, apiPeakMiB: apiPeak }, null, 2)}\n`,
    );
  }
} finally {
  for (const child of children) child.kill("SIGTERM");
  await kube.stop();
  if (!values.dir) await rm(work, { recursive: true, force: true });
}
