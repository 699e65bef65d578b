/**
 * Upgrading the appliance in place, in QEMU: version A (its qcow2) boots and lays out two
 * system slots and a data partition; version B, a signed USB image of the same definition
 * with one file changed, reaches it on a stick. `icn-upgrade apply` checks B (signature,
 * report, image hash), writes it into slot b and boots it once:
 * - the power is cut while slot b is being tried: the machine comes back on slot a by
 *   itself, says the upgrade rolled back, and runs as before;
 * - asked for again through the REST API (the files uploaded with tus by an administrator's
 *   token, then POST /api/v1/appliance/upgrade), slot b comes back healthy and becomes the
 *   default: the same machine (hostname, SSH host key, etcd member, a ConfigMap made
 *   before), version B's file, an Event on the Node, the REST API's view of the state; a
 *   plain reboot after that stays on slot b;
 * - version C, built with a health bound it cannot meet (60 s from power-on), is written into
 *   slot a and never becomes healthy: the machine reboots into slot b by itself and says why.
 * Throughout, a site's state made on version A (a BareMetalHost, its BMC Secret, a
 * Provisioning, the uploads) is the same objects afterwards.
 * Run with `npm run e2e:upgrade` (about an hour under TCG; docs/upgrade.md).
 */
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { freePort } from "../../builder/registry/server.js";
import { runCli } from "../helpers/cli.js";
import { printFailedUnitJournal, sshToVm } from "../helpers/ssh.js";
import { writeDefinition } from "../helpers/definition.js";

const FIRST_BOOT_S = 60 * 60;
const LATER_BOOT_S = 40 * 60;
const READY_SLOT = /ICN-BOOTSTRAP-READY host=(\S+) .* slot=([ab]) /;
const MARKER = "etc/icn-bootstrap/e2e-version";
/**
 * On the appliance: an administrator's token (a ServiceAccount bound to
 * bpa-api-appliance-admin), the stick's files uploaded through the REST API with tus (curl
 * streams each in one PATCH), then the upgrade asked for. Prints the seconds the uploads took.
 */
const UPGRADE_THROUGH_REST = [
  "set -eu",
  'K="kubectl --kubeconfig /etc/kubernetes/admin.conf"',
  "$K -n bpa-system get serviceaccount e2e-ops >/dev/null 2>&1 || $K -n bpa-system create serviceaccount e2e-ops >/dev/null",
  "$K -n bpa-system get rolebinding e2e-ops >/dev/null 2>&1 || $K -n bpa-system create rolebinding e2e-ops --clusterrole=bpa-api-appliance-admin --serviceaccount=bpa-system:e2e-ops >/dev/null",
  "TOKEN=$($K -n bpa-system create token e2e-ops --audience icn-bpa-api --duration 3h)",
  "API=https://bootstrap.icn:30443",
  "CA=/etc/icn-bootstrap/pki/registry-ca.crt",
  "started=$(date +%s)",
  "for f in icn-bootstrap.img icn-bootstrap.report.json icn-bootstrap.report.json.sigstore.json; do",
  "  sum=$(sha256sum /mnt/stick/$f | cut -d' ' -f1); size=$(stat -c %s /mnt/stick/$f)",
  '  meta="kind $(printf appliance-image | base64 -w0),name $(printf e2e/$f | base64 -w0),sha256 $(printf $sum | base64 -w0)"',
  '  loc=$(curl -sS --fail --cacert $CA -H "Authorization: Bearer $TOKEN" -H "Tus-Resumable: 1.0.0" -H "Upload-Length: $size" -H "Upload-Metadata: $meta" -X POST -D - -o /dev/null $API/api/v1/uploads | sed -n "s/^[Ll]ocation: *//p" | tr -d "\\r")',
  '  case "$loc" in http*) ;; *) loc="$API$loc" ;; esac',
  '  curl -sS --fail-with-body --cacert $CA -H "Authorization: Bearer $TOKEN" -H "Tus-Resumable: 1.0.0" -H "Upload-Offset: 0" -H "Content-Type: application/offset+octet-stream" -X PATCH -T /mnt/stick/$f "$loc" >/dev/null',
  "done",
  "echo uploaded in $(( $(date +%s) - started )) s",
  'curl -sS --fail-with-body --cacert $CA -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -X POST -d \'{"image":"e2e/icn-bootstrap.img"}\' $API/api/v1/appliance/upgrade',
].join("\n");

/**
 * GET `path` of the REST API with a token of the administrator's ServiceAccount, made anew:
 * only etcd (the data partition) carries over to the other slot, not files in /root. The
 * API may still be starting right after the slot's ready marker: curl retries for a while.
 */
const asAdministrator = (path: string) =>
  [
    "TOKEN=$(kubectl --kubeconfig /etc/kubernetes/admin.conf -n bpa-system create token e2e-ops --audience icn-bpa-api --duration 1h)",
    `curl -sS --fail --retry 30 --retry-delay 10 --retry-all-errors --cacert /etc/icn-bootstrap/pki/registry-ca.crt -H "Authorization: Bearer $TOKEN" https://bootstrap.icn:30443${path}`,
  ].join(" && ");

let work: string;
let key: string;
let imageA: string;
let stick: string;
const consoleLines: string[] = [];

/** A site's state, applied on version A: it must be the same objects on every later version. */
const SITE = [
  "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: site-a",
  "apiVersion: v1\nkind: Secret\nmetadata:\n  name: node-1-bmc\n  namespace: site-a\nstringData:\n  username: admin\n  password: site-a-bmc-password",
  "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: node-1\n  namespace: site-a\nspec:\n  online: false\n  bootMACAddress: 52:54:00:00:00:01\n  bmc:\n    address: redfish+http://192.168.111.1:8000/redfish/v1/Systems/node-1\n    credentialsName: node-1-bmc",
  "apiVersion: bpa.akraino.org/v1alpha1\nkind: Provisioning\nmetadata:\n  name: site-a-cluster\n  namespace: site-a\nspec:\n  master:\n    cpu: 2\n    memory: 2Gi",
].join("\n---\n");

/** Builds the test's definition at `version` (the marker file's content), signed. */
async function buildVersion(version: string, format: string, out: string, publicKey: string, trusted: string, healthTimeout = "30m"): Promise<void> {
  const definition = await writeDefinition(
    (d) => {
      d.access = { sshAuthorizedKeys: [publicKey] };
      d.upgrade = { trustedKeys: [trusted], healthTimeout };
    },
    { [MARKER]: `${version}\n` },
  );
  const started = Date.now();
  const build = await runCli(["build", "--definition", definition, "--format", format, "--out", out, "--sign-key", join(work, "sign.key")]);
  expect(build.exitCode, build.all).toBe(0);
  console.log(`version ${version} (${format}) built in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-upgrade-"));
  key = join(work, "id_ed25519");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", join(work, "sign.key")]);
  await execa("openssl", ["pkey", "-in", join(work, "sign.key"), "-pubout", "-out", join(work, "sign.pub")]);
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const trusted = await readFile(join(work, "sign.pub"), "utf8");
  await buildVersion("A", "qcow2", join(work, "a"), publicKey, trusted);
  imageA = join(work, "a", "icn-bootstrap.qcow2");
  // Versions B and C on a stick (ext4, sparse): B's image, its report and their bundles at its top, C's in c/; the builds' own copies go.
  const onStick = join(work, "stick-files");
  const stickFiles = ["icn-bootstrap.img", "icn-bootstrap.img.sigstore.json", "icn-bootstrap.report.json", "icn-bootstrap.report.json.sigstore.json"];
  for (const [version, dir, healthTimeout] of [
    ["B", onStick, "30m"],
    ["C", join(onStick, "c"), "60s"],
  ] as const) {
    const out = join(work, version.toLowerCase());
    await buildVersion(version, "usb", out, publicKey, trusted, healthTimeout);
    await mkdir(dir, { recursive: true });
    for (const file of stickFiles) await execa("mv", [join(out, file), join(dir, file)]);
    await rm(out, { recursive: true, force: true });
  }
  stick = join(work, "stick.raw");
  await execa("mkfs.ext4", ["-q", "-L", "ICN-UPGRADE", "-d", onStick, stick, "16G"]);
  await rm(onStick, { recursive: true, force: true });
}, 120 * 60_000);

afterAll(async () => {
  if (process.env.ICN_KEEP_TEST_TMP !== "1") await rm(work, { recursive: true, force: true });
});

describe("upgrading the appliance in place", () => {
  let vm: BootResult | undefined;
  afterAll(async () => {
    await vm?.stop?.();
  });

  it("rolls back by itself after a power cut during the try, then upgrades and keeps the machine", { timeout: 4 * 60 * 60_000 }, async () => {
    const sshPort = await freePort();
    const disk = join(work, "disk.qcow2");
    const ssh = (command: string) => sshToVm(key, sshPort, command);
    const boot = (timeoutSeconds: number, powerCutOn?: RegExp) => {
      consoleLines.length = 0;
      return bootImage({
        image: imageA,
        firmware: "bios",
        timeoutSeconds,
        memoryMiB: 4096,
        disk,
        diskSize: "32G",
        keepRunning: true,
        tcgMultiThread: true,
        hostForwards: [`tcp:127.0.0.1:${sshPort}-:22`],
        onLine: (line) => consoleLines.push(line),
        extraDisks: [{ file: stick, serial: "upgrade-stick" }],
        powerCutOn,
        // A failed first-boot step: its journal, read while the VM still runs.
        beforeStopOnFailure: printFailedUnitJournal(key, sshPort),
      });
    };
    const slotOf = (result: BootResult) => READY_SLOT.exec(result.readyLine ?? "")?.[2];
    const untilLine = async (pattern: RegExp, seconds: number) => {
      const deadline = Date.now() + seconds * 1000;
      while (Date.now() < deadline) {
        const line = consoleLines.find((l) => pattern.test(l));
        if (line) return line;
        await new Promise((resolve) => setTimeout(resolve, 5000));
      }
      throw new Error(`no console line matching ${pattern} within ${seconds} s; last lines:\n${consoleLines.slice(-30).join("\n")}`);
    };
    const apply = async (image = "/mnt/stick/icn-bootstrap.img") => {
      const started = Date.now();
      await ssh("mkdir -p /mnt/stick && (mountpoint -q /mnt/stick || mount -o ro /dev/disk/by-id/virtio-upgrade-stick /mnt/stick)");
      const applied = await ssh(`icn-upgrade apply ${image} --no-reboot 2>&1`);
      console.log(`icn-upgrade apply (${((Date.now() - started) / 1000).toFixed(0)} s):\n${applied.stdout}`);
      await ssh("umount /mnt/stick; systemctl reboot").catch(() => undefined);
      expect(await vm!.exited!(10 * 60_000), "the appliance rebooted (QEMU exits on a reboot)").toBe(true);
      await vm!.stop!();
    };
    const identity = async () => ({
      hostname: (await ssh("hostname")).stdout.trim(),
      hostKey: (await ssh("ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub")).stdout.trim(),
      machineId: (await ssh("cat /etc/machine-id")).stdout.trim(),
      // The etcd cluster's and member's ids (etcd's JSON gateway, with the API server's client certificate).
      etcdMember: JSON.parse(
        (
          await ssh(
            "cd /etc/kubernetes/pki && curl -sf -X POST -d '{}' --cacert etcd/ca.crt --cert apiserver-etcd-client.crt --key apiserver-etcd-client.key https://127.0.0.1:2379/v3/cluster/member/list",
          )
        ).stdout,
      ).header.member_id as string,
      configMap: (
        await ssh("kubectl --kubeconfig /etc/kubernetes/admin.conf -n default get configmap kept-across-upgrades -o jsonpath='{.data.made}'")
      ).stdout.trim(),
      version: (await ssh(`cat /${MARKER}`)).stdout.trim(),
      // The site's objects: the same uid is the same object, not one made again.
      site: (
        await ssh(
          "kubectl --kubeconfig /etc/kubernetes/admin.conf -n site-a get secret/node-1-bmc baremetalhost/node-1 provisioning/site-a-cluster -o jsonpath='{range .items[*]}{.kind}/{.metadata.name} {.metadata.uid}{\"\\n\"}{end}'",
        )
      ).stdout.trim(),
    });

    // Version A, first boot: the slots and the data partition are laid out.
    vm = await boot(FIRST_BOOT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    console.log(`version A ready after ${vm.seconds.toFixed(0)} s (${vm.accel}): ${vm.readyLine}`);
    expect(slotOf(vm)).toBe("a");
    expect(consoleLines.join("\n")).toMatch(/ICN-BOOTSTRAP-LAYOUT slots on/);
    await ssh("kubectl --kubeconfig /etc/kubernetes/admin.conf -n default create configmap kept-across-upgrades --from-literal=made=before");
    await ssh(`kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f - <<'EOF'\n${SITE}\nEOF`);
    const before = await identity();
    expect(before.version).toBe("A");
    expect(before.site.split("\n").map((line) => line.split(" ")[0])).toEqual(["Secret/node-1-bmc", "BareMetalHost/node-1", "Provisioning/site-a-cluster"]);

    // A stick whose image does not match its report is refused, and nothing is written.
    const tampered = await ssh(
      [
        "mkdir -p /mnt/stick /run/t && mount -o ro /dev/disk/by-id/virtio-upgrade-stick /mnt/stick",
        "cp /mnt/stick/icn-bootstrap.report.json /mnt/stick/icn-bootstrap.report.json.sigstore.json /run/t/",
        "ln -sf /mnt/stick/icn-bootstrap.img /run/t/icn-bootstrap.img",
        'sed -i \'0,/"name"/s/"name"/"Name"/\' /run/t/icn-bootstrap.report.json',
        "icn-upgrade apply /run/t/icn-bootstrap.img --no-reboot 2>&1; echo exit=$?; umount /mnt/stick",
      ].join(" && "),
    );
    console.log(`a report changed by one letter:\n${tampered.stdout}`);
    expect(tampered.stdout).toMatch(/FAIL +report signature/);
    expect(tampered.stdout).toMatch(/nothing was written/);
    expect(tampered.stdout).toMatch(/exit=1/);
    expect((await ssh("icn-upgrade status")).stdout).not.toMatch(/"phase": "trying"/);

    // Written into slot b; the power is cut while slot b is being tried.
    await apply();
    vm = await boot(LATER_BOOT_S, /slot b is being tried/);
    expect(vm.powerCut, consoleLines.slice(-30).join("\n")).toBe(true);
    await vm.stop?.();
    vm = await boot(LATER_BOOT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    expect(slotOf(vm)).toBe("a");
    console.log(await untilLine(/ICN-BOOTSTRAP-UPGRADE rolled-back slot=a/, 15 * 60));
    expect(JSON.parse((await ssh("icn-upgrade status")).stdout).upgrade.phase).toBe("rolled-back");
    expect(await identity()).toEqual(before);

    // Asked for again, through the REST API: slot b comes back healthy and becomes the default.
    const asked = Date.now();
    await ssh("mkdir -p /mnt/stick && (mountpoint -q /mnt/stick || mount -o ro /dev/disk/by-id/virtio-upgrade-stick /mnt/stick)");
    const requested = await ssh(UPGRADE_THROUGH_REST);
    console.log(`through the REST API:\n${requested.stdout}`);
    expect(requested.stdout).toMatch(/"image": "e2e\/icn-bootstrap\.img"/);
    expect(await vm.exited!(40 * 60_000), "the appliance took the request, wrote slot b and rebooted").toBe(true);
    console.log(`from the request to the reboot: ${((Date.now() - asked) / 1000).toFixed(0)} s`);
    await vm.stop!();
    vm = await boot(LATER_BOOT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    expect(slotOf(vm)).toBe("b");
    const confirmed = await untilLine(/ICN-BOOTSTRAP-UPGRADE (succeeded|failed)/, 30 * 60);
    console.log(`slot b ready after ${vm.seconds.toFixed(0)} s; ${confirmed}`);
    expect(confirmed).toMatch(/succeeded slot=b default_slot=b/);
    const after = await identity();
    expect(after).toEqual({ ...before, version: "B" });
    expect((await ssh("kubectl --kubeconfig /etc/kubernetes/admin.conf describe node")).stdout).toMatch(/UpgradeSucceeded/);
    const seen = await ssh(asAdministrator("/api/v1/appliance/upgrade"));
    expect(JSON.parse(seen.stdout)).toMatchObject({
      pending: null,
      state: { phase: "succeeded", from: "a", to: "b", requestedBy: expect.stringContaining("e2e-ops") },
    });
    // The uploads made on version A are still listed, published, by version B's REST API.
    const uploads = await ssh(asAdministrator("/api/v1/uploads"));
    expect((JSON.parse(uploads.stdout) as { items: { name: string; state: string }[] }).items.filter((u) => u.name.startsWith("e2e/"))).toEqual(
      expect.arrayContaining(
        ["icn-bootstrap.img", "icn-bootstrap.report.json", "icn-bootstrap.report.json.sigstore.json"].map((f) =>
          expect.objectContaining({ name: `e2e/${f}`, state: "published" }),
        ),
      ),
    );
    console.log(`data partition: ${(await ssh("df -h --output=size,used /var/lib/icn-data | tail -n1")).stdout.trim()}`);

    // A plain reboot stays on slot b.
    await ssh("systemctl reboot").catch(() => undefined);
    expect(await vm.exited!(10 * 60_000)).toBe(true);
    await vm.stop!();
    vm = await boot(LATER_BOOT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    expect(slotOf(vm)).toBe("b");

    // Version C never becomes healthy within its bound: the machine goes back to slot b by itself.
    await apply("/mnt/stick/c/icn-bootstrap.img");
    vm = await boot(LATER_BOOT_S);
    const failed = consoleLines.find((line) => /ICN-BOOTSTRAP-UPGRADE failed slot=a/.test(line));
    console.log(`version C, slot a: ${failed ?? "(no failed line)"}; the machine ${vm.ready ? "reported ready" : "rebooted"} after ${vm.seconds.toFixed(0)} s`);
    expect(failed, consoleLines.slice(-30).join("\n")).toMatch(/not healthy after 60 s: .*rebooting into slot b/);
    expect(vm.ready, "slot a rebooted before it was ready").toBe(false);
    await vm.stop?.();
    vm = await boot(LATER_BOOT_S);
    expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
    expect(slotOf(vm)).toBe("b");
    const rolledBack = await untilLine(/ICN-BOOTSTRAP-UPGRADE rolled-back slot=b/, 15 * 60);
    console.log(`back on slot b after ${vm.seconds.toFixed(0)} s: ${rolledBack}`);
    expect(rolledBack).toMatch(/not healthy after 60 s/);
    expect(JSON.parse((await ssh("icn-upgrade status")).stdout).upgrade).toMatchObject({ phase: "rolled-back", from: "b", to: "a" });
    expect(await identity()).toEqual({ ...before, version: "B" });
    expect((await ssh("kubectl --kubeconfig /etc/kubernetes/admin.conf describe node")).stdout).toMatch(/UpgradeRolledBack/);
  });
});
