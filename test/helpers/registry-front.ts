/**
 * The appliance's registry as it runs there, on this host: docker-registry with the
 * shipped config.yml (on a unix socket) behind nginx with the shipped
 * icn-bootstrap-registry.conf (TLS with a CA made here, HTTP Basic for writes, shipped tags
 * immutable, the read-only plain door for the appliance's own pulls). Only paths and ports
 * are changed. Or, with `flavor: "chart"`, the chart's own registry (serve.registry) as its
 * pod runs it: the chart's config.yml and nginx.conf (images/infra-local-controller-chart/
 * serve/registry). Used by test/integration/registry-front.test.ts (the registry's own
 * rules) and the BPA's image uploads. Needs root (nginx as shipped; a tmpfs for a small storage).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { freePort } from "../../builder/registry/server.js";
import { seededTagRules, type ShippedImage } from "../../builder/registry/seeded-tags.js";

import { REPO } from "./cli.js";

export type SeededTag = ShippedImage;

export interface RegistryFront {
  /** 127.0.0.1:PORT: the site network's door (TLS, 5000 on the appliance). */
  address: string;
  /** 127.0.0.1:PORT: the appliance's own read-only plain-HTTP door (127.0.0.1:5001 there). */
  loopback: string;
  /** The registry's storage directory. */
  storage: string;
  /** A scratch directory removed with the registry. */
  work: string;
  /** PEM of the CA that signed nginx's certificate. */
  ca: string;
  /** A directory with ca.crt, for skopeo's --cert-dir. */
  certDir: string;
  /** The push account (icn-push). */
  username: string;
  password: string;
  /** Every account of its password file: icn-push, icn-api (the REST API's) and, for the chart, icn-seed (deploy's). */
  accounts: Record<string, string>;
  /** Makes tags immutable, as the build does for the tags it ships. */
  setShippedTags(rules: SeededTag[]): Promise<void>;
  stop(): Promise<void>;
}

export interface RegistryFrontOptions {
  /** Storage on a tmpfs of this size (e.g. "24m"), to fill it. */
  storageSize?: string;
  /** The appliance's registry (default) or the chart's own (serve.registry). */
  flavor?: "appliance" | "chart";
}

const CHART_REGISTRY = join(REPO, "images/infra-local-controller-chart/serve/registry");

export async function startRegistryFront(options: RegistryFrontOptions = {}): Promise<RegistryFront> {
  const work = await mkdtemp(join(tmpdir(), "icn-registry-front-"));
  const storage = join(work, "storage");
  const pki = join(work, "pki");
  const certDir = join(work, "certs");
  for (const d of [storage, pki, certDir]) await mkdir(d);
  if (options.storageSize) await execa("mount", ["-t", "tmpfs", "-o", `size=${options.storageSize}`, "tmpfs", storage]);
  const openssl = (args: string[]) => execa("openssl", args, { cwd: pki });
  await openssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-days",
    "2",
    "-keyout",
    "registry-ca.key",
    "-out",
    "registry-ca.crt",
    "-subj",
    "/CN=test registry CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
  ]);
  await openssl([
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    "registry.key",
    "-out",
    "registry.csr",
    "-subj",
    "/CN=bootstrap.icn",
  ]);
  await writeFile(join(pki, "ext"), "subjectAltName=DNS:bootstrap.icn,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  await openssl([
    "x509",
    "-req",
    "-in",
    "registry.csr",
    "-CA",
    "registry-ca.crt",
    "-CAkey",
    "registry-ca.key",
    "-CAcreateserial",
    "-days",
    "2",
    "-extfile",
    "ext",
    "-out",
    "registry.crt",
  ]);
  const ca = await readFile(join(pki, "registry-ca.crt"), "utf8");
  await writeFile(join(certDir, "ca.crt"), ca);
  const chart = options.flavor === "chart";
  const accounts: Record<string, string> = {};
  for (const user of ["icn-push", "icn-api", ...(chart ? ["icn-seed"] : [])]) accounts[user] = randomBytes(24).toString("hex");
  const lines = await Promise.all(
    Object.entries(accounts).map(async ([user, password]) => `${user}:${(await execa("openssl", ["passwd", "-6", "-stdin"], { input: password })).stdout}\n`),
  );
  await writeFile(join(work, "htpasswd"), lines.join(""));

  const socket = join(work, "registry.sock");
  const shipped = await readFile(chart ? join(CHART_REGISTRY, "config.yml") : join(REPO, "overlays/etc/docker/registry/config.yml"), "utf8");
  const config = shipped
    .replace(/^(\s+rootdirectory:) \/var\/lib\/(docker-)?registry$/m, `$1 ${storage}`)
    .replace(/^(\s+addr:) \/run\/(docker-)?registry\/registry\.sock$/m, `$1 ${socket}`);
  if (!config.includes(`rootdirectory: ${storage}`) || !config.includes(`addr: ${socket}`))
    throw new Error("the shipped registry config.yml changed shape: update test/helpers/registry-front.ts");
  await writeFile(join(work, "registry.yml"), config);
  const registry: ChildProcess = spawn("docker-registry", ["serve", join(work, "registry.yml")], { stdio: "ignore" });
  for (let i = 0; i < 100 && !(await readdir(work)).includes("registry.sock"); i++) await new Promise((r) => setTimeout(r, 100));

  const address = `127.0.0.1:${await freePort()}`;
  const loopback = `127.0.0.1:${await freePort()}`;
  if (chart) return startChartFront({ work, storage, pki, certDir, ca, accounts, socket, address, registry, options });
  const site = (await readFile(join(REPO, "overlays/etc/nginx/conf.d/icn-bootstrap-registry.conf"), "utf8"))
    .replaceAll("/etc/icn-bootstrap/pki/", `${pki}/`)
    .replace("/etc/nginx/icn-registry.htpasswd", join(work, "htpasswd"))
    .replace("/etc/nginx/icn-registry-seeded.conf", join(work, "seeded.conf"))
    .replace("unix:/run/docker-registry/registry.sock", `unix:${socket}`)
    .replace("listen 5000 ssl;", `listen ${address} ssl;`)
    .replace("listen [::]:5000 ssl;", "")
    .replace("listen 127.0.0.1:5001;", `listen ${loopback};`);
  const active = site
    .split("\n")
    .filter((l) => !l.trimStart().startsWith("#"))
    .join("\n");
  if (/\/etc\/|\/run\/|listen 5000|listen 127\.0\.0\.1:5001/.test(active))
    throw new Error("the shipped nginx registry configuration changed shape (a path or port the test does not move): update test/helpers/registry-front.ts");
  await writeFile(join(work, "site.conf"), site);
  await writeFile(join(work, "seeded.conf"), seededTagRules([]));
  await writeFile(
    join(work, "nginx.conf"),
    `user root;\nworker_processes 1;\npid ${work}/nginx.pid;\nerror_log ${work}/error.log;\nevents {}\nhttp {\n  access_log ${work}/access.log;\n  include ${work}/site.conf;\n}\n`,
  );
  const nginx = (...args: string[]) => execa("nginx", ["-p", work, "-c", join(work, "nginx.conf"), ...args]);
  await nginx();

  return {
    address,
    loopback,
    storage,
    work,
    ca,
    certDir,
    username: "icn-push",
    password: accounts["icn-push"]!,
    accounts,
    async setShippedTags(rules) {
      await writeFile(join(work, "seeded.conf"), seededTagRules(rules));
      await nginx("-s", "reload");
      await new Promise((r) => setTimeout(r, 500));
    },
    async stop() {
      await nginx("-s", "stop").catch(() => undefined);
      registry.kill();
      if (options.storageSize) await execa("umount", [storage], { reject: false });
      await rm(work, { recursive: true, force: true });
    },
  };
}

/** The chart's front: its nginx.conf (a whole configuration, in the foreground) with only paths and the port moved. */
async function startChartFront(f: {
  work: string;
  storage: string;
  pki: string;
  certDir: string;
  ca: string;
  accounts: Record<string, string>;
  socket: string;
  address: string;
  registry: ChildProcess;
  options: RegistryFrontOptions;
}): Promise<RegistryFront> {
  const { work } = f;
  const front = join(work, "front");
  await mkdir(front);
  await writeFile(join(front, "tls.crt"), await readFile(join(f.pki, "registry.crt")));
  await writeFile(join(front, "tls.key"), await readFile(join(f.pki, "registry.key")));
  await writeFile(join(front, "htpasswd"), await readFile(join(work, "htpasswd")));
  const conf = (await readFile(join(CHART_REGISTRY, "nginx.conf"), "utf8"))
    .replace("worker_processes 1;", "user root;\nworker_processes 1;")
    .replace("pid /tmp/nginx.pid;", `pid ${work}/nginx.pid;`)
    .replaceAll(/ \/tmp\/(client_body|proxy|fastcgi|uwsgi|scgi);/g, ` ${work}/$1;`)
    .replaceAll("/etc/icn/front/", `${front}/`)
    .replace("include /etc/icn/nginx/shipped.conf;", `include ${work}/shipped.conf;`)
    .replace("unix:/run/registry/registry.sock", `unix:${f.socket}`)
    .replace("listen 5000 ssl;", `listen ${f.address} ssl;`);
  const active = conf
    .split("\n")
    .filter((l) => !l.trimStart().startsWith("#"))
    .join("\n")
    .replaceAll(work, "WORK");
  if (/\/etc\/|\/run\/|\/tmp\/|listen 5000/.test(active))
    throw new Error("the chart's registry nginx.conf changed shape (a path or port the test does not move): update test/helpers/registry-front.ts");
  await writeFile(join(work, "nginx.conf"), conf);
  await writeFile(join(work, "shipped.conf"), seededTagRules([], "the chart's bundle"));
  const nginxArgs = ["-p", work, "-e", join(work, "error.log"), "-c", join(work, "nginx.conf")];
  const nginx = spawn("nginx", nginxArgs, { stdio: "ignore" });
  for (let i = 0; i < 100 && !(await readdir(work)).includes("nginx.pid"); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    address: f.address,
    loopback: "",
    storage: f.storage,
    work,
    ca: f.ca,
    certDir: f.certDir,
    username: "icn-push",
    password: f.accounts["icn-push"]!,
    accounts: f.accounts,
    async setShippedTags(rules) {
      await writeFile(join(work, "shipped.conf"), seededTagRules(rules, "the chart's bundle"));
      await execa("nginx", [...nginxArgs, "-s", "reload"]);
      await new Promise((r) => setTimeout(r, 500));
    },
    async stop() {
      nginx.kill();
      f.registry.kill();
      if (f.options.storageSize) await execa("umount", [f.storage], { reject: false });
      await rm(work, { recursive: true, force: true });
    },
  };
}
