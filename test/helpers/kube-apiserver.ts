/**
 * A real Kubernetes API server for integration tests: etcd and kube-apiserver,
 * built from the pinned Go modules (or taken from the artifact cache), started on
 * loopback with random free ports in a temporary directory.
 *
 * - TLS everywhere the API server talks to clients: a throwaway CA (openssl) signs
 *   the serving certificate (127.0.0.1, localhost) and an admin client certificate
 *   in group system:masters; authorization is RBAC.
 * - The kubeconfig is self-contained (certificates inline).
 * - stop() terminates both processes and removes the directory. If the test process
 *   dies without calling it, an exit handler and a watchdog (a shell that waits on a
 *   pipe from this process) kill the servers.
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { request } from "node:https";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { artifactPaths } from "../../builder/sources/index.js";

export interface KubeTestServer {
  kubeconfigPath: string;
  /** The API server URL, https://127.0.0.1:PORT. */
  server: string;
  stop(): Promise<void>;
  /** Milliseconds from spawning etcd to kube-apiserver's /readyz answering ok. */
  startupMs: number;
  /** The temporary directory with certificates, data (etcd-data/) and the two logs. */
  dir: string;
  /** etcd's client URL (plain HTTP on loopback). */
  etcdUrl: string;
}

export interface KubeTestServerOptions {
  /** Paths of the binaries; default: the pinned artifacts, built on first use. */
  etcd?: string;
  kubeApiserver?: string;
  /** How long to wait for /readyz. */
  readyTimeoutMs?: number;
  log?: (message: string) => void;
  /** More kube-apiserver flags (e.g. --encryption-provider-config=...). */
  apiserverArgs?: string[];
}

export async function startKubeTestServer(opts: KubeTestServerOptions = {}): Promise<KubeTestServer> {
  const log = opts.log ?? ((m: string) => process.stderr.write(`kube-test-server: ${m}\n`));
  let etcdBin = opts.etcd;
  let apiserverBin = opts.kubeApiserver;
  if (!etcdBin || !apiserverBin) {
    const paths = await artifactPaths(["etcd", "kube-apiserver"]);
    etcdBin ??= paths.etcd;
    apiserverBin ??= paths["kube-apiserver"];
  }

  const dir = await mkdtemp(join(tmpdir(), "icn-kube-"));
  const children: ChildProcess[] = [];
  const killAll = () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  };
  process.once("exit", killAll);
  const watchdog = startWatchdog(dir);

  const stop = async () => {
    process.removeListener("exit", killAll);
    await Promise.all(children.map((child) => terminate(child)));
    await rm(dir, { recursive: true, force: true });
    watchdog.stdin?.end();
  };

  try {
    // Readable process names in ps and logs (the cache names files by digest).
    await symlink(etcdBin, join(dir, "etcd"));
    await symlink(apiserverBin, join(dir, "kube-apiserver"));
    const [etcdClient, etcdPeer, apiPort] = await freePorts(3);
    const pki = await makePki(dir);

    const started = Date.now();
    const etcdUrl = `http://127.0.0.1:${etcdClient}`;
    const etcd = spawnLogged(
      join(dir, "etcd"),
      [
        "--name=test",
        `--data-dir=${join(dir, "etcd-data")}`,
        `--listen-client-urls=${etcdUrl}`,
        `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
        `--initial-cluster=test=http://127.0.0.1:${etcdPeer}`,
        "--unsafe-no-fsync=true",
        "--log-level=warn",
      ],
      join(dir, "etcd.log"),
    );
    children.push(etcd);
    await recordPids(dir, children);
    await waitFor("etcd", etcd, join(dir, "etcd.log"), opts.readyTimeoutMs ?? 60_000, async () =>
      (await httpGet(`${etcdUrl}/health`)).includes('"health":"true"'),
    );

    const server = `https://127.0.0.1:${apiPort}`;
    const apiserver = spawnLogged(
      join(dir, "kube-apiserver"),
      [
        `--etcd-servers=${etcdUrl}`,
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        // Loopback may not be a public endpoint address; no kubernetes Service endpoints are needed here.
        "--endpoint-reconciler-type=none",
        `--secure-port=${apiPort}`,
        `--cert-dir=${join(dir, "cert-dir")}`,
        `--tls-cert-file=${pki.serverCert}`,
        `--tls-private-key-file=${pki.serverKey}`,
        `--client-ca-file=${pki.caCert}`,
        "--authorization-mode=RBAC",
        `--service-account-issuer=${server}`,
        `--service-account-key-file=${pki.saPublic}`,
        `--service-account-signing-key-file=${pki.saPrivate}`,
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
        ...(opts.apiserverArgs ?? []),
      ],
      join(dir, "kube-apiserver.log"),
    );
    children.push(apiserver);
    await recordPids(dir, children);

    const tls = { ca: await readFile(pki.caCert), cert: await readFile(pki.adminCert), key: await readFile(pki.adminKey) };
    await waitFor(
      "kube-apiserver",
      apiserver,
      join(dir, "kube-apiserver.log"),
      opts.readyTimeoutMs ?? 120_000,
      async () => (await httpGet(`${server}/readyz`, tls)) === "ok",
    );
    const startupMs = Date.now() - started;
    log(`etcd + kube-apiserver ready at ${server} in ${(startupMs / 1000).toFixed(1)}s (${dir})`);

    const kubeconfigPath = join(dir, "kubeconfig");
    await writeFile(kubeconfigPath, kubeconfig(server, tls), { mode: 0o600 });
    return { kubeconfigPath, server, stop, startupMs, dir, etcdUrl };
  } catch (error) {
    await stop();
    throw error;
  }
}

function kubeconfig(server: string, tls: { ca: Buffer; cert: Buffer; key: Buffer }): string {
  const b64 = (b: Buffer) => b.toString("base64");
  return `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: ${server}
    certificate-authority-data: ${b64(tls.ca)}
users:
- name: admin
  user:
    client-certificate-data: ${b64(tls.cert)}
    client-key-data: ${b64(tls.key)}
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
`;
}

interface Pki {
  caCert: string;
  serverCert: string;
  serverKey: string;
  adminCert: string;
  adminKey: string;
  saPublic: string;
  saPrivate: string;
}

/** A throwaway CA, a serving and an admin client certificate (openssl), and the service-account key pair (node:crypto). */
async function makePki(dir: string): Promise<Pki> {
  const p = (name: string) => join(dir, name);
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"];
  const openssl = (args: string[]) => {
    try {
      execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
    } catch (error) {
      throw new Error(
        `openssl ${args.join(" ")} failed (is openssl installed? scripts/setup-host.sh installs it): ${(error as { stderr?: Buffer }).stderr?.toString() ?? error}`,
      );
    }
  };
  // Key usages as kubeadm's CA and certificates have them: clients that verify strictly
  // (Python 3.13's default context, the kubespray runner's) refuse a CA without them.
  openssl([
    "req",
    "-x509",
    ...ec,
    "-keyout",
    p("ca.key"),
    "-out",
    p("ca.crt"),
    "-subj",
    "/CN=icn-bootstrap-test-ca",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
  ]);
  const leaf = (name: string, subject: string, ext: string[]) =>
    openssl([
      "req",
      "-x509",
      ...ec,
      "-keyout",
      p(`${name}.key`),
      "-out",
      p(`${name}.crt`),
      "-subj",
      subject,
      "-CA",
      p("ca.crt"),
      "-CAkey",
      p("ca.key"),
      "-addext",
      "basicConstraints=critical,CA:FALSE",
      "-addext",
      "keyUsage=critical,digitalSignature,keyEncipherment",
      ...ext.flatMap((e) => ["-addext", e]),
    ]);
  leaf("apiserver", "/CN=kube-apiserver", ["extendedKeyUsage=serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost"]);
  leaf("admin", "/O=system:masters/CN=icn-bootstrap-test-admin", ["extendedKeyUsage=clientAuth"]);
  const sa = generateKeyPairSync("rsa", { modulusLength: 2048 });
  await writeFile(p("sa.key"), sa.privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
  await writeFile(p("sa.pub"), sa.publicKey.export({ type: "spki", format: "pem" }));
  return {
    caCert: p("ca.crt"),
    serverCert: p("apiserver.crt"),
    serverKey: p("apiserver.key"),
    adminCert: p("admin.crt"),
    adminKey: p("admin.key"),
    saPublic: p("sa.pub"),
    saPrivate: p("sa.key"),
  };
}

function spawnLogged(file: string, args: string[], logPath: string): ChildProcess {
  const out = createWriteStream(logPath);
  const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
  child.stdout?.pipe(out, { end: false });
  child.stderr?.pipe(out, { end: false });
  child.once("close", () => out.end());
  child.once("error", (error) => out.write(`spawn failed: ${error.message}\n`));
  return child;
}

/**
 * A shell that reads from a pipe whose other end this process holds: when this
 * process dies for any reason (even SIGKILL), the pipe closes and the shell kills
 * the servers listed in <dir>/pids and removes the directory. stop() removes the
 * directory (and so the pid list) before it closes the pipe.
 */
function startWatchdog(dir: string): ChildProcess {
  const script = 'cat >/dev/null; [ -f "$D/pids" ] && kill -KILL $(cat "$D/pids") 2>/dev/null; sleep 1; rm -rf -- "$D"';
  const dog = spawn("sh", ["-c", script], { stdio: ["pipe", "ignore", "ignore"], detached: true, env: { ...process.env, D: dir } });
  dog.unref();
  (dog.stdin as unknown as { unref?: () => void }).unref?.();
  return dog;
}

async function recordPids(dir: string, children: ChildProcess[]): Promise<void> {
  await writeFile(
    join(dir, "pids"),
    children
      .map((c) => c.pid)
      .filter(Boolean)
      .join(" ") + "\n",
  );
}

async function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  // Everything is thrown away afterwards: a short grace period, then SIGKILL.
  const timer = setTimeout(() => child.kill("SIGKILL"), 2_000);
  await exited;
  clearTimeout(timer);
}

async function waitFor(name: string, child: ChildProcess, logPath: string, timeoutMs: number, ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before it was ready; its log ends:\n${await logTail(logPath)}`);
    }
    if (await ready().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${name} not ready after ${timeoutMs / 1000}s; its log ends:\n${await logTail(logPath)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function logTail(path: string): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => "(no log)");
  return text.trimEnd().split("\n").slice(-20).join("\n");
}

function httpGet(url: string, tls?: { ca: Buffer; cert: Buffer; key: Buffer }): Promise<string> {
  if (url.startsWith("http:")) return fetch(url, { signal: AbortSignal.timeout(2_000) }).then((r) => r.text());
  return new Promise((resolve, reject) => {
    const req = request(url, { ...tls, timeout: 2_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (body += chunk));
      res.on("end", () => resolve(body.trim()));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

/** Free TCP ports on 127.0.0.1 (asked from the kernel, then released for the server to take). */
async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
          const s = createServer();
          s.once("error", reject);
          s.listen(0, "127.0.0.1", () => resolve(s));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}
