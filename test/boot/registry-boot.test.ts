/**
 * The booted appliance's registry, as an outsider on the site network and as the admin
 * see it: the lean qcow2 (no Kubernetes: fast boots) with one NIC, its ports 5000 (the
 * registry), 8080 (the file server) and 22 forwarded to loopback. Anonymous pulls over
 * TLS verified with the CA the appliance made and published; anonymous and wrongly
 * authenticated pushes refused with nothing written; the admin's credentials (read over
 * SSH) push a new repository and a new tag, but not over a tag the appliance shipped;
 * plain HTTP refused; only the site-facing ports on the network. A second boot of the
 * same image makes another CA and other credentials; that machine has a site network and a
 * provisioning network too (two more NICs on taps in network namespaces, given by a site
 * disk), and every listener it shows is tried from a host on each: the exposure table of
 * docs/network-exposure.md, measured by connecting.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { REPO, runCli, type CliResult } from "../helpers/cli.js";
import { withoutKubernetes, writeDefinition } from "../helpers/definition.js";
import { LISTENERS_COMMAND, measureExposure, measuringNetworks, parseListeners, readmeExposure, type MeasuringNetworks } from "../helpers/exposure.js";
import { sshToVm } from "../helpers/ssh.js";

const BOOT_TIMEOUT_S = 15 * 60;
let out: string;
let keyDir: string;
let build: CliResult;

interface Appliance {
  vm: BootResult;
  registry: string;
  files: string;
  ssh: (command: string) => Promise<string>;
}

/** Boots the built qcow2: SSH, the registry and the file server forwarded to loopback; with networks, on those too (their site disk). */
async function bootAppliance(networks?: { measuring: MeasuringNetworks; siteDisk: string }): Promise<Appliance> {
  const [registryPort, filesPort, sshPort] = [await freePort(), await freePort(), await freePort()];
  const booting = bootImage({
    image: join(out, "icn-bootstrap.qcow2"),
    firmware: "bios",
    timeoutSeconds: BOOT_TIMEOUT_S,
    keepRunning: true,
    hostForwards: [`tcp:127.0.0.1:${registryPort}-:5000`, `tcp:127.0.0.1:${filesPort}-:8080`, `tcp:127.0.0.1:${sshPort}-:22`],
    extraTaps: networks?.measuring.taps,
    extraDisks: networks ? [networks.siteDisk] : undefined,
  });
  const vm = networks ? await networks.measuring.during(booting) : await booting;
  const ssh = async (command: string) => String((await sshToVm(join(keyDir, "id"), sshPort, command)).stdout);
  return { vm, registry: `127.0.0.1:${registryPort}`, files: `http://127.0.0.1:${filesPort}`, ssh };
}

/** skopeo as a client on the site network would run it; the result says what happened, it does not throw. */
async function skopeo(args: string[]) {
  const result = await execa("skopeo", args, { reject: false, all: true, timeout: 300_000 });
  return { ok: result.exitCode === 0, output: String(result.all ?? "") };
}

function fingerprint(pem: string): string {
  return `sha256:${new X509Certificate(pem).fingerprint256.replace(/:/g, "").toLowerCase()}`;
}

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "icn-regboot-"));
  keyDir = await mkdtemp(join(tmpdir(), "icn-regboot-key-"));
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(keyDir, "id")]);
  const publicKey = (await readFile(join(keyDir, "id.pub"), "utf8")).trim();
  const definition = await writeDefinition((d) => {
    withoutKubernetes(d);
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  build = await runCli(["build", "--definition", definition, "--format", "qcow2", "--out", out]);
}, 60 * 60_000);

afterAll(async () => {
  await rm(out, { recursive: true, force: true });
  await rm(keyDir, { recursive: true, force: true });
});

describe("the booted appliance's registry", () => {
  let first: Appliance;
  let certs: string;
  let password: string;
  const seed = () => yaml.load(readFileSync(join(REPO, "registry-seed/bootstrap.yaml"), "utf8")) as { images: { ref: string; digest?: string }[] };
  const pinned = (ref: string) => seed().images.find((i) => i.ref === ref)!.digest!;
  // The seeded etcd and CoreDNS, at whatever versions the lock pins.
  const seededRef = (repository: string) => seed().images.find((i) => i.ref.startsWith(`${repository}:`))!.ref;
  const etcdRef = seededRef("registry.k8s.io/etcd");
  const etcd = etcdRef.replace(/^registry\.k8s\.io\//, "");
  const coredns = seededRef("registry.k8s.io/coredns/coredns").replace(/^registry\.k8s\.io\//, "");

  beforeAll(
    async () => {
      expect(build.exitCode, build.all).toBe(0);
      first = await bootAppliance();
      expect(first.vm.ready, first.vm.lastLines.join("\n")).toBe(true);
      certs = await mkdtemp(join(tmpdir(), "icn-regboot-ca-"));
    },
    BOOT_TIMEOUT_S * 1000 + 60_000,
  );

  afterAll(async () => {
    await first?.vm.stop?.();
    if (certs) await rm(certs, { recursive: true, force: true });
  });

  it("publishes the CA it made on the file server, with the fingerprint the console shows", async () => {
    const response = await fetch(`${first.files}/icn-registry-ca.crt`);
    expect(response.status).toBe(200);
    const pem = await response.text();
    const ca = new X509Certificate(pem);
    expect(ca.ca).toBe(true);
    expect(ca.subject).toMatch(/ICN bootstrap registry CA/);
    expect(first.vm.readyLine).toContain(`registry_ca=${fingerprint(pem)}`);
    await writeFile(join(certs, "ca.crt"), pem);
  });

  it("serves anonymous pulls over TLS that verify with that CA, and nothing without it", async () => {
    const inspect = await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${first.registry}/pause:3.10.1`]);
    expect(inspect.output.trim()).toBe(pinned("registry.k8s.io/pause:3.10.1"));
    const untrusted = await skopeo(["inspect", "--format", "{{.Digest}}", `docker://${first.registry}/pause:3.10.1`]);
    expect(untrusted.ok).toBe(false);
    expect(untrusted.output).toMatch(/x509: certificate signed by unknown authority/);
  });

  it("refuses plain HTTP on the registry port", async () => {
    const response = await fetch(`http://${first.registry}/v2/_catalog`);
    expect(response.status).toBe(400);
    expect(await response.text()).toMatch(/plain HTTP request was sent to HTTPS port/);
  });

  it("refuses anonymous pushes and wrong credentials (401), writing nothing", async () => {
    const anonymous = await skopeo([
      "copy",
      "--src-cert-dir",
      certs,
      "--dest-cert-dir",
      certs,
      `docker://${first.registry}/${etcd}`,
      `docker://${first.registry}/intruder/etcd:1`,
    ]);
    expect(anonymous.ok).toBe(false);
    expect(anonymous.output).toMatch(/unauthorized|authentication required/);
    const wrong = await skopeo([
      "copy",
      "--src-cert-dir",
      certs,
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      "icn-push:not-the-password",
      `docker://${first.registry}/${etcd}`,
      `docker://${first.registry}/pause:3.10.1`,
    ]);
    expect(wrong.ok).toBe(false);
    expect(wrong.output).toMatch(/unauthorized|authentication required/);
    const intruder = await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${first.registry}/intruder/etcd:1`]);
    expect(intruder.ok).toBe(false);
    expect((await first.ssh("ls /var/lib/docker-registry/docker/registry/v2/repositories/")).split(/\s+/)).not.toContain("intruder");
    expect((await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${first.registry}/pause:3.10.1`])).output.trim()).toBe(
      pinned("registry.k8s.io/pause:3.10.1"),
    );
  });

  it("takes authenticated pushes of a new repository and a new tag, and they are pullable", async () => {
    password = (await first.ssh("cat /etc/icn-bootstrap/pki/registry-push.password")).trim();
    expect(password).toMatch(/^[0-9a-f]{48}$/);
    const creds = `icn-push:${password}`;
    const repo = await skopeo([
      "copy",
      "--src-cert-dir",
      certs,
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      creds,
      `docker://${first.registry}/${etcd}`,
      `docker://${first.registry}/site/etcd:mine`,
    ]);
    expect(repo.ok, repo.output).toBe(true);
    const tag = await skopeo([
      "copy",
      "--src-cert-dir",
      certs,
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      creds,
      `docker://${first.registry}/${etcd}`,
      `docker://${first.registry}/pause:site-tag`,
    ]);
    expect(tag.ok, tag.output).toBe(true);
    for (const ref of ["site/etcd:mine", "pause:site-tag"]) {
      const pulled = await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${first.registry}/${ref}`]);
      expect(pulled.output.trim(), ref).toBe(pinned(etcdRef));
    }
  });

  // Two skopeo copies of the seeded etcd and CoreDNS images through the TLS front: over a minute under TCG on a busy 2-core host.
  it("refuses, even with credentials, a push that would change a tag the appliance shipped (403 naming it and its digest)", { timeout: 180_000 }, async () => {
    const swap = await skopeo([
      "copy",
      "--src-cert-dir",
      certs,
      "--dest-cert-dir",
      certs,
      "--dest-creds",
      `icn-push:${password}`,
      `docker://${first.registry}/${coredns}`,
      `docker://${first.registry}/pause:3.10.1`,
    ]);
    expect(swap.ok).toBe(false);
    expect(swap.output).toContain(`denied: pause:3.10.1 is shipped with this appliance at ${pinned("registry.k8s.io/pause:3.10.1")}`);
    const after = await skopeo(["inspect", "--cert-dir", certs, "--format", "{{.Digest}}", `docker://${first.registry}/pause:3.10.1`]);
    expect(after.output.trim()).toBe(pinned("registry.k8s.io/pause:3.10.1"));
    // The refused manifest leaves no unfinished upload behind (the blobs it needed were all there).
    expect((await first.ssh("find /var/lib/docker-registry -path '*/_uploads/*' | wc -l")).trim()).toBe("0");
  });

  it("still serves the files on port 8080, read-only", async () => {
    const sha = await fetch(`${first.files}/kubespray/dl.k8s.io/release/v1.35.4/bin/linux/amd64/kubeadm.sha256`);
    expect(sha.status).toBe(200);
    expect((await sha.text()).trim()).toMatch(/^[0-9a-f]{64}$/);
    expect((await fetch(`${first.files}/kubespray/x`, { method: "PUT", body: "x" })).status).toBeGreaterThanOrEqual(400);
  });

  it("listens on the site network only where it must: SSH, the registry (TLS) and the file server", async () => {
    const listeners = (await first.ssh("ss -Htlnu | awk '{print $1, $5}'")).trim().split("\n");
    const loopback = / (127\.\d+\.\d+\.\d+|\[::1\]|\[::ffff:127\.\d+\.\d+\.\d+\])(%lo)?:\d+$/;
    const dhcpClient = /^udp \S+%\S+:68$/; // networkd's DHCP client, bound to its interface
    const exposed = listeners.filter((l) => !loopback.test(l) && !dhcpClient.test(l));
    const ports = [...new Set(exposed.map((l) => `${l.split(" ")[0]}/${l.split(":").pop()}`))].sort();
    expect(ports, listeners.join("\n")).toEqual(["tcp/22", "tcp/5000", "tcp/8080"]);
    expect(await first.ssh("test -S /run/docker-registry/registry.sock && stat -c '%a %U:%G' /run/docker-registry/registry.sock")).toMatch(
      /^660 docker-registry:www-data/,
    );
    // The appliance's own containerd pulls from nginx's loopback door: plain HTTP, reads only.
    expect(listeners).toContain("tcp 127.0.0.1:5001");
    const loopbackDoor = await first.ssh(
      "curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:5001/v2/pause/manifests/3.10.1 -H 'Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json'; " +
        "curl -s -o /dev/null -w '%{http_code}' -u icn-push:$(cat /etc/icn-bootstrap/pki/registry-push.password) -X POST http://127.0.0.1:5001/v2/pause/blobs/uploads/",
    );
    expect(loopbackDoor.trim()).toBe("200 403");
  });

  it("gives the REST API a certificate of its own from the same CA, for the same names, never the registry's key", async () => {
    const pki = "/etc/icn-bootstrap/pki";
    const pubkey = (name: string) => `openssl pkey -in ${pki}/${name}.key -pubout | sha256sum | cut -c1-64`;
    const out = await first.ssh(
      `openssl verify -CAfile ${pki}/registry-ca.crt ${pki}/bpa-api.crt; ${pubkey("bpa-api")}; ${pubkey("registry")}; ` +
        `openssl x509 -in ${pki}/bpa-api.crt -noout -ext subjectAltName | tail -n 1; openssl x509 -in ${pki}/registry.crt -noout -ext subjectAltName | tail -n 1; stat -c %a ${pki}/bpa-api.key`,
    );
    const [verified, apiKey, registryKey, apiNames, registryNames, keyMode] = out
      .trim()
      .split("\n")
      .map((l) => l.trim());
    expect(verified).toBe(`${pki}/bpa-api.crt: OK`);
    expect(apiKey).toMatch(/^[0-9a-f]{64}$/);
    expect(apiKey).not.toBe(registryKey);
    expect(apiNames).toBe(registryNames);
    expect(keyMode).toBe("600");
  });

  describe("the same image on another machine, on a site network and a provisioning network", () => {
    const networks = measuringNetworks();
    let second: Appliance;

    beforeAll(
      async () => {
        await first?.vm.stop?.();
        const site = join(out, "site");
        await mkdir(site, { recursive: true });
        await writeFile(join(site, "site.yaml"), `version: 1\n${networks.siteYaml}`);
        const siteDisk = join(out, "site.img");
        const written = await runCli(["site", "write", site, "--new", siteDisk]);
        expect(written.exitCode, written.all).toBe(0);
        second = await bootAppliance({ measuring: networks, siteDisk });
        expect(second.vm.ready, second.vm.lastLines.join("\n")).toBe(true);
      },
      BOOT_TIMEOUT_S * 1000 + 120_000,
    );

    afterAll(async () => {
      await second?.vm.stop?.();
      await networks.remove();
    });

    it("makes another CA and other push credentials", async () => {
      const firstCa = await readFile(join(certs, "ca.crt"), "utf8");
      const secondCa = await (await fetch(`${second.files}/icn-registry-ca.crt`)).text();
      expect(fingerprint(secondCa)).not.toBe(fingerprint(firstCa));
      const secondPassword = (await second.ssh("cat /etc/icn-bootstrap/pki/registry-push.password")).trim();
      expect(secondPassword).toMatch(/^[0-9a-f]{48}$/);
      expect(secondPassword).not.toBe(password);
      // The first machine's CA does not vouch for the second one.
      const crossed = await skopeo(["inspect", "--cert-dir", certs, `docker://${second.registry}/pause:3.10.1`]);
      expect(crossed.ok).toBe(false);
    });

    it("exposes exactly what docs/network-exposure.md's table says, measured by connecting from the site network and from the provisioning network", async () => {
      const listeners = parseListeners(await second.ssh(LISTENERS_COMMAND));
      const measured = await measureExposure(listeners, networks, networks.provisioningAddress, 5);
      expect(measured).toEqual(await readmeExposure({ kubernetes: false, provisioningNetwork: true }));
    });
  });
});
