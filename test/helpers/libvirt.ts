/**
 * A private libvirtd for a test that emulates servers behind a BMC (sushy-tools drives
 * libvirt): Debian's libvirtd, run in the test's network namespace (its VMs' NICs join
 * the test's bridges) and in a mount namespace of its own, where /etc/libvirt,
 * /run/libvirt, /var/lib/libvirt, /var/log/libvirt and /var/cache/libvirt are
 * directories of the test. So nothing of the host's libvirt (if any) is used or changed.
 *
 * Its qemu.conf: QEMU runs as root without a security driver, cgroups or a logging daemon
 * (a test machine may be a container without them); domains are of type "qemu" (TCG)
 * unless KVM works. Needs libvirt-daemon, libvirt-daemon-driver-qemu and python3-libvirt
 * (scripts/setup-host.sh installs them).
 */
import { copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa, type ResultPromise } from "execa";

export interface Libvirt {
  /** The connection URI (qemu:///system through the private socket). */
  uri: string;
  log: string;
  stop(): Promise<void>;
}

const MOUNTS = ["/etc/libvirt", "/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"];

export async function startLibvirt(work: string): Promise<Libvirt> {
  const dir = join(work, "libvirt");
  const binds: [string, string][] = [];
  for (const target of MOUNTS) {
    const source = join(dir, target.replaceAll("/", "_"));
    await mkdir(source, { recursive: true });
    await mkdir(target, { recursive: true });
    binds.push([source, target]);
  }
  const etc = binds[0]![0];
  await writeFile(
    join(etc, "libvirtd.conf"),
    ['unix_sock_group = "root"', 'unix_sock_rw_perms = "0700"', 'auth_unix_rw = "none"', 'log_outputs = "3:stderr"', ""].join("\n"),
  );
  await writeFile(
    join(etc, "qemu.conf"),
    [
      'user = "root"',
      'group = "root"',
      "dynamic_ownership = 0",
      "remember_owner = 0",
      'security_driver = "none"',
      "cgroup_controllers = [ ]",
      "namespaces = [ ]",
      'stdio_handler = "file"',
      "",
    ].join("\n"),
  );
  // libvirt's QEMU driver resolves its build-time default user before it reads qemu.conf.
  const passwd = join(dir, "passwd");
  const group = join(dir, "group");
  await writeFile(passwd, `${await readFile("/etc/passwd", "utf8")}libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n`);
  await copyFile("/etc/group", group);
  await writeFile(group, `${await readFile(group, "utf8")}libvirt-qemu:x:64055:\n`);
  binds.push([passwd, "/etc/passwd"], [group, "/etc/group"]);
  const script = `${binds.map(([s, t]) => `mount --bind '${s}' '${t}'`).join(" && ")} && exec libvirtd`;
  const log = join(dir, "libvirtd.log");
  const daemon: ResultPromise = execa("unshare", ["--mount", "sh", "-c", script], { reject: false, stdout: { file: log }, stderr: { file: log } });
  const socket = join(binds[1]![0], "libvirt-sock");
  const uri = `qemu:///system?socket=${socket}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (typeof daemon.exitCode === "number") throw new Error(`libvirtd exited (${daemon.exitCode}):\n${(await readFile(log, "utf8")).slice(-2000)}`);
    if ((await execa("virsh", ["-c", uri, "version"], { reject: false })).exitCode === 0) break;
    if (Date.now() > deadline) throw new Error(`libvirtd did not answer on ${socket} within 60 s:\n${(await readFile(log, "utf8")).slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  // The "default" storage pool: where sushy-tools puts the ISOs a BMC's virtual media is given.
  const pool = join(dir, "pool");
  await mkdir(pool, { recursive: true });
  await execa("virsh", ["-c", uri, "pool-define-as", "default", "dir", "--target", pool]);
  await execa("virsh", ["-c", uri, "pool-start", "default"]);
  return {
    uri,
    log,
    async stop() {
      const domains = await execa("virsh", ["-c", uri, "list", "--all", "--name"], { reject: false });
      for (const name of domains.stdout.split("\n").filter(Boolean)) {
        await execa("virsh", ["-c", uri, "destroy", name], { reject: false });
        await execa("virsh", ["-c", uri, "undefine", name, "--nvram"], { reject: false });
      }
      daemon.kill();
      await daemon;
    },
  };
}

export interface DomainSpec {
  name: string;
  uuid: string;
  memoryMiB: number;
  cpus: number;
  disk: string;
  bridge: string;
  mac: string;
  console: string;
  /** KVM when it works, else TCG ("qemu"). */
  type: "kvm" | "qemu";
  /** UEFI: OVMF (Secure Boot off), its variables in `<disk>.VARS.fd`; default: BIOS (SeaBIOS). */
  firmware?: "bios" | "uefi";
}

/** The UEFI firmware of the VMs, and what the BMC emulator sets when asked for UEFI (bmc-emulator.ts). */
export const OVMF = { code: "/usr/share/OVMF/OVMF_CODE_4M.fd", vars: "/usr/share/OVMF/OVMF_VARS_4M.fd" };

/** A server with a blank disk and one NIC, off, booting from the network first (its BMC changes that). */
export function domainXml(d: DomainSpec): string {
  const firmware =
    d.firmware === "uefi"
      ? `<loader readonly='yes' secure='no' type='pflash'>${OVMF.code}</loader><nvram template='${OVMF.vars}'>${d.disk}.VARS.fd</nvram>`
      : "";
  return `<domain type='${d.type}'>
  <name>${d.name}</name>
  <uuid>${d.uuid}</uuid>
  <memory unit='MiB'>${d.memoryMiB}</memory>
  <vcpu>${d.cpus}</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type>${firmware}<boot dev='network'/><boot dev='hd'/></os>
  ${d.firmware === "uefi" ? "<features><acpi/></features>" : ""}
  <cpu mode='${d.type === "kvm" ? "host-passthrough" : "maximum"}' check='none'/>
  <on_reboot>restart</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='${d.disk}'/><target dev='vda' bus='virtio'/><serial>${d.name}-disk</serial></disk>
    <interface type='bridge'><source bridge='${d.bridge}'/><mac address='${d.mac}'/><model type='virtio'/></interface>
    <serial type='file'><source path='${d.console}' append='on'/><target port='0'/></serial>
  </devices>
</domain>
`;
}
