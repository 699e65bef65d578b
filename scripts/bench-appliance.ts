/**
 * The appliance's own speed, each figure beside a baseline measured in the same run (no
 * timed assertions): the appliance without Kubernetes ("lean": firmware, kernel, first-boot
 * units, registry and file server) and the default appliance, the same host, the same
 * emulation. Both are the default definition plus an SSH key for the benchmark.
 *
 *   npm run bench:appliance             # build both (cached), boot each, print the table
 *   npm run bench:appliance -- --rest 300 --keep
 *
 * Figures: first boot to the ready marker (and each first-boot step), the first runner
 * pod Running after its Job is made (the kubespray runner image), CPU at rest per process
 * over --rest seconds after a quiet minute, the bytes containerd decompressed (layers
 * it pulled compressed), and the second boot (after a clean power-off, same disk) to the
 * ready marker.
 *
 * Each run's figures are kept for the machine it ran on (scripts/bench-record.ts); the next
 * run on the same machine prints each figure beside the last one and, when one grew more
 * than 1.5x, says so loudly and exits with status 3 (a report, not a test).
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { execa } from "execa";
import { bootImage, type BootResult } from "../builder/boot/qemu.js";
import { freePort } from "../builder/registry/server.js";
import { withoutKubernetes, writeDefinition } from "../test/helpers/definition.js";
import { sshToVm } from "../test/helpers/ssh.js";
import { GROWTH_LIMIT, compareFigures, machineKey, readRecord, recordPath, writeRecord } from "./bench-record.js";

const { values: args } = parseArgs({
  options: {
    rest: { type: "string", default: "300" },
    keep: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(
    "usage: npm run bench:appliance [-- --rest SECONDS] [--keep]\n\nBoots the lean and the default appliance under QEMU (KVM when it works, else TCG) and prints\nboot, first-Job and CPU-at-rest figures side by side. --keep leaves the work directory.\nEach figure is compared with the last run on the same machine (kept under the cache\ndirectory, bench/); exit status 3 when one grew more than 1.5x.",
  );
  process.exit(0);
}
const REST_S = Number(args.rest);
if (!Number.isInteger(REST_S) || REST_S < 30) {
  console.error(`bench:appliance: --rest takes whole seconds, at least 30, not '${args.rest}'`);
  process.exit(2);
}

const repo = resolve(import.meta.dirname, "..");
const work = await mkdtemp(join(tmpdir(), "icn-bench-appliance-"));
const key = join(work, "id");
await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
const log = (m: string) => console.error(`bench:appliance: ${m}`);

async function build(name: string, patch: (d: Record<string, any>) => void): Promise<string> {
  const definition = await writeDefinition((d) => {
    patch(d);
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  const out = join(work, name);
  log(`building the ${name} appliance…`);
  const result = await execa(join(repo, "icn-bootstrap"), ["build", "--definition", definition, "--format", "qcow2", "--out", out], {
    reject: false,
    all: true,
  });
  if (result.exitCode !== 0) throw new Error(`build of the ${name} appliance failed:\n${result.all}`);
  return join(out, "icn-bootstrap.qcow2");
}

interface Booted {
  vm: BootResult;
  steps: [string, number][];
  ssh: (command: string) => Promise<string>;
}

/** `disk`: the VM's disk (an overlay on the image), kept between boots of the same machine. */
async function boot(image: string, disk: string): Promise<Booted> {
  const sshPort = await freePort();
  const lines: string[] = [];
  const vm = await bootImage({
    image,
    disk,
    firmware: "bios",
    timeoutSeconds: 3600,
    memoryMiB: 4096,
    keepRunning: true,
    tcgMultiThread: true,
    hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`],
    onLine: (l) => lines.push(l),
  });
  if (!vm.ready) throw new Error(`no ready marker: ${vm.failure ?? vm.lastLines.join("\n")}`);
  const steps = lines.flatMap((l): [string, number][] => {
    const m = /ICN-BOOTSTRAP-STEP (\S+) after (\d+)s/.exec(l);
    return m ? [[m[1]!, Number(m[2])]] : [];
  });
  const ssh = async (command: string) => String((await sshToVm(key, sshPort, command)).stdout);
  return { vm, steps, ssh };
}

/** CPU per process name (% of one CPU) and the whole machine's, over `seconds`, from /proc inside the appliance. */
const CPU_SAMPLER = `
import os, time, sys
HZ = os.sysconf("SC_CLK_TCK")
def procs():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        name = os.path.basename(cmd[0].decode(errors="replace")) if cmd and cmd[0] else stat[stat.index("(") + 1:stat.rindex(")")]
        if name in ("node", "python3", "python3.13") and len(cmd) > 1: name += " " + os.path.basename(cmd[1].decode(errors="replace"))
        out[pid] = (name, int(fields[11]) + int(fields[12]))
    return out
def total():
    parts = open("/proc/stat").readline().split()[1:]
    values = list(map(int, parts))
    return sum(values) - values[3] - values[4]
seconds = float(sys.argv[1])
a, ta = procs(), total()
time.sleep(seconds)
b, tb = procs(), total()
use = {}
for pid, (name, ticks) in b.items():
    before = a[pid][1] if pid in a else 0  # a process started in the window: all its ticks are in it
    use[name] = use.get(name, 0) + (ticks - before)
print(f"TOTAL {100 * (tb - ta) / HZ / seconds:.1f}")
for name, ticks in sorted(use.items(), key=lambda kv: -kv[1])[:15]:
    print(f"{100 * ticks / HZ / seconds:.1f} {name}")
`;

async function cpuAtRest(booted: Booted): Promise<{ total: number; top: [string, number][] }> {
  await booted.ssh(`cat > /run/cpu-sampler.py <<'EOF'\n${CPU_SAMPLER}\nEOF`);
  // Work the boot queued after the ready marker (the runner image's pre-pull) is not rest.
  await booted.ssh("systemctl is-system-running --wait >/dev/null || true");
  log(`a quiet minute, then CPU over ${REST_S} s…`);
  await new Promise((r) => setTimeout(r, 60_000));
  const out = await booted.ssh(`python3 /run/cpu-sampler.py ${REST_S}`);
  const [first, ...rest] = out.trim().split("\n");
  return {
    total: Number(first!.split(" ")[1]),
    top: rest.map((l) => {
      const [pct, ...name] = l.split(" ");
      return [name.join(" "), Number(pct)] as [string, number];
    }),
  };
}

/** Bytes of compressed layers containerd pulled (each decompressed to unpack it): content with an "uncompressed" label. */
async function decompressedBytes(booted: Booted): Promise<number> {
  const out = await booted.ssh("ctr -n k8s.io content ls 2>/dev/null | awk 'NR > 1 && /containerd.io\\/uncompressed=/ { print $2 }'");
  return out
    .split("\n")
    .filter(Boolean)
    .reduce((sum, size) => sum + parseSize(size), 0);
}

function parseSize(text: string): number {
  const m = /^([\d.]+)\s*([KMGT]?i?B)?$/.exec(text.trim());
  if (!m) return 0;
  const unit = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4 }[m[2] ?? "B"] ?? 1;
  return Number(m[1]) * unit;
}

/** Seconds from creating a Job with the kubespray runner image to its pod Running. */
async function firstRunner(booted: Booted): Promise<number> {
  const image =
    (await booted.ssh("kubectl -n bpa-system get configmap bpa-config -o yaml 2>/dev/null | sed -n 's/.*runnerImage: *//p' | head -n1")).trim() ||
    "bootstrap.icn:5000/icn/kubespray-runner:latest";
  const started = Date.now();
  await booted.ssh(
    `export KUBECONFIG=/etc/kubernetes/admin.conf; kubectl create job bench-runner --image=${image} -- sleep 600 >/dev/null && kubectl wait --for=jsonpath='{.status.ready}'=1 job/bench-runner --timeout=3600s >/dev/null`,
  );
  const seconds = (Date.now() - started) / 1000;
  await booted.ssh("KUBECONFIG=/etc/kubernetes/admin.conf kubectl delete job bench-runner --wait=false >/dev/null");
  return seconds;
}

/** A clean power-off (the guest exits QEMU: it runs with -no-reboot), then the VM's files removed. */
async function powerOff(booted: Booted): Promise<void> {
  await booted.ssh("systemctl poweroff").catch(() => undefined); // the connection drops as it goes down
  if (!(await booted.vm.exited?.(300_000))) log("the VM did not power off within 5 minutes: stopped");
  await booted.vm.stop?.();
}

const ratio = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}x` : "n/a");
const mib = (bytes: number) => `${(bytes / 1024 ** 2).toFixed(0)} MiB`;

try {
  const leanImage = await build("lean", withoutKubernetes);
  const fullImage = await build("default", (d) => {
    d.kubernetes = { ...d.kubernetes, enabled: true };
  });

  const leanDisk = join(work, "lean-disk.qcow2");
  const fullDisk = join(work, "default-disk.qcow2");
  log("booting the lean appliance…");
  const lean = await boot(leanImage, leanDisk);
  const leanRest = await cpuAtRest(lean);
  await powerOff(lean);
  log("the lean appliance's second boot…");
  const leanSecond = await boot(leanImage, leanDisk);
  await powerOff(leanSecond);

  log("booting the default appliance (Kubernetes, BPA, Metal3 and Ironic)…");
  const full = await boot(fullImage, fullDisk);
  const decompressed = await decompressedBytes(full);
  const fullRest = await cpuAtRest(full);
  log("the first Job with the kubespray runner image…");
  const runner = await firstRunner(full);
  const decompressedWithRunner = await decompressedBytes(full);
  await powerOff(full);
  log("the default appliance's second boot…");
  const fullSecond = await boot(fullImage, fullDisk);
  await powerOff(fullSecond);

  const rows: [string, string, string, string][] = [
    [
      `first boot to the ready marker (${full.vm.accel})`,
      `${full.vm.seconds.toFixed(0)} s`,
      `${lean.vm.seconds.toFixed(0)} s`,
      ratio(full.vm.seconds, lean.vm.seconds),
    ],
    ...full.steps.map(([step, s]): [string, string, string, string] => [`  step ${step}`, `${s} s`, "", ""]),
    [
      "second boot to the ready marker",
      `${fullSecond.vm.seconds.toFixed(0)} s`,
      `${leanSecond.vm.seconds.toFixed(0)} s`,
      ratio(fullSecond.vm.seconds, leanSecond.vm.seconds),
    ],
    ...fullSecond.steps.map(([step, s]): [string, string, string, string] => [`  step ${step}`, `${s} s`, "", ""]),
    ["first runner pod Running after its Job", `${runner.toFixed(0)} s`, "", ""],
    ["bytes decompressed by containerd at first boot", mib(decompressed), "0 MiB", ""],
    ["  … and with the runner's image", mib(decompressedWithRunner), "", ""],
    [`CPU at rest over ${REST_S} s (% of one CPU)`, `${fullRest.total.toFixed(1)} %`, `${leanRest.total.toFixed(1)} %`, ratio(fullRest.total, leanRest.total)],
    ...fullRest.top.map(([name, pct]): [string, string, string, string] => [`  ${name}`, `${pct.toFixed(1)} %`, "", ""]),
  ];
  const width = Math.max(...rows.map((r) => r[0].length));
  console.log(`${"".padEnd(width)}  ${"default".padStart(10)}  ${"lean".padStart(10)}  ratio`);
  for (const [what, a, b, r] of rows) console.log(`${what.padEnd(width)}  ${a.padStart(10)}  ${b.padStart(10)}  ${r}`);
  console.log(`(host: ${(await execa("nproc")).stdout} cores, load ${(await readFile("/proc/loadavg", "utf8")).split(" ").slice(0, 3).join(" ")})`);

  const figures: Record<string, number> = {
    "first boot to the ready marker": full.vm.seconds,
    "first boot to the ready marker, lean": lean.vm.seconds,
    ...Object.fromEntries(full.steps.map(([step, s]) => [`first boot, step ${step}`, s])),
    "second boot to the ready marker": fullSecond.vm.seconds,
    "second boot to the ready marker, lean": leanSecond.vm.seconds,
    ...Object.fromEntries(fullSecond.steps.map(([step, s]) => [`second boot, step ${step}`, s])),
    "first runner pod Running after its Job": runner,
    "CPU at rest (% of one CPU)": fullRest.total,
  };
  process.exitCode = await compareWithLastRun(figures, full.vm.accel);
} finally {
  if (!args.keep) await rm(work, { recursive: true, force: true });
}

/** Prints each figure beside the last run's on this machine, records this run, and returns 3 when one grew too much. */
async function compareWithLastRun(figures: Record<string, number>, accel: string): Promise<number> {
  const machine = machineKey(accel);
  const path = recordPath("appliance", machine.file);
  const last = await readRecord(path);
  const compared = compareFigures(figures, last?.figures);
  await writeRecord(path, { machine: machine.description, at: new Date().toISOString(), figures });
  if (!last) {
    console.log(`\nFirst recorded run on this machine (${machine.description}): ${path}; the next run is compared with it.`);
    return 0;
  }
  const width = Math.max(...compared.map((c) => c.name.length));
  console.log(`\nAgainst the last run on this machine (${machine.description}, ${last.at}):`);
  for (const c of compared) {
    const before = c.last === undefined ? "(new)" : c.last.toFixed(1);
    const growth = c.growth === undefined ? "" : `${c.growth.toFixed(2)}x`;
    console.log(`${c.name.padEnd(width)}  ${c.now.toFixed(1).padStart(8)}  ${before.padStart(8)}  ${growth}${c.grewTooMuch ? "  <- GREW" : ""}`);
  }
  const grown = compared.filter((c) => c.grewTooMuch);
  if (grown.length === 0) return 0;
  console.log(`\nREGRESSION: ${grown.length} figure${grown.length === 1 ? "" : "s"} grew more than ${GROWTH_LIMIT}x against the last run on this machine:`);
  for (const c of grown) console.log(`  ${c.name}: ${c.last!.toFixed(1)} -> ${c.now.toFixed(1)} (${c.growth!.toFixed(2)}x)`);
  return 3;
}
