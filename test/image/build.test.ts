import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { debianSets, loadLock } from "../../builder/lockfile.js";
import { REPO, runCli, spawnCli, type CliResult } from "../helpers/cli.js";
import { writeDefinition } from "../helpers/definition.js";
import { debugfs, partitionAddress, partitions, statInFs } from "../helpers/image.js";

const BUILD_TIMEOUT = 40 * 60_000;

async function sha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** The default definition plus extra overlay files, changed by `patch` on its YAML text. */
async function customDefinition(extraOverlay: Record<string, string>, patch: (yaml: string) => string = (y) => y) {
  const path = await writeDefinition(() => undefined, extraOverlay);
  await writeFile(path, patch(await readFile(path, "utf8")));
  return path;
}

/** An output directory for one test, removed when the test ends (built images are gigabytes). */
async function testOut(prefix = "icn-out-"): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

describe("icn-bootstrap build with the default definition", () => {
  let out: string;
  let build: CliResult;
  let img: string;
  let qcow2: string;

  beforeAll(async () => {
    out = await mkdtemp(join(tmpdir(), "icn-out-"));
    build = await runCli(["build", "--out", out]);
    img = join(out, "icn-bootstrap.img");
    qcow2 = join(out, "icn-bootstrap.qcow2");
  }, BUILD_TIMEOUT);
  afterAll(async () => {
    if (out) await rm(out, { recursive: true, force: true });
  });

  // Hashes every output (5.5 GiB): seconds on a quiet host, more than the default minute on a busy one.
  it("succeeds and prints each image's path, size and true sha256", { timeout: 5 * 60_000 }, async () => {
    expect(build.exitCode, build.all).toBe(0);
    for (const image of [img, qcow2]) {
      expect(build.stdout).toContain(image);
      expect(build.stdout).toContain(await sha256(image));
    }
    expect(build.stderr).toMatch(/rootfs\s+(reused|done in)/);
    expect((await readdir(out)).sort()).toEqual([
      "icn-bootstrap.cdx.json",
      "icn-bootstrap.contents.txt",
      "icn-bootstrap.img",
      "icn-bootstrap.qcow2",
      "icn-bootstrap.report.json",
      "infra-local-controller-0.1.0.tgz",
    ]);
    // The components' chart beside the images: the archive Helm packaged, printed with its sha256.
    const chart = join(out, "infra-local-controller-0.1.0.tgz");
    expect(build.stdout).toContain(`${chart}  (the components' Helm chart`);
    expect(build.stdout).toContain(await sha256(chart));
    const listing = await execa("tar", ["-tzf", chart]);
    expect(listing.stdout.split("\n")).toEqual(
      expect.arrayContaining([
        "infra-local-controller/Chart.yaml",
        "infra-local-controller/values.yaml",
        "infra-local-controller/files/manifests/bpa/deployment.yaml",
      ]),
    );
  });

  it("writes a GPT with a BIOS boot partition, an EFI system partition, the site partition and a root partition", async () => {
    const table = await partitions(img);
    expect(table.map((p) => [p.number, p.code, p.name])).toEqual([
      [1, "EF02", "BIOS boot"],
      [2, "EF00", "EFI system"],
      [3, "8304", "root"],
      [4, "0700", "ICN-SITE"],
    ]);
    for (const p of table) expect(p.start % 2048).toBe(0);
    expect(table[3]!.end).toBeLessThan(table[2]!.start); // the root comes last on the disk: it grows at first boot
  });

  it("ships the site partition as FAT labelled ICN-SITE with the documented, valid site.yaml template", async () => {
    const { mtools } = await partitionAddress(img, 4);
    const start = (await partitions(img)).find((p) => p.number === 4)!.start * 512;
    expect((await execa("blkid", ["-p", "-s", "LABEL", "-o", "value", "-O", String(start), img])).stdout.trim()).toBe("ICN-SITE");
    expect((await execa("mdir", ["-/", "-b", "-i", mtools, "::/"])).stdout.split("\n").sort()).toEqual([
      "::/manifests/",
      "::/manifests/README.txt",
      "::/site.yaml",
    ]);
    const folder = await mkdtemp(join(tmpdir(), "icn-shipped-site-"));
    await execa("mcopy", ["-s", "-i", mtools, "::/site.yaml", "::/manifests", folder]);
    expect(await readFile(join(folder, "site.yaml"), "utf8")).toMatch(/^# Site settings of an ICN bootstrap appliance/);
    const check = await runCli(["site", "check", folder]);
    expect(check.exitCode, check.all).toBe(0);
    await rm(folder, { recursive: true, force: true });
  });

  it("boots UEFI from the removable-media path and BIOS from the MBR, through the system slots' selector on the ESP", async () => {
    const { mtools } = await partitionAddress(img, 2);
    const { stdout } = await execa("mdir", ["-b", "-i", mtools, "::/EFI/BOOT"]);
    expect(stdout).toMatch(/BOOTX64\.EFI/);
    // The selector and its grubenv: slot A by default, no try pending.
    const selector = (await execa("mtype", ["-i", mtools, "::/icn-bootstrap/grub.cfg"])).stdout;
    expect(selector).toMatch(/load_env --file \$icn_env default_slot try_slot/);
    const env = join(await testOut("icn-grubenv-"), "grubenv");
    await execa("mcopy", ["-i", mtools, "::/icn-bootstrap/grubenv", env]);
    expect((await execa("grub-editenv", [env, "list"])).stdout).toBe("default_slot=a");
    const head = Buffer.alloc(512);
    const fd = await import("node:fs/promises").then((fs) => fs.open(img));
    await fd.read(head, 0, 512, 0);
    await fd.close();
    expect(head.readUInt16LE(510)).toBe(0xaa55);
    const bios = (await partitions(img))[0]!;
    expect(head.readBigUInt64LE(0x5c)).toBe(BigInt(bios.start)); // GRUB's boot.img points at core.img
  });

  it("has a clean ext4 root with the first-boot units enabled and no per-machine identity", async () => {
    const { ext } = await partitionAddress(img, 3);
    await execa("e2fsck", ["-f", "-n", ext]);
    for (const unit of ["icn-disk-layout.service", "icn-data.service", "icn-identity.service", "icn-ready.service"]) {
      expect(await statInFs(ext, `/etc/systemd/system/${unit}`), unit).toMatchObject({ type: "regular", uid: 0 });
    }
    expect(await statInFs(ext, "/etc/systemd/system/multi-user.target.wants/icn-ready.service")).toMatchObject({ type: "symlink" });
    for (const unit of ["icn-disk-layout.service", "icn-data.service"])
      expect(await statInFs(ext, `/etc/systemd/system/local-fs.target.wants/${unit}`), unit).toMatchObject({ type: "symlink" });
    expect(await statInFs(ext, "/etc/systemd/system/multi-user.target.wants/systemd-networkd.service")).toMatchObject({ type: "symlink" });
    for (const script of ["disk-layout", "data-partition"])
      expect(await statInFs(ext, `/usr/lib/icn-bootstrap/${script}`), script).toMatchObject({ type: "regular", mode: "0755" });
    expect(await debugfs(ext, "cat /etc/icn-bootstrap/appliance.env")).toMatch(/^ICN_SLOT_MIB=8192$/m);
    expect(await statInFs(ext, "/etc/machine-id")).toMatchObject({ size: 0 });
    expect(await debugfs(ext, "ls /etc/ssh")).not.toMatch(/ssh_host_/);
    expect(await statInFs(ext, "/etc/hostname")).toBeUndefined();
    const uuid = (await execa("blkid", ["-p", "-s", "UUID", "-o", "value", "-O", String((await partitions(img))[2]!.start * 512), img])).stdout.trim();
    expect(uuid).toMatch(/^[0-9a-f-]{36}$/);
    const grubCfg = await debugfs(ext, "cat /boot/grub/grub.cfg");
    expect(grubCfg).toMatch(/console=ttyS0,115200n8/);
    expect(grubCfg).toContain(`set rootarg=UUID=${uuid}`); // PARTUUID of the partition GRUB booted, else this
    expect(grubCfg).toMatch(/linux \/vmlinuz root=\$rootarg rw icn\.slot=\$icn_slot /);
    expect(await debugfs(ext, "cat /etc/systemd/network/20-wired.network")).toMatch(/DHCP=yes/);
    expect(await statInFs(ext, "/etc/systemd/network/10-static.network")).toBeUndefined(); // no static config in the default definition
    // The bootstrap cluster: pinned node binaries and helm, the kubeadm configuration, the components' chart and the first-boot unit.
    for (const binary of ["kubelet", "kubeadm", "kubectl", "helm"])
      expect(await statInFs(ext, `/usr/local/bin/${binary}`), binary).toMatchObject({ type: "regular", mode: "0755" });
    expect(await debugfs(ext, "cat /etc/icn-bootstrap/kubeadm.yaml")).toMatch(/advertiseAddress: 10\.254\.254\.254/);
    expect(await statInFs(ext, "/etc/systemd/system/multi-user.target.wants/icn-kubernetes.service")).toMatchObject({ type: "symlink" });
    // The Secrets' key: unsealed at every boot before the kubelet, by systemd-creds through the TPM software stack.
    expect(await statInFs(ext, "/etc/systemd/system/multi-user.target.wants/icn-secrets-key.service")).toMatchObject({ type: "symlink" });
    expect(await debugfs(ext, "cat /etc/icn-bootstrap/kubeadm.yaml")).toContain(
      "name: encryption-provider-config, value: /etc/kubernetes/icn-secrets/encryption.yaml",
    );
    for (const library of ["libtss2-esys.so.0", "libtss2-rc.so.0", "libtss2-mu.so.0", "libtss2-tcti-device.so.0"])
      expect(await statInFs(ext, `/usr/lib/x86_64-linux-gnu/${library}`), library).toMatchObject({ type: "symlink" });
    // Without a TPM, age 1.3 and its passphrase plugin keep it (secrets.key: medium or passphrase).
    for (const binary of ["age", "age-keygen", "age-plugin-batchpass"])
      expect(await statInFs(ext, `/usr/local/bin/${binary}`), binary).toMatchObject({ type: "regular", mode: "0755" });
    // The first boot installs the BPA, Metal3 and Ironic from the very chart written beside the images: one source, no copy of the manifests.
    const chartInRoot = join(await testOut("icn-chart-"), "chart.tgz");
    await execa("debugfs", ["-R", `dump /usr/share/icn-bootstrap/infra-local-controller.tgz ${chartInRoot}`, ext], { stderr: "ignore" });
    expect(await sha256(chartInRoot)).toBe(await sha256(join(out, "infra-local-controller-0.1.0.tgz")));
    const chartFiles = (await execa("tar", ["-tzf", chartInRoot])).stdout.split("\n");
    expect(chartFiles).toContain("infra-local-controller/files/metal3/crds/metal3.io_baremetalhosts.yaml");
    expect(chartFiles).toContain("infra-local-controller/files/manifests/bpa/deployment.yaml");
    for (const gone of ["crds/provisioning.yaml", "bpa/deployment.yaml", "metal3/baremetal-operator.yaml"])
      expect(await statInFs(ext, `/usr/share/icn-bootstrap/manifests/${gone}`), gone).toBeUndefined();
    // Ironic's deploy ramdisk on the file server, where the baremetal-operator's settings point.
    for (const file of ["ironic-python-agent.kernel", "ironic-python-agent.initramfs"])
      expect(await debugfs(ext, `cat /srv/icn-bootstrap/files/boot/${file}.sha256sum`)).toMatch(new RegExp(`^[0-9a-f]{64}  ${file.replace(".", "\\.")}$`)); // execa strips the final newline
    // What the appliance serves to kubespray, for the BPA: the build's pins as a ConfigMap applied at first boot.
    expect(await debugfs(ext, "cat /usr/share/icn-bootstrap/manifests/bpa/kubespray-pins.yaml")).toMatch(/name: bpa-kubespray-pins[\s\S]*kubeadm_checksums:/);
  });

  it("writes a compressed qcow2 that holds the same disk as the USB image", async () => {
    const info = JSON.parse((await execa("qemu-img", ["info", "--output=json", qcow2])).stdout);
    expect(info.format).toBe("qcow2");
    expect(info["virtual-size"]).toBe(32 * 1024 ** 3);
    await execa("qemu-img", ["check", qcow2]);
    const compare = await execa("qemu-img", ["compare", "-f", "raw", "-F", "qcow2", img, qcow2], { reject: false });
    expect(compare.stdout).toMatch(/Images are identical/);
  });

  it("writes a report with the package list and every stage", async () => {
    const report = JSON.parse(await readFile(join(out, "icn-bootstrap.report.json"), "utf8"));
    expect(report.stages.map((s: { name: string }) => s.name)).toEqual([
      "rootfs",
      "kubernetes",
      "files",
      "image-base",
      "image-compile",
      // The Debian roots of their own: Ironic's, the site services'.
      "image-root",
      "image-root",
      "images",
      "registry",
      "os-rootfs",
      "os-image",
      "os-rootfs",
      "ramdisk",
      "controller-chart",
      "overlays",
      "disk",
      "image",
      "qcow2",
    ]);
    const lock = await loadLock(join(REPO, "appliance.lock.yaml"));
    const systemd = report.sbom.debianPackages.find((p: { name: string }) => p.name === "systemd");
    expect(systemd.version).toBe(lock.debian.packages.systemd!.version);
    // Every pinned file of the lock, once, with where this build took it from.
    const pinned = new Set(debianSets(lock).flatMap((set) => Object.values(set.packages).map((pin) => pin.sha256)));
    expect(new Set(report.sbom.debianFiles.map((f: { sha256: string }) => f.sha256))).toEqual(pinned);
    for (const file of report.sbom.debianFiles) expect(["cache", "pool", "snapshot"]).toContain(file.from);
    const systemdFile = report.sbom.debianFiles.find((f: { name: string; sha256: string }) => f.sha256 === lock.debian.packages.systemd!.sha256);
    expect(systemdFile.url).toMatch(new RegExp(`/${lock.debian.packages.systemd!.filename.replace(/[.+]/g, "\\$&")}$`));
    expect(report.images.usb.sha256).toBe(await sha256(img));
  });
});

describe("rebuilds and bad input", () => {
  it("an overlay-only change rebuilds only the overlay stages and the new file is in the image", { timeout: BUILD_TIMEOUT }, async () => {
    const marker = `marker-${Date.now()}`;
    const definition = await customDefinition({ "etc/icn-bootstrap/test-marker": marker });
    const out = await testOut();
    const result = await runCli(["build", "--definition", definition, "--format", "usb", "--out", out]);
    expect(result.exitCode, result.all).toBe(0);
    expect(result.stderr).toMatch(/rootfs\s+reused/);
    expect(result.stderr).toMatch(/disk\s+reused/);
    expect(result.stderr).toMatch(/image\s+started/);
    const { ext } = await partitionAddress(join(out, "icn-bootstrap.img"), 3);
    expect((await debugfs(ext, "cat /etc/icn-bootstrap/test-marker")).trim()).toBe(marker);
    expect(await readdir(out)).not.toContain("icn-bootstrap.qcow2");
  });

  it("a wrong definition fails naming the field, and writes nothing", async () => {
    const definition = await customDefinition({}, (y) => y.replace("dhcp: true", "dhcp: sometimes"));
    const out = join(await testOut(), "out");
    const result = await runCli(["build", "--definition", definition, "--out", out]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toMatch(/network\.dhcp: expected boolean, got string/);
    expect(result.stderr).toMatch(/fix: /);
    await expect(readdir(out)).rejects.toThrow(/ENOENT/);
  });

  it("a package the lock file does not pin fails the build before anything is built", async () => {
    const definition = await customDefinition({}, (y) => y.replace("    - less\n", "    - less\n    - htop\n"));
    const result = await runCli(["build", "--definition", definition, "--out", await testOut()]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toMatch(/asks for Debian package that the lock file does not pin: htop/);
    expect(result.stderr).toMatch(/icn-bootstrap lock/);
  });

  it("an unknown format is rejected with the valid ones", async () => {
    const result = await runCli(["build", "--format", "usb,iso"]);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toMatch(/--format: unknown format 'iso'/);
    expect(result.stderr).toMatch(/usb, qcow2/);
  });

  it("an interrupted build leaves nothing under the final names and no partial stage output", { timeout: BUILD_TIMEOUT }, async () => {
    const definition = await customDefinition({ "etc/icn-bootstrap/interrupt-marker": `x-${Date.now()}` });
    const out = await testOut();
    const child = spawnCli(["build", "--definition", definition, "--out", out]);
    await new Promise<void>((resolve) => {
      child.stderr?.on("data", (chunk: Buffer) => {
        if (/image\s+started/.test(chunk.toString())) {
          child.kill("SIGINT");
          resolve();
        }
      });
    });
    const result = await child;
    expect(result.exitCode).toBe(130);
    expect(result.stderr).toMatch(/interrupted \(SIGINT\): partial outputs removed/);
    expect(await readdir(out)).toEqual([]);
    const cache = process.env.ICN_BOOTSTRAP_CACHE ?? join(process.env.HOME ?? "/root", ".cache/icn-bootstrap");
    const partial = (await readdir(join(cache, "stages", "image"))).filter((n) => n.includes(`.partial-${child.pid}`) && !n.endsWith(".log"));
    expect(partial).toEqual([]);
    // Nor a lock that would make the next build wait for it (builds running at once wait for the lock's holder).
    const stageDir = join(cache, "stages", "image");
    const locks = (await readdir(stageDir)).filter((n) => n.endsWith(".lock"));
    const holders = await Promise.all(locks.map((n) => readFile(join(stageDir, n), "utf8").catch(() => "")));
    expect(holders).not.toContain(String(child.pid));
  });

  it.runIf(process.getuid?.() === 0)(
    "a full output disk fails clearly and leaves no image (tmpfs of 100 MiB; needs root to mount)",
    { timeout: BUILD_TIMEOUT },
    async () => {
      const out = await mkdtemp(join(tmpdir(), "icn-full-"));
      await execa("mount", ["-t", "tmpfs", "-o", "size=100m", "tmpfs", out]);
      try {
        const result = await runCli(["build", "--out", out]);
        expect(result.exitCode).toBe(1);
        expect(result.stderr).toMatch(/no space left to write/);
        expect(result.stderr).toMatch(/--out/);
        expect(await readdir(out)).toEqual([]);
      } finally {
        await execa("umount", [out]);
      }
    },
  );
});
