import { access, copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { UserError } from "../errors.js";
import { requireFile, requireTools } from "../host-tools.js";
import { log } from "../log.js";
import { chooseAccel, type Accel } from "./accel.js";
import { ConsoleTail } from "./console.js";
import { startQemuTpm, type QemuTpm } from "./tpm.js";

export type Firmware = "bios" | "uefi";
export const READY_MARKER = /ICN-BOOTSTRAP-READY.*/;
// An ordering cycle ends the boot too: systemd breaks it by dropping one of the jobs, not
// always the same one, so the appliance would come up only some of the time.
const FAILED_MARKER = /ICN-BOOTSTRAP-FAILED.*|Kernel panic.*|Found ordering cycle.*/;
const OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd";
const OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd";

export interface BootOptions {
  image: string;
  firmware: Firmware;
  /**
   * A TPM 2.0 (swtpm), as servers have: the appliance seals the key of its cluster's
   * Secrets to it. Its state is kept beside `disk` (DISK.tpm/), so one machine keeps its
   * TPM across boots; without `disk`, it lives as long as this boot. Default true.
   */
  tpm?: boolean;
  /** How long to wait for the ready marker; a VM kept running (keepRunning) lives on after it. */
  timeoutSeconds: number;
  memoryMiB?: number;
  /** Virtual CPUs (default 2). */
  cpus?: number;
  /** Virtual size of the disk the guest sees: larger than the image, so first boot grows root. */
  diskSize?: string;
  accel?: Accel;
  /** Extra `-nic user` options such as hostfwd=tcp:127.0.0.1:6443-:6443. */
  hostForwards?: string[];
  /**
   * Connections the guest makes to one address of its user network, forwarded to the host:
   * guestfwd=tcp:10.0.2.100:8000-cmd:socat - TCP:127.0.0.1:8000, a process per connection
   * (the rest stays cut off, restrict=on).
   */
  guestForwards?: string[];
  /**
   * The first NIC on a tap device the caller made (its own network, e.g. in a network
   * namespace of a test) instead of QEMU's user network; hostForwards do not apply then.
   */
  tap?: { ifname: string; mac: string };
  /** Called for every console line (for callers that watch more than the marker). */
  onLine?: (line: string) => void;
  /**
   * A qcow2 overlay to boot from, kept by the caller so a second boot sees what the first
   * wrote (reboot tests). Created on first use; by default a throw-away one is used.
   */
  disk?: string;
  /** Pull the plug (SIGKILL, no shutdown) as soon as a console line matches: a power cut. */
  powerCutOn?: RegExp;
  /**
   * How the guest's disks meet the host's page cache (QEMU's cache=): default "unsafe"
   * (see diskCache), "writeback" for a boot whose disk must survive a SIGKILL intact
   * (every boot with powerCutOn gets it).
   */
  diskCache?: "unsafe" | "writeback";
  /** What counts as ready (default: the appliance's ready marker). */
  readyPattern?: RegExp;
  /** Leave the VM running once ready: the result's stop() shuts it down (tests that talk to the appliance). */
  keepRunning?: boolean;
  /** Under TCG: one host thread per vCPU (faster, see accelArgs) instead of one for all. */
  tcgMultiThread?: boolean;
  /** Disk images attached after the boot disk as virtio disks, read-write: raw, or qcow2 by extension (a site disk, an internal disk to install to). */
  extraDisks?: (string | { file: string; serial: string })[];
  /** The boot disk's serial number (the guest's /dev/disk/by-id names carry it). */
  serial?: string;
  /** More NICs, each on its own isolated user network, at a fixed PCI slot (the guest names it enp0s<slot>). */
  extraNics?: { pciSlot: number; mac?: string }[];
  /** What counts as a failure that ends the boot (default: any ICN-BOOTSTRAP-FAILED line). */
  failurePattern?: RegExp;
  /** Called on a failure line while the VM still runs (e.g. to read the journal over SSH); the VM is stopped when it settles. */
  beforeStopOnFailure?: (failure: string) => Promise<void>;
  /** Boot from the tap NIC (its firmware's iPXE ROM) instead of the disk, which stays attached. */
  networkBoot?: boolean;
  /**
   * Network-boot with the firmware's own PXE client (OVMF's), as a server's firmware does:
   * the NIC gets no option ROM, so no iPXE until the DHCP server hands one out.
   */
  firmwarePxe?: boolean;
  /** Run QEMU in this network namespace (`ip netns exec`; a tap device there). */
  netns?: string;
  /** An ISO in a SATA CD-ROM drive, booted first (a BMC's virtual media); the disk stays attached. */
  cdrom?: string;
  /** More NICs on tap devices the caller made (another network of the test's), each at a fixed PCI slot (the guest names it enp0s<slot>). */
  extraTaps?: { ifname: string; mac: string; pciSlot: number }[];
}

export interface BootResult {
  ready: boolean;
  /** The run was ended on purpose by powerCutOn. */
  powerCut: boolean;
  readyLine?: string;
  failure?: string;
  seconds: number;
  accel: Accel;
  /** The console's last lines (still updated while a kept VM runs). */
  lastLines: string[];
  /** With keepRunning: stops the VM (SIGTERM to QEMU) and removes its temporary files. */
  stop?: () => Promise<void>;
  /** With keepRunning: resolves when QEMU exits by itself (the guest powered off), or false after `ms`. */
  exited?: (ms: number) => Promise<boolean>;
}

/** How a format is attached: a USB image as a USB stick on xHCI, as a real stick would be. */
export function imageKind(image: string): "usb" | "qcow2" {
  return image.endsWith(".qcow2") ? "qcow2" : "usb";
}

/**
 * Boots an image in QEMU and watches its serial console until the ready marker, a
 * failure marker, or the timeout. The image itself is never written: the guest runs on
 * a temporary qcow2 overlay.
 */
export async function bootImage(options: BootOptions): Promise<BootResult> {
  await requireTools(["qemu-system-x86_64", "qemu-img"]);
  if (options.firmware === "uefi") await requireFile(OVMF_CODE, "ovmf");
  const work = await mkdtemp(join(tmpdir(), "icn-boot-"));
  let keep = false;
  let tpm: QemuTpm | undefined;
  try {
    const overlay = options.disk ?? join(work, "disk.qcow2");
    const backingFormat = imageKind(options.image) === "qcow2" ? "qcow2" : "raw";
    if (!(await exists(overlay))) {
      await execa("qemu-img", ["create", "-q", "-f", "qcow2", "-b", options.image, "-F", backingFormat, overlay, options.diskSize ?? "16G"]).catch((error) => {
        throw new UserError(
          `cannot use ${options.image} as a boot disk: ${error.stderr || error.message}`,
          "pass an image built by 'icn-bootstrap build' (.img or .qcow2)",
        );
      });
    }
    const machine = await machineArgs(options, overlay, work);
    const accel = await chooseAccel([...machine, "-snapshot"], options.accel);
    // After the KVM probe: swtpm serves one QEMU run and ends with it.
    tpm = options.tpm === false ? undefined : await startQemuTpm(options.disk ? `${options.disk}.tpm` : join(work, "tpm"), work);
    const result = await watchConsole(
      [...accelArgs(accel, options.tcgMultiThread), ...machine, ...(tpm?.args ?? [])],
      consolePath(work),
      options,
      accel,
      async () => {
        tpm?.stop();
        await rm(work, { recursive: true, force: true });
      },
    );
    keep = Boolean(result.stop);
    return result;
  } finally {
    if (!keep) {
      tpm?.stop();
      await rm(work, { recursive: true, force: true });
    }
  }
}

/**
 * TCG runs single-threaded by default: multi-threaded TCG races the kernel's live code
 * patching across vCPUs (seen here as early kernel panics in a few percent of boots).
 * ICN_BOOTSTRAP_TCG_THREAD=multi trades that for speed.
 */
function accelArgs(accel: Accel, multiThread = false): string[] {
  if (accel === "kvm") return ["-accel", "kvm", "-cpu", "host"];
  const thread = multiThread || process.env.ICN_BOOTSTRAP_TCG_THREAD === "multi" ? "multi" : "single";
  return ["-accel", `tcg,thread=${thread}`, "-cpu", process.env.ICN_BOOTSTRAP_TCG_CPU || TCG_CPU];
}

/**
 * The CPU a TCG guest sees: every feature TCG emulates but ERMS and AVX/AVX2. With them
 * the guest kernel copies with `rep movsb` (emulated a byte at a time) and Go's hashing
 * and copying take AVX2 paths that TCG runs through helpers: the default appliance's API
 * server was ready 353 s into kubeadm init without them, 695-795 s with QEMU's plain
 * `max` (2 vCPUs, this project's 2-core machine). BMI2/ADX stay (TLS and certificate
 * work). ICN_BOOTSTRAP_TCG_CPU names another QEMU CPU model, to compare boots
 * (docs/testing.md).
 */
const TCG_CPU = "max,-erms,-avx,-avx2";

/**
 * A guest's flush (etcd's fsync, the journal's commit) reaches the host as an fdatasync of
 * the whole disk's file, which must first write back every byte the guest wrote to it:
 * under image unpacking in the guest, etcd's WAL fsync took 138 ms on average here
 * (797 fsyncs, first boot) and its requests timed out. A throw-away test disk needs no
 * host durability, so flushes stop at the host's page cache ("unsafe"): the guest still
 * writes, orders and flushes as on hardware, and what it wrote survives QEMU's exit.
 * Killing QEMU could leave qcow2's own metadata half written, so a boot that simulates a
 * power cut keeps "writeback".
 */
export function diskCache(options: Pick<BootOptions, "diskCache" | "powerCutOn">): "unsafe" | "writeback" {
  return options.diskCache ?? (options.powerCutOn ? "writeback" : "unsafe");
}

async function machineArgs(options: BootOptions, overlay: string, work: string): Promise<string[]> {
  const cache = diskCache(options);
  const args = [
    "-machine",
    "q35",
    "-smp",
    String(options.cpus ?? 2),
    "-m",
    String(options.memoryMiB ?? 2048),
    "-nodefaults",
    "-display",
    "none",
    "-monitor",
    "none",
    "-no-reboot",
  ];
  args.push("-chardev", `file,id=console,path=${consolePath(work)}`, "-serial", "chardev:console");
  if (options.firmware === "uefi") {
    const vars = join(work, "OVMF_VARS.fd");
    await copyFile(OVMF_VARS, vars);
    args.push("-drive", `if=pflash,format=raw,readonly=on,file=${OVMF_CODE}`, "-drive", `if=pflash,format=raw,file=${vars}`);
  }
  if (imageKind(options.image) === "usb") {
    args.push(
      "-device",
      "qemu-xhci,id=xhci",
      "-drive",
      `if=none,id=stick,format=qcow2,cache=${cache},file=${overlay}`,
      "-device",
      `usb-storage,bus=xhci.0,drive=stick,removable=on,bootindex=${options.cdrom ? 1 : 0}${options.serial ? `,serial=${options.serial}` : ""}`,
    );
  } else {
    args.push(
      "-drive",
      `if=none,id=disk,format=qcow2,cache=${cache},file=${overlay}`,
      "-device",
      `virtio-blk-pci,drive=disk${options.networkBoot || options.cdrom ? "" : ",bootindex=0"}${options.serial ? `,serial=${options.serial}` : ""}`,
    );
  }
  if (options.cdrom)
    args.push("-drive", `if=none,id=cd,media=cdrom,readonly=on,format=raw,file=${options.cdrom}`, "-device", "ide-cd,drive=cd,bus=ide.0,bootindex=0");
  if (options.tap) {
    args.push(
      "-netdev",
      `tap,id=tapnet,ifname=${options.tap.ifname},script=no,downscript=no`,
      "-device",
      `virtio-net-pci,netdev=tapnet,mac=${options.tap.mac}${options.networkBoot ? ",bootindex=0" : ""}${options.firmwarePxe ? ",romfile=" : ""}`,
    );
  } else {
    // restrict=on: the guest has a NIC and DHCP, but no way out of this machine.
    const forwards = [...(options.hostForwards ?? []).map((f) => `,hostfwd=${f}`), ...(options.guestForwards ?? []).map((f) => `,guestfwd=${f}`)].join("");
    args.push("-nic", `user,model=virtio-net-pci,restrict=on${forwards}`);
  }
  (options.extraDisks ?? []).forEach((disk, i) => {
    const { file, serial } = typeof disk === "string" ? { file: disk, serial: undefined } : disk;
    args.push(
      "-drive",
      `if=none,id=extra${i},format=${file.endsWith(".qcow2") ? "qcow2" : "raw"},cache=${cache},file=${file}`,
      "-device",
      `virtio-blk-pci,drive=extra${i}${serial ? `,serial=${serial}` : ""}`,
    );
  });
  (options.extraTaps ?? []).forEach((tap, i) =>
    args.push(
      "-netdev",
      `tap,id=extratap${i},ifname=${tap.ifname},script=no,downscript=no`,
      "-device",
      `virtio-net-pci,netdev=extratap${i},addr=0x${tap.pciSlot.toString(16)},mac=${tap.mac}`,
    ),
  );
  (options.extraNics ?? []).forEach((nic, i) =>
    args.push(
      "-netdev",
      `user,id=extranet${i},restrict=on,net=192.168.${100 + i}.0/24`,
      "-device",
      `virtio-net-pci,netdev=extranet${i},addr=0x${nic.pciSlot.toString(16)}${nic.mac ? `,mac=${nic.mac}` : ""}`,
    ),
  );
  return args;
}

const SYSTEMD_TROUBLE = /\bFAILED\b|Dependency failed|ordering cycle|Timed out|A start job is running|Failed to start/;

function consolePath(work: string): string {
  return join(work, "console.log");
}

async function watchConsole(args: string[], consoleFile: string, options: BootOptions, accel: Accel, cleanup: () => Promise<void>): Promise<BootResult> {
  const started = Date.now();
  const lastLines: string[] = [];
  const markerLines: string[] = [];
  // systemd's complaints anywhere in the boot: the last 40 lines alone may not show why it stalled.
  const trouble: string[] = [];
  let readyLine: string | undefined;
  let failure: string | undefined;
  let powerCut = false;
  let diagnosing = false;
  const [command, commandArgs] = options.netns ? ["ip", ["netns", "exec", options.netns, "qemu-system-x86_64", ...args]] : ["qemu-system-x86_64", args];
  const child = execa(command, commandArgs, { reject: false, stdin: "ignore", all: true });
  // The timeout bounds the wait for the ready marker, not the life of a VM kept running
  // for the caller (execa's own timeout would kill it then, hours into a test).
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, options.timeoutSeconds * 1000);
  const progress = setInterval(
    () => log("boot-test", `waiting for the ready marker… ${Math.round((Date.now() - started) / 1000)}s; console: ${lastLines.at(-1)?.slice(0, 100) ?? ""}`),
    30_000,
  );
  let signalReady: () => void = () => undefined;
  const readyForCaller = new Promise<void>((resolve) => (signalReady = resolve));
  const tail = new ConsoleTail(consoleFile, (line) => {
    lastLines.push(line);
    if (lastLines.length > 40) lastLines.shift();
    if (line.includes("ICN-BOOTSTRAP")) markerLines.push(line);
    // A start job's line repeats with its timer: keep one per job.
    const complaint = line
      .replace(/\x1b\[[0-9;]*m/g, "")
      .replace(/\(\d+(min )?\s*\d*s \/ [^)]*\)/, "")
      .trim();
    if (SYSTEMD_TROUBLE.test(complaint) && trouble.length < 20 && !trouble.includes(complaint)) trouble.push(complaint);
    options.onLine?.(line);
    if (readyLine && options.keepRunning) return; // already handed to the caller
    const ready = (options.readyPattern ?? READY_MARKER).exec(line);
    const failed = (options.failurePattern ?? FAILED_MARKER).exec(line);
    if (ready && !readyLine) readyLine = ready[0];
    if (failed && !failure) failure = failed[0];
    if (options.powerCutOn?.test(line) && !powerCut) {
      powerCut = true;
      child.kill("SIGKILL");
    }
    if (readyLine && !failure && options.keepRunning) {
      clearTimeout(deadline);
      signalReady();
    } else if (failure && options.beforeStopOnFailure && !diagnosing) {
      diagnosing = true;
      void options
        .beforeStopOnFailure(failure)
        .catch(() => undefined)
        .finally(() => child.kill("SIGTERM"));
    } else if ((readyLine || failure) && !diagnosing) child.kill("SIGTERM");
  });
  tail.start();
  const exited = child.then((result) => {
    clearTimeout(deadline);
    return result;
  });
  await Promise.race([readyForCaller, exited]);
  clearInterval(progress);
  const seconds = (Date.now() - started) / 1000;
  if (readyLine && !failure && options.keepRunning) {
    const stop = async () => {
      child.kill("SIGTERM");
      await exited;
      await tail.stop();
      await cleanup();
    };
    const exitedWithin = (ms: number) =>
      new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), ms);
        void exited.then(() => {
          clearTimeout(timer);
          resolve(true);
        });
      });
    return { ready: true, powerCut, readyLine, seconds, accel, lastLines, stop, exited: exitedWithin };
  }
  const result = await exited;
  await tail.stop(); // the last lines QEMU wrote, the ready marker perhaps among them
  if (!readyLine && !failure && !powerCut) {
    const seen =
      (markerLines.length ? ` (console lines naming ICN-BOOTSTRAP: ${markerLines.join(" | ")})` : "") +
      (trouble.length ? ` (systemd reported: ${trouble.join(" | ")})` : "");
    failure = timedOut
      ? `no ready marker within ${options.timeoutSeconds}s${seen}`
      : `QEMU exited (${result.exitCode ?? result.signal}): ${String(result.stderr ?? "")
          .trim()
          .split("\n")
          .slice(-3)
          .join(" ")}`;
  }
  return { ready: Boolean(readyLine) && !failure, powerCut, readyLine, failure, seconds, accel, lastLines };
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
