/**
 * `npm run e2e:developer`: the developer's path (docs/developer-path.md) on a cluster that
 * is not the appliance's own install. The image is built with `kubernetes.components:
 * false`: a single-node kubeadm cluster (a real kubelet, API server and containerd, the
 * registry and file server beside them) on which nothing of ours runs. From this machine,
 * as a developer would, with the cluster's admin kubeconfig only:
 *
 * - `icn-bootstrap deploy` installs the infra-local-controller chart (the credentials and
 *   the site CA made at install) and waits for the BPA, its REST API, the
 *   baremetal-operator and Ironic to be available;
 * - a file goes up through the REST API (`icn-bootstrap upload`, a token of the
 *   ready-made uploader identity) into the chart's upload store;
 * - a BareMetalHost registers through Ironic against a Redfish BMC (sushy-tools in front
 *   of a libvirt VM on this machine, test/helpers/bmc-emulator.ts; the only door out of
 *   the VM is QEMU's guestfwd to it) and reaches `available`, inspection skipped by
 *   annotation, the server left off;
 * - a second `deploy` with new values upgrades the release and keeps the CA, Ironic's
 *   credentials, the upload and the host; it also turns on the chart's own registry and
 *   file server (serve) and fills them from `icn-bootstrap bundle`'s two files: the
 *   images pushed with the push account the chart made, the file tree unpacked through
 *   the Kubernetes API. Both answer at the nodes' address inside the VM, as a compute node
 *   would ask them: an image's manifest by digest, a kubespray file, the upload.
 *
 * Emulated: the machine (QEMU, TCG here) and the BMC. Everything in the cluster is the
 * build's, pulled from the image's registry.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { execa } from "execa";
import yaml from "js-yaml";
import * as tar from "tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UploadRecord } from "../../common/uploads.js";
import { TOKEN_AUDIENCE } from "../../bpa/rest/auth.js";
import { makeClients, type Clients } from "../../bpa/runtime/kube.js";
import { bootImage, type BootResult } from "../../builder/boot/qemu.js";
import { ApplianceDefinition } from "../../builder/definition.js";
import { freePort } from "../../builder/registry/server.js";
import { waitFor } from "../helpers/operator-suite.js";
import { ApiClient } from "../helpers/rest-suite.js";
import { startBmc, type Bmc } from "../helpers/bmc-emulator.js";
import { runCli } from "../helpers/cli.js";
import { sshToVm } from "../helpers/ssh.js";
import { writeDefinition } from "../helpers/definition.js";
import { domainXml, startLibvirt, type Libvirt } from "../helpers/libvirt.js";
import { phaseLog } from "../helpers/phases.js";

const BOOT_TIMEOUT_S = 60 * 60;
const READY = /ICN-BOOTSTRAP-READY host=(\S+) .* kubernetes=(v[\d.]+) components=none/;
/** The address the VM's connections to the BMC go to; QEMU forwards them to the emulator on this machine's loopback. */
const BMC_GUEST_ADDRESS = "10.0.2.100";
const BMC_GUEST_PORT = 8000;
const BMC_USER = "admin";
const BMC_PASSWORD = `bmc-${randomBytes(6).toString("hex")}`;
const NODE = { name: "dev-node-0", uuid: randomUUID(), mac: "52:54:00:33:10:01" };
const bmhApi = { group: "metal3.io", version: "v1alpha1", plural: "baremetalhosts" };
const CHART = "infra-local-controller-0.1.0.tgz";
/** The chart's own registry and file server (serve), on their default NodePorts (beside the image's own on 5000 and 8080). */
const SERVE = { registryPort: 30500, filesPort: 30080 };

const { phase, summary } = phaseLog("e2e:developer");

let work: string;
let image: string;
let key: string;
let advertise: string;
let libvirt: Libvirt | undefined;
let bmc: Bmc | undefined;
let vm: BootResult | undefined;
const consoleLines: string[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-developer-"));
  key = join(work, "id_ed25519");
  await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key]);
  const publicKey = (await readFile(`${key}.pub`, "utf8")).trim();
  const definition = await writeDefinition((d) => {
    d.kubernetes = { ...d.kubernetes, enabled: true, components: false };
    d.access = { sshAuthorizedKeys: [publicKey] };
  });
  advertise = ApplianceDefinition.parse(yaml.load(await readFile(definition, "utf8"))).kubernetes.advertiseAddress;
  const build = await runCli(["build", "--definition", definition, "--format", "qcow2", "--out", join(work, "out")]);
  expect(build.exitCode, build.all).toBe(0);
  image = join(work, "out", "icn-bootstrap.qcow2");
  phase("image without the components built");
  const bundle = await runCli(["bundle", "--definition", definition, "--out", join(work, "out")]);
  expect(bundle.exitCode, bundle.all).toBe(0);
  console.log(bundle.stdout);
  phase("bundles written");

  // The server the BareMetalHost stands for: defined in a libvirt of this test's own, never started.
  libvirt = await startLibvirt(work);
  const disk = join(work, `${NODE.name}.qcow2`);
  await execa("qemu-img", ["create", "-q", "-f", "qcow2", disk, "10G"]);
  const xml = join(work, `${NODE.name}.xml`);
  await writeFile(xml, domainXml({ ...NODE, memoryMiB: 2048, cpus: 2, disk, bridge: "dev0", console: join(work, `${NODE.name}.console`), type: "qemu" }));
  await execa("virsh", ["-c", libvirt.uri, "define", xml]);
  bmc = await startBmc({ work, libvirtUri: libvirt.uri, port: await freePort(), username: BMC_USER, password: BMC_PASSWORD });
}, 90 * 60_000);

afterAll(async () => {
  await vm?.stop?.();
  await bmc?.stop();
  await libvirt?.stop();
  console.log(summary());
});

const ssh = (port: number, command: string) => sshToVm(key, port, command);

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

interface Host {
  metadata: { annotations?: Record<string, string> };
  status?: { operationalStatus?: string; errorType?: string; errorMessage?: string; poweredOn?: boolean; provisioning?: { state?: string } };
}

describe("the components on a kubeadm cluster of one's own", () => {
  it(
    "deploy installs the chart, a file goes up through the REST API, a BareMetalHost registers against a Redfish BMC, and an upgrade keeps it all",
    { timeout: (BOOT_TIMEOUT_S + 3 * 3600) * 1000 },
    async () => {
      const sshPort = await freePort();
      const apiPort = await freePort();
      const restPort = await freePort();
      const registryPort = await freePort();
      const bmcPort = Number(new URL(bmc!.url).port);
      vm = await bootImage({
        image,
        firmware: "bios",
        timeoutSeconds: BOOT_TIMEOUT_S,
        memoryMiB: 4096,
        disk: join(work, "disk.qcow2"),
        keepRunning: true,
        tcgMultiThread: true,
        hostForwards: [
          `tcp:127.0.0.1:${sshPort}-:22`,
          `tcp:127.0.0.1:${apiPort}-:6443`,
          `tcp:127.0.0.1:${restPort}-:30443`,
          `tcp:127.0.0.1:${registryPort}-:${SERVE.registryPort}`,
        ],
        // One socat per connection the guest opens (a chardev target would carry one connection only).
        guestForwards: [`tcp:${BMC_GUEST_ADDRESS}:${BMC_GUEST_PORT}-cmd:socat - TCP:127.0.0.1:${bmcPort}`],
        readyPattern: READY,
        onLine: (line) => consoleLines.push(line),
      });
      expect(vm.ready, `${vm.failure ?? ""}\n${vm.lastLines.join("\n")}`).toBe(true);
      phase(`kubeadm cluster ready (${vm.accel})`);
      console.log(`first-boot steps:\n  ${consoleLines.filter((l) => l.includes("ICN-BOOTSTRAP-STEP")).join("\n  ")}`);

      // The developer's kubeconfig: the cluster's admin, at the forwarded API port.
      const admin = (await ssh(sshPort, "cat /etc/kubernetes/admin.conf")).stdout.replace(/server: https:\/\/[^\s]+/, `server: https://127.0.0.1:${apiPort}`);
      const kubeconfig = join(work, "admin.conf");
      await writeFile(kubeconfig, admin, { mode: 0o600 });
      const kc = new KubeConfig();
      kc.loadFromString(admin);
      const c: Clients = makeClients(kc);
      const nodes = await c.core.listNode();
      expect(nodes.items).toHaveLength(1);
      // Nothing of ours runs before the deploy.
      const before = (await c.core.listNamespace()).items.map((n) => n.metadata!.name);
      expect(before).not.toContain("bpa-system");
      expect(before).not.toContain("baremetal-operator-system");

      const values = (certificateNames: string[], serve = false) =>
        yaml.dump({
          registry: { address: advertise },
          nodeFacingAddress: advertise,
          api: { certificateAddresses: ["127.0.0.1"], certificateNames },
          ...(serve && {
            metal3: { deployImagesUrl: `http://${advertise}:${SERVE.filesPort}/boot` },
            serve: {
              // This machine pushes through QEMU's forward to 127.0.0.1: a name the certificate must carry.
              registry: { enabled: true, certificateAddresses: ["127.0.0.1"] },
              files: { enabled: true },
            },
          }),
        });
      const valuesFile = join(work, "values.yaml");
      await writeFile(valuesFile, values([]));
      const chart = join(work, "out", CHART);
      const deploy = (...more: string[]) => runCli(["deploy", "--kubeconfig", kubeconfig, "--values", valuesFile, "--chart", chart, "--wait", "2400", ...more]);
      const installed = await deploy();
      console.log(`deploy:\n${installed.all}`);
      expect(installed.exitCode, installed.all).toBe(0);
      expect(installed.all).toMatch(/permissions: may create every kind of object the chart holds/);
      expect(installed.all).toMatch(/dry run on the server: icn accepted/);
      for (const name of ["bpa-operator", "bpa-api", "baremetal-operator", "ironic"]) expect(installed.all).toContain(name);
      phase("deploy: chart installed, Deployments available");
      const operator = await c.apps.readNamespacedDeployment({ namespace: "bpa-system", name: "bpa-operator" });
      expect(operator.status?.availableReplicas).toBeGreaterThanOrEqual(1);
      const bpaPods = (await c.core.listNamespacedPod({ namespace: "bpa-system" })).items;
      expect(bpaPods.filter((p) => p.status?.phase === "Running").length).toBeGreaterThanOrEqual(2);

      // What the chart made at install: the site CA, the REST API's certificate, Ironic's credentials.
      const caSecret = await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-site-ca" });
      const apiTls = await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "bpa-api-tls" });
      const ironicCredentials = await c.core.readNamespacedSecret({ namespace: "baremetal-operator-system", name: "ironic-credentials" });
      const caPem = (await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "icn-registry-ca" })).data!["ca.crt"]!;
      const caFile = join(work, "site-ca.crt");
      await writeFile(caFile, caPem);

      // A file through the REST API, with the uploader identity's token, over TLS from the chart's CA.
      const token = (
        await c.core.createNamespacedServiceAccountToken({
          namespace: "bpa-system",
          name: "bpa-api-uploader",
          body: { spec: { audiences: [TOKEN_AUDIENCE], expirationSeconds: 3600 } },
        })
      ).status!.token;
      const server = `https://127.0.0.1:${restPort}`;
      const rest = new ApiClient(server, caPem, token);
      const blob = randomBytes(8 * 1024 * 1024);
      await writeFile(join(work, "blob.bin"), blob);
      const started = Date.now();
      const upload = await runCli(["upload", join(work, "blob.bin"), "--kind", "file", "--name", "dev/blob.bin", "--server", server, "--cacert", caFile], {
        ICN_BPA_TOKEN: token,
        XDG_STATE_HOME: join(work, "xdg"),
      });
      expect(upload.exitCode, upload.all).toBe(0);
      const record = JSON.parse(upload.stdout) as UploadRecord;
      expect(record).toMatchObject({ state: "published", path: "/uploads/dev/blob.bin", sha256: sha256(blob) });
      phase(`upload of 8 MiB through the REST API: ${((Date.now() - started) / 1000).toFixed(1)}s`);
      // In the chart's upload store on the node (the hostPath volume), byte for byte.
      const stored = async () => (await ssh(sshPort, "sha256sum /var/lib/icn-bootstrap/bpa-api/published/uploads/dev/blob.bin")).stdout.split(" ")[0];
      expect(await stored()).toBe(sha256(blob));

      // A BareMetalHost whose BMC is the Redfish emulator: registered by Ironic, then available.
      await c.core.createNamespace({ body: { metadata: { name: "dev" } } });
      await c.core.createNamespacedSecret({
        namespace: "dev",
        body: { metadata: { name: "bmc" }, stringData: { username: BMC_USER, password: BMC_PASSWORD } },
      });
      await c.custom.createNamespacedCustomObject({
        ...bmhApi,
        namespace: "dev",
        body: {
          apiVersion: "metal3.io/v1alpha1",
          kind: "BareMetalHost",
          metadata: { name: NODE.name, annotations: { "inspect.metal3.io": "disabled" } },
          spec: {
            online: false,
            bootMACAddress: NODE.mac,
            bootMode: "legacy",
            automatedCleaningMode: "disabled",
            bmc: { address: `redfish+http://${BMC_GUEST_ADDRESS}:${BMC_GUEST_PORT}/redfish/v1/Systems/${NODE.uuid}`, credentialsName: "bmc" },
          },
        },
      });
      const hostState = async () => (await c.custom.getNamespacedCustomObject({ ...bmhApi, namespace: "dev", name: NODE.name })) as Host;
      const states: string[] = [];
      const available = await waitFor(
        `BareMetalHost ${NODE.name} available`,
        async () => {
          const h = await hostState();
          const state = h.status?.provisioning?.state ?? "";
          if (states.at(-1) !== state) {
            states.push(state);
            phase(`host ${NODE.name}: ${state || "(none)"}`);
          }
          if (h.status?.errorType) throw new Error(`${NODE.name}: ${h.status.errorType}: ${h.status.errorMessage}`);
          return state === "available" ? h : undefined;
        },
        30 * 60_000,
        5000,
      );
      console.log(`host ${NODE.name}: ${states.join(" -> ")}`);
      expect(available.status?.operationalStatus).toBe("OK");
      expect(available.status?.poweredOn).toBe(false);
      // Ironic asked the emulator about exactly this server, with the Secret's credentials.
      const bmcLog = await readFile(bmc!.log, "utf8");
      expect(bmcLog).toMatch(new RegExp(`GET /redfish/v1/Systems/${NODE.uuid} HTTP/1.1" 200`));
      expect(bmcLog).not.toMatch(/HTTP\/1\.1" 401/);

      // A second deploy, with a new name for the REST API and the site's registry and file
      // server run by the chart, filled from the bundles: an upgrade that keeps the CA and the credentials.
      await ssh(sshPort, "install -d -o 65532 -g 65532 /var/lib/icn-bootstrap/registry /var/lib/icn-bootstrap/files");
      await writeFile(valuesFile, values(["bpa.developer.test"], true));
      const imagesBundle = join(work, "out", "icn-bootstrap-images.tar");
      const filesBundle = join(work, "out", "icn-bootstrap-files.tar");
      const upgraded = await deploy("--images", imagesBundle, "--registry-at", `127.0.0.1:${registryPort}`, "--files", filesBundle);
      console.log(`deploy with serve:\n${upgraded.all}`);
      expect(upgraded.exitCode, upgraded.all).toBe(0);
      for (const name of ["bpa-system/icn-registry: available", "bpa-system/icn-files: available", "digests unchanged", "unpacked in"])
        expect(upgraded.all).toContain(name);
      phase("deploy again: release upgraded, the chart's registry and file server filled");
      const releases = (await c.core.listNamespacedSecret({ namespace: "bpa-system", labelSelector: "owner=helm,name=icn" })).items;
      expect(releases.map((s) => s.metadata!.labels!.version).sort()).toEqual(["1", "2"]);
      expect((await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "icn-site-ca" })).data).toEqual(caSecret.data);
      expect((await c.core.readNamespacedSecret({ namespace: "baremetal-operator-system", name: "ironic-credentials" })).data).toEqual(ironicCredentials.data);
      const reissued = await c.core.readNamespacedSecret({ namespace: "bpa-system", name: "bpa-api-tls" });
      expect(reissued.data!["tls.crt"]).not.toBe(apiTls.data!["tls.crt"]);
      const uploads = await waitFor(
        "the REST API answering after the upgrade",
        async () =>
          rest
            .json<{ items: UploadRecord[] }>("/api/v1/uploads")
            .then((r) => (r.status === 200 ? r.body : undefined))
            .catch(() => undefined),
        15 * 60_000,
        5000,
      );
      expect(uploads.items.map((u) => `${u.kind} ${u.name} ${u.state} ${u.sha256}`)).toContain(`file dev/blob.bin published ${sha256(blob)}`);
      expect(await stored()).toBe(sha256(blob));
      expect((await hostState()).status?.provisioning?.state).toBe("available");

      // The chart's registry and file server, asked as a compute node asks them: at the nodes' address, from inside the VM.
      const config = yaml.load((await c.core.readNamespacedConfigMap({ namespace: "bpa-system", name: "bpa-config" })).data!["config.yaml"]!) as {
        registryHost: string;
        filesRepo: string;
      };
      expect(config.registryHost).toBe(`${advertise}:${SERVE.registryPort}`);
      expect(config.filesRepo).toBe(`http://${advertise}:${SERVE.filesPort}/kubespray`);
      const bundled = JSON.parse(await tarMember(imagesBundle, "icn-images.json").then((b) => b.toString())) as {
        repository: string;
        tag: string;
        digest: string;
      }[];
      const bpa = bundled.find((i) => i.repository === "icn/bpa")!;
      const caOnNode = "/run/icn-e2e-site-ca.crt";
      await ssh(sshPort, `cat > ${caOnNode} <<'EOF'\n${caPem.trim()}\nEOF`);
      const curlOnNode = (args: string) => ssh(sshPort, `curl -sS --cacert ${caOnNode} ${args}`).then((r) => r.stdout);
      const accept = "application/vnd.oci.image.manifest.v1+json,application/vnd.oci.image.index.v1+json,application/vnd.docker.distribution.manifest.v2+json";
      const headers = await curlOnNode(`-I -H 'Accept: ${accept}' https://${config.registryHost}/v2/icn/bpa/manifests/${bpa.tag}`);
      expect(headers.toLowerCase()).toContain(`docker-content-digest: ${bpa.digest}`);
      // Anonymous pulls, never anonymous pushes.
      expect(await curlOnNode(`-o /dev/null -w '%{http_code}' -X POST https://${config.registryHost}/v2/icn/evil/blobs/uploads/`)).toBe("401");
      phase(`the chart's registry serves ${bundled.length} images at ${config.registryHost}`);
      const kubesprayFile = await firstMember(filesBundle, (path) => path.startsWith("kubespray/") && path.endsWith("/kubeadm"));
      const served = await ssh(sshPort, `curl -sSf ${config.filesRepo.replace(/\/kubespray$/, "")}/${kubesprayFile.path} | sha256sum`);
      expect(served.stdout.split(" ")[0]).toBe(sha256(kubesprayFile.data));
      const uploadServed = await ssh(sshPort, `curl -sSf http://${advertise}:${SERVE.filesPort}/uploads/dev/blob.bin | sha256sum`);
      expect(uploadServed.stdout.split(" ")[0]).toBe(sha256(blob));
      phase(`the chart's file server serves ${kubesprayFile.path} and the upload`);
    },
  );
});

/** One member of a tar file, read whole. */
async function tarMember(file: string, path: string): Promise<Buffer> {
  return (await firstMember(file, (p) => p === path)).data;
}

/** The first member of a tar file whose path matches, read whole. */
async function firstMember(file: string, matches: (path: string) => boolean): Promise<{ path: string; data: Buffer }> {
  let found: { path: string; data: Buffer } | undefined;
  await tar.list({
    file,
    filter: (path) => !found && matches(path),
    onReadEntry: (entry) => {
      const chunks: Buffer[] = [];
      entry.on("data", (c: Buffer) => chunks.push(c));
      entry.on("end", () => (found ??= { path: entry.path, data: Buffer.concat(chunks) }));
    },
  });
  if (!found) throw new Error(`${file}: no member matches`);
  return found;
}
