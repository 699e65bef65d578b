/**
 * The appliance's registry configuration, run on this host with the real programs:
 * docker-registry with the shipped config.yml (its unix socket, its storage on a small
 * tmpfs), nginx with the shipped icn-bootstrap-registry.conf (only paths and the ports
 * changed), skopeo as the client. Fast checks of what the boot test shows in a VM, plus
 * what a VM cannot easily show: a push that fills the disk leaves the stored images intact.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../builder/registry/server.js";
import { loadSeedLists, parseRef, seedListPath } from "../../builder/images/seed.js";
import { seededTagRules } from "../../builder/registry/seeded-tags.js";
import { REPO } from "../helpers/cli.js";

const root = process.getuid?.() === 0;
const sha256 = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

/** An OCI layout with one image of one layer of `layerBytes` random bytes (the registry does not look inside layers). */
async function writeImage(dir: string, ref: string, layerBytes: number): Promise<string> {
  await mkdir(join(dir, "blobs/sha256"), { recursive: true });
  const put = async (data: Buffer | string) => {
    const digest = sha256(data);
    await writeFile(join(dir, "blobs/sha256", digest.slice(7)), data);
    return { digest, size: Buffer.byteLength(data) };
  };
  const layer = await put(randomBytes(layerBytes));
  const config = await put(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [layer.digest] } }));
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
    // Declared compressed, so that skopeo pushes it as it is (it compresses plain tar layers, changing digests).
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...layer }],
  });
  const m = await put(manifest);
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...m, annotations: { "org.opencontainers.image.ref.name": ref } }] }));
  return m.digest;
}

async function skopeo(args: string[]) {
  const result = await execa("skopeo", args, { reject: false, all: true, timeout: 120_000 });
  return { ok: result.exitCode === 0, output: String(result.all ?? "") };
}

describe.runIf(root)("the registry behind nginx, with the shipped configuration", () => {
  let work: string;
  let storage: string;
  let registry: ChildProcess;
  let address: string;
  let loopback: string;
  let certs: string;
  let creds: string;
  let seededDigest: string;

  const nginx = (...args: string[]) => execa("nginx", ["-p", work, "-c", join(work, "nginx.conf"), ...args]);

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "icn-registry-front-"));
    storage = join(work, "storage");
    await mkdir(storage);
    await execa("mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", storage]);
    // The site's PKI and credentials, as the first boot makes them.
    const pki = join(work, "pki");
    await mkdir(pki);
    const openssl = (args: string[]) => execa("openssl", args, { cwd: pki });
    await openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-keyout", "registry-ca.key", "-out", "registry-ca.crt", "-subj", "/CN=test CA", "-addext", "basicConstraints=critical,CA:TRUE"]);
    await openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "registry.key", "-out", "registry.csr", "-subj", "/CN=bootstrap.icn"]);
    await writeFile(join(pki, "ext"), "subjectAltName=DNS:bootstrap.icn,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    await openssl(["x509", "-req", "-in", "registry.csr", "-CA", "registry-ca.crt", "-CAkey", "registry-ca.key", "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "registry.crt"]);
    certs = join(work, "certs");
    await mkdir(certs);
    await writeFile(join(certs, "ca.crt"), await readFile(join(pki, "registry-ca.crt")));
    const password = randomBytes(24).toString("hex");
    creds = `icn-push:${password}`;
    const { stdout: hash } = await execa("openssl", ["passwd", "-6", "-stdin"], { input: password });
    await writeFile(join(work, "htpasswd"), `icn-push:${hash}\n`);

    // docker-registry with the shipped configuration: storage and socket moved here.
    const socket = join(work, "registry.sock");
    const shipped = await readFile(join(REPO, "overlays/etc/docker/registry/config.yml"), "utf8");
    const config = shipped.replace(/^(\s+rootdirectory:) \/var\/lib\/docker-registry$/m, `$1 ${storage}`).replace(/^(\s+addr:) \/run\/docker-registry\/registry\.sock$/m, `$1 ${socket}`);
    expect(config).toContain(`rootdirectory: ${storage}`);
    expect(config).toContain(`addr: ${socket}`);
    await writeFile(join(work, "registry.yml"), config);
    registry = spawn("docker-registry", ["serve", join(work, "registry.yml")], { stdio: "ignore" });
    for (let i = 0; i < 100 && !(await readdir(work)).includes("registry.sock"); i++) await new Promise((r) => setTimeout(r, 100));

    // nginx with the shipped site configuration: paths and the ports changed, nothing else.
    const port = await freePort();
    address = `127.0.0.1:${port}`;
    loopback = `127.0.0.1:${await freePort()}`;
    const site = (await readFile(join(REPO, "overlays/etc/nginx/conf.d/icn-bootstrap-registry.conf"), "utf8"))
      .replaceAll("/etc/icn-bootstrap/pki/", `${pki}/`)
      .replace("/etc/nginx/icn-registry.htpasswd", join(work, "htpasswd"))
      .replace("/etc/nginx/icn-registry-seeded.conf", join(work, "seeded.conf"))
      .replace("unix:/run/docker-registry/registry.sock", `unix:${socket}`)
      .replace("listen 5000 ssl;", `listen ${address} ssl;`)
      .replace("listen [::]:5000 ssl;", "")
      .replace("listen 127.0.0.1:5001;", `listen ${loopback};`);
    expect(site.split("\n").filter((l) => !l.trimStart().startsWith("#")).join("\n")).not.toMatch(/\/etc\/|\/run\/|listen 5000|listen 127\.0\.0\.1:5001/);
    await writeFile(join(work, "site.conf"), site);
    await writeFile(join(work, "seeded.conf"), seededTagRules([]));
    await writeFile(join(work, "nginx.conf"), `user root;\nworker_processes 1;\npid ${work}/nginx.pid;\nerror_log ${work}/error.log;\nevents {}\nhttp {\n  access_log ${work}/access.log;\n  include ${work}/site.conf;\n}\n`);
    await nginx();

    // The image "shipped" with the appliance: pushed, then its tag made immutable as the build does.
    const layout = join(work, "shipped");
    seededDigest = await writeImage(layout, "pause:3.10.2", 1024 * 1024);
    const seed = await skopeo(["copy", "--preserve-digests", "--dest-cert-dir", certs, "--dest-creds", creds, `oci:${layout}:pause:3.10.2`, `docker://${address}/pause:3.10.2`]);
    expect(seed.ok, seed.output).toBe(true);
    // The rules for every image the default appliance ships (long keys: nginx must load them), plus this one.
    const shippedImages = (await loadSeedLists([seedListPath("bootstrap.yaml")])).filter((i) => i.digest && i.ref !== "registry.k8s.io/pause:3.10.2");
    const rules = shippedImages.map((i) => ({ ...parseRef(i.ref), tags: i.tags ?? [], digest: i.digest! }));
    expect(rules.map((r) => r.repository)).toContain("kube-controller-manager");
    await writeFile(join(work, "seeded.conf"), seededTagRules([...rules, { repository: "pause", tag: "3.10.2", tags: [], digest: seededDigest }]));
    await nginx("-s", "reload");
    await new Promise((r) => setTimeout(r, 500));
  }, 120_000);

  afterAll(async () => {
    if (!work) return;
    await nginx("-s", "stop").catch(() => undefined);
    registry?.kill();
    await execa("umount", [storage], { reject: false });
    await rm(work, { recursive: true, force: true });
  });

  const inspect = async (ref: string) => (await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${address}/${ref}`])).output.trim();

  it("serves anonymous pulls over TLS, verified with the CA; plain HTTP gets 400", async () => {
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
    expect((await skopeo(["inspect", `docker://${address}/pause:3.10.2`])).output).toMatch(/x509: certificate signed by unknown authority/);
    const plain = await fetch(`http://${address}/v2/_catalog`);
    expect(plain.status).toBe(400);
  });

  it("serves the appliance's own pulls over plain HTTP on loopback, and nothing but reads there", async () => {
    const pull = await skopeo(["copy", "--src-tls-verify=false", `docker://${loopback}/pause:3.10.2`, `dir:${join(work, "pulled-loopback")}`]);
    expect(pull.ok, pull.output).toBe(true);
    expect((await skopeo(["inspect", "--tls-verify=false", "--format", "{{.Digest}}", `docker://${loopback}/pause:3.10.2`])).output.trim()).toBe(seededDigest);
    const layout = join(work, "loopback-push");
    await writeImage(layout, "x:1", 4096);
    // Even with the push credentials: this door has no writes.
    const push = await skopeo(["copy", "--dest-tls-verify=false", "--dest-creds", creds, `oci:${layout}:x:1`, `docker://${loopback}/loopback/x:1`]);
    expect(push.ok).toBe(false);
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const raw = await execa("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", creds, "-X", method, `http://${loopback}/v2/loopback/x/blobs/uploads/`]);
      expect(raw.stdout, method).toBe("403");
    }
    expect(await readdir(join(storage, "docker/registry/v2/repositories"))).toEqual(["pause"]);
  });

  it("refuses anonymous and wrongly authenticated writes with 401, writing nothing", async () => {
    const layout = join(work, "intruder");
    await writeImage(layout, "x:1", 4096);
    for (const extra of [[], ["--dest-creds", "icn-push:wrong"]]) {
      const push = await skopeo(["copy", "--dest-cert-dir", certs, ...extra, `oci:${layout}:x:1`, `docker://${address}/intruder/x:1`]);
      expect(push.ok).toBe(false);
      expect(push.output).toMatch(/unauthorized|authentication required/);
    }
    expect(await readdir(join(storage, "docker/registry/v2/repositories"))).toEqual(["pause"]);
    const raw = await execa("curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", join(certs, "ca.crt"), "-X", "DELETE", `https://${address}/v2/pause/manifests/${seededDigest}`]);
    expect(raw.stdout).toBe("401");
  });

  it("takes authenticated pushes of new tags, but never over a shipped one (403 naming it and its digest)", async () => {
    const layout = join(work, "site");
    const digest = await writeImage(layout, "site:1", 4096);
    expect((await skopeo(["copy", "--preserve-digests", "--dest-cert-dir", certs, "--dest-creds", creds, `oci:${layout}:site:1`, `docker://${address}/pause:site`])).ok).toBe(true);
    expect(await inspect("pause:site")).toBe(digest);
    const swap = await skopeo(["copy", "--preserve-digests", "--dest-cert-dir", certs, "--dest-creds", creds, `oci:${layout}:site:1`, `docker://${address}/pause:3.10.2`]);
    expect(swap.ok).toBe(false);
    expect(swap.output).toContain(`denied: pause:3.10.2 is shipped with this appliance at ${seededDigest}`);
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
  });

  it("a push that fills the disk fails, and the stored images stay intact and pullable", async () => {
    const layout = join(work, "huge");
    await writeImage(layout, "huge:1", 40 * 1024 * 1024); // more than the 24 MiB tmpfs holds
    const push = await skopeo(["copy", "--preserve-digests", "--dest-cert-dir", certs, "--dest-creds", creds, `oci:${layout}:huge:1`, `docker://${address}/site/huge:1`]);
    expect(push.ok).toBe(false);
    expect(await inspect("pause:3.10.2")).toBe(seededDigest);
    // Every blob of the shipped image still has its digest: a full copy verifies them.
    const copy = await skopeo(["copy", "--src-cert-dir", certs, `docker://${address}/pause:3.10.2`, `dir:${join(work, "pulled")}`]);
    expect(copy.ok, copy.output).toBe(true);
    expect(await inspect("site/huge:1")).not.toMatch(/^sha256:/);
  });
});
