/**
 * Bit-reproducible images: two builds from the same commit and lock file, the second
 * with an empty stage cache of its own (ICN_BOOTSTRAP_STAGE_CACHE; the artifact, .deb and
 * layer caches stay shared, as on a machine that keeps its downloads) and as a hardened
 * host runs it (umask 077, another time zone and locale, a private TMPDIR), give the same
 * USB image, qcow2, SBOM and contents manifest. Then `verify` on the result: the images
 * pass, a changed byte in a root filesystem file or in a registry blob fails, named.
 * The second build signs its outputs (--sign-key, a key made here with openssl); `verify
 * --key` checks those signatures too.
 */
import { Spec, Validation } from "@cyclonedx/cyclonedx-library";
import { createHash } from "node:crypto";
import { createReadStream, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, statfs, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { execa } from "execa";
import { REPO, runCli, type CliResult } from "../helpers/cli.js";
import { copyImageSparse, flipByteOfFile } from "../helpers/image.js";
import { blobPath } from "../../builder/stages/registry.js";
import { OFFLINE_ARCHIVES } from "../../builder/kubespray/components.js";

const BUILD_TIMEOUT = 80 * 60_000;
const VERIFY_TIMEOUT = 10 * 60_000;
const NAME = "icn-bootstrap";
/**
 * Free disk the two builds need to run at once: the second writes a whole stage cache of
 * its own (about 14 GiB), peaks at about 8 GiB more while it makes the root filesystem,
 * and both write their images (5 GiB each) while the other image test copies images of
 * its own. Below this the second build waits for the first (a CI run with 33 GiB free
 * ran out of space with both at once).
 */
const FREE_BYTES_FOR_BOTH_AT_ONCE = 45 * 2 ** 30;
const OUTPUTS = [`${NAME}.img`, `${NAME}.qcow2`, `${NAME}.cdx.json`, `${NAME}.contents.txt`, "infra-local-controller-0.1.0.tgz"];

/**
 * The CLI as a hardened host runs it (issue 34): umask 077 (CIS recommends 027), a time
 * zone 12h45 from UTC, a locale whose collation differs from English ("ch" after "h"),
 * a private TMPDIR (mode 0700).
 */
async function runCliHardened(args: string[], env: Record<string, string>): Promise<CliResult> {
  const tmp = await mkdtemp(join(tmpdir(), "icn-repro-tmp-"));
  const cli = ["node", "--import", "tsx", join(REPO, "builder/cli.ts"), ...args];
  const result = await execa("sh", ["-c", 'umask 077 && exec "$@"', "sh", ...cli], {
    cwd: REPO,
    reject: false,
    all: true,
    env: { ...env, TZ: "Pacific/Chatham", LANG: "cs_CZ.UTF-8", LC_ALL: "cs_CZ.UTF-8", TMPDIR: tmp },
  });
  await rm(tmp, { recursive: true, force: true });
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr), all: String(result.all) };
}

async function sha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** The lines of the two contents manifests that differ (first 20 each way), each marked with its build. */
async function contentsDifference(a: string, b: string): Promise<string[]> {
  const [left, right] = await Promise.all([a, b].map(async (dir) => new Set((await readFile(join(dir, `${NAME}.contents.txt`), "utf8")).split("\n"))));
  return [
    ...[...left!]
      .filter((l) => !right!.has(l))
      .slice(0, 20)
      .map((l) => `first:  ${l}`),
    ...[...right!]
      .filter((l) => !left!.has(l))
      .slice(0, 20)
      .map((l) => `second: ${l}`),
  ];
}

/**
 * What cannot be identical in the report, by nature: it records this build (when, how
 * long each stage took, whether it was reused, the bytes its output and the images occupy
 * on this disk, where the images were written, where each .deb came from). Everything
 * else in it must be equal.
 */
function withoutBuildRecord(report: Record<string, unknown>) {
  const {
    builtAt: _b,
    totalSeconds: _t,
    stages,
    images,
    charts,
    sbom,
    ...rest
  } = report as {
    builtAt: string;
    totalSeconds: number;
    stages: { name: string; key: string }[];
    images: Record<string, { apparentBytes: number; sha256: string }>;
    charts: { apparentBytes: number; sha256: string }[];
    sbom: { debianFiles: { from: string }[] };
  };
  return {
    ...rest,
    stages: stages.map(({ name, key }) => ({ name, key })),
    images: Object.fromEntries(Object.entries(images).map(([format, { apparentBytes, sha256 }]) => [format, { apparentBytes, sha256 }])),
    charts: charts.map(({ apparentBytes, sha256 }) => ({ apparentBytes, sha256 })),
    sbom: { ...sbom, debianFiles: sbom.debianFiles.map(({ from: _from, ...f }) => f) },
  };
}

describe("reproducible build", () => {
  const outs: string[] = [];
  let stagesB: string;
  let first: CliResult;
  let second: CliResult;
  let secondSeconds = 0;
  /** The second build's signing key and its public key, outside the repository. */
  let keys: string;
  /** The first build's outputs by sha256: its images are removed once hashed (disk: 4 GB each). */
  const firstDigests = new Map<string, string>();

  beforeAll(async () => {
    outs.push(await mkdtemp(join(tmpdir(), "icn-repro-a-")), await mkdtemp(join(tmpdir(), "icn-repro-b-")));
    stagesB = await mkdtemp(join(tmpdir(), "icn-repro-stages-"));
    keys = await mkdtemp(join(tmpdir(), "icn-repro-keys-"));
    await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", join(keys, "sign.key")]);
    await execa("openssl", ["pkey", "-in", join(keys, "sign.key"), "-pubout", "-out", join(keys, "sign.pub")]);
    // Both at once when the disk allows: the second has no stage to wait for, and takes the
    // CPU the first leaves idle in its single-threaded stages (on a cold machine every other
    // image test waits for the first). Go binaries and downloads are shared: one build makes
    // each, the other waits.
    const free = await statfs(tmpdir()).then((s) => s.bavail * s.bsize);
    const together = free >= FREE_BYTES_FOR_BOTH_AT_ONCE;
    const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(0)} GiB`;
    console.log(
      `${gib(free)} free in ${tmpdir()}: ${together ? "the two builds run at once" : `under ${gib(FREE_BYTES_FOR_BOTH_AT_ONCE)}, the second build waits for the first`}`,
    );
    // The first build's images are hashed and removed as soon as it is done.
    const buildFirst = async () => {
      const result = await runCli(["build", "--out", outs[0]!]);
      if (result.exitCode === 0) {
        for (const file of OUTPUTS) firstDigests.set(file, await sha256(join(outs[0]!, file)));
        if (process.env.ICN_KEEP_TEST_TMP !== "1") for (const file of [`${NAME}.img`, `${NAME}.qcow2`]) await rm(join(outs[0]!, file), { force: true });
      }
      return result;
    };
    let started = Date.now();
    const buildSecond = () =>
      runCliHardened(["build", "--out", outs[1]!, "--sign-key", join(keys, "sign.key")], { ICN_BOOTSTRAP_STAGE_CACHE: stagesB }).finally(() => {
        secondSeconds = (Date.now() - started) / 1000;
      });
    if (together) [first, second] = await Promise.all([buildFirst(), buildSecond()]);
    else {
      first = await buildFirst();
      started = Date.now();
      second = await buildSecond();
    }
    // The second build's stage cache is the size of a whole build and nothing reads it again.
    if (process.env.ICN_KEEP_TEST_TMP !== "1") await rm(stagesB, { recursive: true, force: true });
    console.log(
      `second build (${together ? "beside the first" : "after the first"}; empty stage cache, umask 077, TZ Pacific/Chatham, LC_ALL cs_CZ.UTF-8, private TMPDIR): ${secondSeconds.toFixed(0)} s`,
    );
  }, BUILD_TIMEOUT);

  afterAll(async () => {
    // Only this test's own directories: the shared cache is never touched. ICN_KEEP_TEST_TMP=1 keeps them to compare.
    if (process.env.ICN_KEEP_TEST_TMP === "1") return console.log(`kept: ${[...outs, stagesB].join(" ")}`);
    for (const dir of [...outs, stagesB, keys]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("both builds succeed; the second reuses no stage output", async () => {
    expect(first.exitCode, first.all).toBe(0);
    expect(second.exitCode, second.all).toBe(0);
    expect(first.stdout).toMatch(/^unsigned: no --sign-key/m);
    expect(second.stdout).toMatch(/^signed 4 files with /m);
    const report = JSON.parse(await readFile(join(outs[1]!, `${NAME}.report.json`), "utf8"));
    expect(report.stages.filter((s: { reused: boolean }) => s.reused)).toEqual([]);
  });

  it("gives a bit-identical USB image, qcow2, SBOM, contents manifest and components chart", async () => {
    const digests = await Promise.all(OUTPUTS.map(async (file) => ({ file, a: firstDigests.get(file), b: await sha256(join(outs[1]!, file)) })));
    console.log(`sha256 (first build, second build):\n${digests.map(({ file, a, b }) => `${file.padEnd(28)} ${a}  ${b}`).join("\n")}`);
    // Which files of the root filesystem differ, named, when they do.
    expect(await contentsDifference(outs[0]!, outs[1]!)).toEqual([]);
    for (const { file, a, b } of digests) expect(b, file).toBe(a);
  });

  it("gives the same report except the fields that record the build itself (times, reuse, allocated bytes, output paths, where each .deb came from)", async () => {
    const [a, b] = await Promise.all(outs.map(async (o) => JSON.parse(await readFile(join(o, `${NAME}.report.json`), "utf8"))));
    expect(withoutBuildRecord(b)).toEqual(withoutBuildRecord(a));
    expect(b.builtAt).not.toBe(a.builtAt); // named: it cannot be identical
  });

  it("writes a CycloneDX 1.6 SBOM the CycloneDX validator accepts, with every package, Go binary, image and served file", async () => {
    const path = join(outs[1]!, `${NAME}.cdx.json`);
    const text = await readFile(path, "utf8");
    expect(await new Validation.JsonStrictValidator(Spec.Version.v1dot6).validate(text)).toBeNull();
    const bom = JSON.parse(text);
    const report = JSON.parse(await readFile(join(outs[1]!, `${NAME}.report.json`), "utf8"));
    type C = { "bom-ref": string; type: string; purl?: string; name: string; hashes?: { content: string }[]; properties?: { name: string; value: string }[] };
    const components: C[] = bom.components;
    const debs = components.filter((c) => c.purl?.startsWith("pkg:deb/"));
    const rootfsDebs = debs.filter((c) => c["bom-ref"].startsWith("deb:rootfs:"));
    expect(rootfsDebs.map((c) => c.name).sort()).toEqual(report.sbom.debianPackages.map((p: { name: string }) => p.name).sort());
    for (const c of debs) expect(c.purl).toMatch(/^pkg:deb\/debian\/[^@]+@[^?]+\?arch=(amd64|all)&distro=debian-13$/);
    const binaries = components.filter((c) => c["bom-ref"].startsWith("go-binary:"));
    // The bootstrap cluster's, the application clusters' network plugin (flanneld and the flannel CNI plugin in their images),
    // the compute nodes' release archives (etcd's tools, containerd, runc, the CNI plugins, crictl, nerdctl),
    // Helm in the root and in the kubespray runner's image (the addons Jobs), age in the root (the Secrets' key
    // on a medium or under a passphrase), and the addons' programs in their images.
    // One component a binary: the etcd in etcd's tarball is the etcd image's (another location of it).
    const locations = (name: string) =>
      binaries
        .find((c) => c.name === name)!
        .properties!.filter((p) => p.name === "icn-bootstrap:location")
        .map((p) => p.value);
    const inArchives = OFFLINE_ARCHIVES.flatMap((a) => (a.binary ? [a.binary] : Object.values(a.members!)));
    expect(binaries.map((c) => c.name).sort()).toEqual(
      [
        ...new Set([
          "age",
          "age-keygen",
          "age-plugin-batchpass",
          "baremetal-operator",
          "coredns",
          "etcd",
          "flannel",
          "flanneld",
          "helm",
          "install_multus",
          "intel_qat_device_plugin",
          "kube-apiserver",
          "kube-controller-manager",
          "kube-proxy",
          "kube-scheduler",
          "kubeadm",
          "kubectl",
          "kubelet",
          "multus-daemon",
          "multus-shim",
          "nfd-gc",
          "nfd-master",
          "nfd-worker",
          "passthru",
          "sriov",
          "sriovdp",
          ...inArchives,
        ]),
      ].sort(),
    );
    expect(locations("etcd")).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^file server \/kubespray\/github\.com\/etcd-io\/etcd\/releases\/download\/v[\d.]+\/etcd-v[\d.]+-linux-amd64\.tar\.gz:etcd-v[\d.]+-linux-amd64\/etcd$/,
        ),
      ]),
    );
    // Helm twice: in the root (the first boot installs the components' chart with it) and in the runner image (the addons Jobs).
    expect(locations("helm")).toEqual([
      "/usr/local/bin/helm",
      expect.stringMatching(/^image bootstrap\.icn:5000\/icn\/kubespray-runner:[^:]+:\/usr\/local\/bin\/helm$/),
    ]);
    for (const tool of ["age", "age-keygen", "age-plugin-batchpass"]) expect(locations(tool)).toEqual([`/usr/local/bin/${tool}`]);
    expect(locations("multus-daemon")).toEqual([
      expect.stringMatching(/^image ghcr\.io\/k8snetworkplumbingwg\/multus-cni:v[\d.]+-thick:\/usr\/src\/multus-cni\/bin\/multus-daemon$/),
    ]);
    expect(locations("sriovdp")).toEqual([
      expect.stringMatching(/^image ghcr\.io\/k8snetworkplumbingwg\/sriov-network-device-plugin:v[\d.]+:\/usr\/bin\/sriovdp$/),
    ]);
    const charts = components.filter((c) => c.properties?.some((p) => p.name === "icn-bootstrap:oci:artifact" && p.value === "helm-chart"));
    expect(charts.map((c) => c.name).sort()).toEqual([
      "bootstrap.icn:5000/charts/infra-local-controller",
      "bootstrap.icn:5000/charts/intel-qat-plugin",
      "bootstrap.icn:5000/charts/multus",
      "bootstrap.icn:5000/charts/node-feature-discovery",
      "bootstrap.icn:5000/charts/sriov-cni",
      "bootstrap.icn:5000/charts/sriov-network-device-plugin",
    ]);
    // containerd and runc twice: in the root (the bootstrap cluster's runtime) and in the file server's archives for the nodes.
    expect(locations("containerd")).toEqual([
      "/usr/local/bin/containerd",
      expect.stringMatching(
        /^file server \/kubespray\/github\.com\/containerd\/containerd\/releases\/download\/v[\d.]+\/containerd-[\d.]+-linux-amd64\.tar\.gz:bin\/containerd$/,
      ),
    ]);
    expect(locations("runc")).toEqual([
      "/usr/local/bin/runc",
      expect.stringMatching(/^file server \/kubespray\/github\.com\/opencontainers\/runc\/releases\/download\/v[\d.]+\/runc\.amd64$/),
    ]);
    for (const b of binaries) {
      expect(b.purl).toMatch(/^pkg:golang\//);
      expect(b.properties!.find((p) => p.name === "icn-bootstrap:go:version")!.value).toMatch(/^go1\.\d+/);
    }
    const modules = components.filter((c) => c.purl?.startsWith("pkg:golang/") && !c["bom-ref"].startsWith("go-binary:"));
    const images = components.filter((c) => c.type === "container");
    expect(images.map((c) => c.purl!.replace(/^.*@/, "").replace(/\?.*/, "")).sort()).toEqual(
      report.verification.registry.images.map((i: { digest: string }) => i.digest).sort(),
    );
    // The BPA image's bundle: every npm package it holds, each with a license, and the image depends on each.
    const npm = components.filter((c) => c.purl?.startsWith("pkg:npm/"));
    expect(npm.map((c) => c.name)).toEqual(expect.arrayContaining(["@kubernetes/client-node", "@tus/server", "js-yaml"]));
    const bpa = bom.dependencies.find((d: { ref: string }) => d.ref.startsWith("oci:bootstrap.icn:5000/icn/bpa:"));
    expect(bpa.dependsOn.filter((r: string) => r.startsWith("npm:")).sort()).toEqual(npm.map((c) => c["bom-ref"]).sort());
    // The PyPI packages of the runner image (kubespray's pinned requirements), of Ironic's image and of the deploy
    // ramdisk, as pypi purls each depends on: every one listed is one of theirs, each as its requirements.txt pins it.
    const pypi = components.filter((c) => c.purl?.startsWith("pkg:pypi/"));
    expect(pypi.map((c) => c.name)).toEqual(expect.arrayContaining(["ansible", "ansible-core", "cryptography", "jmespath", "netaddr", "ironic", "oslo-db"]));
    const pinned = (recipe: string) =>
      [...readFileSync(join(REPO, `images/${recipe}/requirements.txt`), "utf8").matchAll(/^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)/gm)]
        .map((m) => `pypi:${m[1]!.toLowerCase()}@${m[2]}`)
        .sort();
    const pypiOf = (ref: string) =>
      bom.dependencies
        .find((d: { ref: string }) => d.ref.startsWith(ref))
        .dependsOn.filter((r: string) => r.startsWith("pypi:"))
        .sort();
    const runnerPypi = pypiOf("oci:bootstrap.icn:5000/icn/kubespray-runner:");
    const ironicPypi = pypiOf("oci:bootstrap.icn:5000/icn/ironic:");
    expect(ironicPypi).toEqual(pinned("ironic"));
    expect(ironicPypi).toContain("pypi:ironic@39.0.0");
    const ipa = `pypi:ironic-python-agent@${/^ironic-python-agent==(\S+)/m.exec(readFileSync(join(REPO, "images/ipa-ramdisk/requirements.txt"), "utf8"))![1]}`;
    expect(pypi.map((c) => c["bom-ref"]).sort()).toEqual([...new Set([...runnerPypi, ...ironicPypi, ipa])].sort());
    // The deploy ramdisk: ironic-python-agent from PyPI on its own Debian set, the kernel from the same set.
    for (const file of ["/boot/ironic-python-agent.initramfs", "/boot/ironic-python-agent.kernel"]) {
      const served = bom.dependencies.find((d: { ref: string }) => d.ref === `file:${file}`);
      expect(served?.dependsOn, file).toEqual(expect.arrayContaining([ipa, "deb:os:ipa-ramdisk:linux-image-amd64", "deb:os:ipa-ramdisk:python3-cheroot"]));
      expect(served.dependsOn.filter((r: string) => r.startsWith("deb:")).every((r: string) => r.startsWith("deb:os:ipa-ramdisk:"))).toBe(true);
    }
    // Ironic's image has a Debian root of its own: it depends on that set's packages (its python3, the helpers), not on the shared base.
    const ironic = bom.dependencies.find((d: { ref: string }) => d.ref.startsWith("oci:bootstrap.icn:5000/icn/ironic:"));
    const ironicDebs = ironic.dependsOn.filter((r: string) => r.startsWith("deb:"));
    expect(ironicDebs.length).toBeGreaterThan(100);
    expect(ironicDebs.every((r: string) => r.startsWith("deb:own:ironic:"))).toBe(true);
    expect(ironicDebs).toEqual(expect.arrayContaining(["deb:own:ironic:python3.13", "deb:own:ironic:dnsmasq-base", "deb:own:ironic:ipmitool"]));
    expect(ironicDebs).not.toContain("deb:own:ironic:python3-ironic");
    const files = components.filter((c) => c.type === "file");
    const kubeadm = files.find((c) => c.name.endsWith("/bin/linux/amd64/kubeadm"))!;
    expect(kubeadm.hashes![0]!.content).toBe(binaries.find((b) => b.name === "kubeadm")!.hashes![0]!.content);
    const size = (await stat(path)).size;
    console.log(
      `SBOM ${path}: ${(size / 1024).toFixed(0)} KiB; ${debs.length} Debian packages (${rootfsDebs.length} in the root, ${debs.filter((c) => c["bom-ref"].startsWith("deb:base:")).length} in the images' base, ${debs.filter((c) => c["bom-ref"].startsWith("deb:toolchain:")).length} toolchain), ${binaries.length} Go binaries linking ${modules.length} Go modules (stdlib included), ${images.length} container images, ${npm.length} npm packages bundled, ${pypi.length} PyPI packages, ${files.length} served files`,
    );
  });

  it("verify passes the USB image and the qcow2 as built, and their signatures with the build's key", { timeout: VERIFY_TIMEOUT }, async () => {
    for (const file of [`${NAME}.img`, `${NAME}.qcow2`]) {
      const started = Date.now();
      const result = await runCli(["verify", join(outs[1]!, file), "--key", join(keys, "sign.pub")]);
      console.log(`verify ${file} (${((Date.now() - started) / 1000).toFixed(0)} s):\n${result.stdout}`);
      expect(result.exitCode, result.all).toBe(0);
      expect(result.stdout).toMatch(/ok\s+partition table/);
      expect(result.stdout).toMatch(/ok\s+root filesystem/);
      expect(result.stdout).toMatch(/ok\s+registry/);
      expect(result.stdout).toMatch(/ok\s+SBOM/);
      for (const check of ["report", "image", "SBOM"]) expect(result.stdout).toMatch(new RegExp(`ok\\s+${check} signature: \\S+ signature \\S+ verified with`));
      expect(result.stdout).toMatch(/verify: all \d+ checks passed/);
    }
  });

  it("verify passes an image whose site partition was rewritten by site write, and says so", { timeout: VERIFY_TIMEOUT }, async () => {
    const image = join(outs[0]!, "with-site.img");
    onTestFinished(() => rm(image, { force: true }));
    await copyImageSparse(join(outs[1]!, `${NAME}.img`), image);
    const site = join(outs[0]!, "site");
    await mkdir(site, { recursive: true });
    await writeFile(join(site, "site.yaml"), "version: 1\nhostname: site-a\n");
    expect((await runCli(["site", "write", site, image])).exitCode).toBe(0);
    const result = await runCli(["verify", image, "--report", join(outs[1]!, `${NAME}.report.json`)]);
    console.log(`verify with-site.img:\n${result.stdout}`);
    expect(result.exitCode, result.all).toBe(0);
    expect(result.stdout).toMatch(/ok\s+disk bytes: the USB image built, except its site partition/);
    // A byte changed outside the site partition still fails the disk bytes.
    await flipByteOfFile(image, 3, "/usr/local/bin/kubeadm");
    const tampered = await runCli(["verify", image, "--report", join(outs[1]!, `${NAME}.report.json`)]);
    expect(tampered.stdout).toMatch(/FAIL\s+disk bytes[^\n]*\n[^\n]*differs outside the site partition too/);
  });

  it("verify fails an image with one byte of a root filesystem file changed, naming the file", { timeout: VERIFY_TIMEOUT }, async () => {
    const image = join(outs[0]!, "tampered.img");
    onTestFinished(() => rm(image, { force: true }));
    await copyImageSparse(join(outs[1]!, `${NAME}.img`), image);
    await flipByteOfFile(image, 3, "/usr/local/bin/kubeadm");
    const result = await runCli(["verify", image, "--report", join(outs[1]!, `${NAME}.report.json`)]);
    console.log(`verify tampered.img (a byte of /usr/local/bin/kubeadm):\n${result.stdout}`);
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toMatch(/FAIL\s+disk bytes/);
    expect(result.stdout).toMatch(/ok\s+partition table/);
    expect(result.stdout).toMatch(/ok\s+boot code/);
    expect(result.stdout).toMatch(/FAIL\s+root filesystem[^\n]*\n\s+\/usr\/local\/bin\/kubeadm: differs/);
    expect(result.stdout.match(/^\s+\/\S+: (differs|missing|not in)/gm)).toHaveLength(1);
    expect(result.stdout).toMatch(/ok\s+registry/);
    expect(result.stdout).toMatch(/FAIL\s+SBOM[^\n]*\n\s+kubeadm: \/usr\/local\/bin\/kubeadm has sha256/);
    expect(result.stdout).toMatch(/verify: 3 of \d+ checks failed: disk bytes, root filesystem, SBOM/);
  });

  it("verify fails an image with one byte of a registry blob changed, naming the image and the blob", { timeout: VERIFY_TIMEOUT }, async () => {
    const report = JSON.parse(await readFile(join(outs[1]!, `${NAME}.report.json`), "utf8"));
    const pause = report.verification.registry.images.find((i: { ref: string }) => i.ref.startsWith("registry.k8s.io/pause:"));
    const image = join(outs[0]!, "tampered.img");
    onTestFinished(() => rm(image, { force: true }));
    await copyImageSparse(join(outs[1]!, `${NAME}.img`), image);
    // The manifest's blob: its bytes decide every other digest of the image.
    await flipByteOfFile(image, 3, `/${report.verification.registry.storage}/${blobPath(pause.digest)}`);
    const result = await runCli(["verify", image, "--report", join(outs[1]!, `${NAME}.report.json`)]);
    console.log(`verify tampered.img (a byte of ${pause.ref}'s manifest blob):\n${result.stdout}`);
    expect(result.exitCode).toBe(1);
    expect(result.stdout).toContain(`${pause.ref}: manifest ${pause.digest} has different content`);
    expect(result.stdout).toMatch(/FAIL\s+registry/);
    expect(result.stdout).toMatch(/FAIL\s+root filesystem/);
  });
});
