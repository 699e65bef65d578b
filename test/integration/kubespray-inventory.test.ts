/**
 * The real kubespray (lock file artifacts.kubespray, fetched through the upstream mirror
 * like any pinned download) inside the real runner image, run with bubblewrap on its own
 * root filesystem (its Debian python3 and kubespray's pinned PyPI packages):
 * - kubespray's own inventory validation (playbooks/boilerplate.yml: the Ansible version
 *   check and the validate_inventory role) accepts the inventories the BPA writes, with the
 *   BPA's offline variables and the build's kubespray pins, and rejects what it must;
 * - every file and image kubespray would download for such an inventory (its `downloads`
 *   table, evaluated by builder/kubespray/offline-list.yml) is checked against what the
 *   build serves: the file server's tree (sha256) and the seeded registry's images.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { execa } from "execa";
import yaml from "js-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AssignedHost } from "../../bpa/api/types.js";
import { allRoles, normalizeSpec } from "../../bpa/api/spec.js";
import { hostFacts, toAssignedHost } from "../../bpa/assign/hosts.js";
import { planAssignment } from "../../bpa/assign/plan.js";
import { parseConfig } from "../../bpa/config/config.js";
import { clusterVersion, renderGroupVars } from "../../bpa/inventory/group-vars.js";
import { renderHostsIni } from "../../bpa/inventory/hosts-ini.js";
import { nextOperation } from "../../bpa/jobs/operation.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir, runStages, type StagesBuilt } from "../../builder/pipeline.js";
import { archiveMembers, OFFLINE_ARCHIVES } from "../../builder/kubespray/components.js";
import { FILES_ROOT, KUBESPRAY_PINS } from "../../builder/stages/files.js";
import { MANIFESTS_TARGET } from "../../builder/stages/overlays.js";
import { KUBESPRAY_PINS_CONFIGMAP, KUBESPRAY_PINS_KEY, readServedPins } from "../../common/kubespray-pins.js";
import { REPO } from "../helpers/cli.js";
import { bmh } from "../helpers/fixtures/bpa/hosts.js";
import { prng } from "../helpers/fixtures/prng.js";
import { inImage, unpackImage } from "../helpers/oci-rootfs.js";

const RUNNER = "bootstrap.icn:5000/icn/kubespray-runner:v2.31.0";
const REGISTRY = "bootstrap.icn:5000";
const FILES_REPO = "http://bootstrap.icn:8080/kubespray";
/** Where the runner finds the pins: beside the inventory, as the BPA mounts them. */
const PINS = "/tmp/inventory/kubespray-pins.yml";

let content: StagesBuilt;
let root: string;
let work: string;
let kubernetesVersion: string;
/** A lock entry's version without its "v": what the pins and the tools print. */
let pinnedVersion: (entry: string) => string;

const host = (name: string, role: "master" | "worker", index: number, ip: string): AssignedHost => ({
  name,
  namespace: "site",
  role,
  index,
  mac: "52:54:00:00:00:01",
  ip,
  cpu: 4,
  ramMebibytes: 8192,
});
const LAYOUTS: Record<string, AssignedHost[]> = {
  "one node (control plane and worker)": [host("node1", "master", 0, "10.10.0.11")],
  "a master and a worker": [host("node1", "master", 0, "10.10.0.11"), host("node2", "worker", 0, "10.10.0.12")],
  "three masters and two workers": [0, 1, 2]
    .map((i) => host(`m${i}`, "master", i, `10.10.0.${20 + i}`))
    .concat([0, 1].map((i) => host(`w${i}`, "worker", i, `10.10.0.${30 + i}`))),
};

/** A hundred hosts as the BPA plans them: 3 control-plane, 97 workers, out of 120 of varied sizes. */
const HUNDRED = plannedHosts(3, 97, 120);
/** What a site of more than 64 nodes sets in the BPA's configuration (extraVars): /25 per node, 128 nodes in kubespray's /18. */
const WIDE_POD_NETWORK = { kube_network_node_prefix: 25 };

/** Roles assigned by the BPA's own planner (bpa/assign) among `known` hosts of varied sizes, SR-IOV on every third. */
function plannedHosts(masters: number, workers: number, known: number): AssignedHost[] {
  const random = prng(100);
  const bmhs = Array.from({ length: known }, (_, i) =>
    bmh({
      name: `node-${String(i).padStart(3, "0")}`,
      namespace: "site",
      cpu: 8 + 8 * Math.floor(random() * 4),
      ram: 16384 * (1 + Math.floor(random() * 4)),
      ip: `10.20.${i >> 8}.${(i & 255) + 1}`,
      ...(i % 3 === 0 ? { nicModel: "0x8086 0x1572" } : {}),
    }),
  );
  const spec = normalizeSpec({
    master: Array.from({ length: masters }, () => ({ cpu: 8, memory: "16Gi" })),
    worker: Array.from({ length: workers }, (_, i) => ({ cpu: 8, memory: "16Gi", ...(i < 10 ? { sriov: true } : {}) })),
  });
  if (!spec.ok) throw new Error(spec.errors.join("; "));
  const plan = planAssignment({ roles: allRoles(spec.spec), hosts: bmhs.map(hostFacts) });
  if (!plan.ok) throw new Error(plan.message);
  const byName = new Map(bmhs.map((b) => [b.metadata.name, b]));
  return plan.placements.map(({ role, host }) => toAssignedHost(role, host, byName.get(host.name)!));
}

/** The BPA's configuration as the appliance ships it (manifests/bpa/config.yaml). */
async function shippedConfig() {
  const configMap = yaml.load(await readFile(join(REPO, "manifests/bpa/config.yaml"), "utf8")) as { data: Record<string, string> };
  return parseConfig(yaml.load(configMap.data["config.yaml"]!), "manifests/bpa/config.yaml");
}

/** The pins as the appliance ships them: the build's ConfigMap among the first-boot manifests. */
async function shippedPins(): Promise<string> {
  const configMap = yaml.load(await readFile(join(content.files!.dir, "tree", MANIFESTS_TARGET, "bpa/kubespray-pins.yaml"), "utf8")) as {
    metadata: { name: string; namespace: string };
    data: Record<string, string>;
  };
  expect(configMap.metadata).toMatchObject({ name: KUBESPRAY_PINS_CONFIGMAP, namespace: "bpa-system" });
  return configMap.data[KUBESPRAY_PINS_KEY]!;
}

/** The inventory directory the BPA mounts into the install Job: hosts.ini, group_vars/all/offline.yml and the pins. */
async function writeInventory(name: string, hosts: AssignedHost[], hostsIni?: string, extraVars: Record<string, unknown> = {}): Promise<string> {
  const dir = join(work, name.replace(/\W+/g, "-"));
  await mkdir(join(dir, "group_vars/all"), { recursive: true });
  await writeFile(join(dir, "hosts.ini"), hostsIni ?? renderHostsIni(hosts, { provisioning: "site/cluster", installHash: "0".repeat(64) }));
  const shipped = await shippedConfig();
  const config = { ...shipped, extraVars: { ...shipped.extraVars, ...extraVars } };
  const pins = await shippedPins();
  const served = readServedPins(pins);
  if (typeof served === "string") throw new Error(`the build's pins: ${served}`);
  await writeFile(
    join(dir, "group_vars/all/offline.yml"),
    renderGroupVars(config, "site/cluster", clusterVersion(config.kubernetesVersions ?? served.kubernetesVersions)),
  );
  await writeFile(join(dir, "kubespray-pins.yml"), pins);
  return dir;
}

/** ansible-playbook as the runner runs it: the pins as extra vars (`after`: extra vars that override even them). */
function ansible(inventory: string, args: string[], after: string[] = []) {
  return inImage(root, ["ansible-playbook", "-i", "/tmp/inventory/hosts.ini", ...args, "-e", `@${PINS}`, ...after], {
    binds: { [inventory]: "/tmp/inventory" },
    cwd: "/kubespray",
  });
}

async function sha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "icn-kubespray-inv-"));
  const lock = await loadLock(DEFAULT_LOCK);
  kubernetesVersion = (lock.artifacts.kubernetes as { version: string }).version;
  pinnedVersion = (entry) => (lock.artifacts[entry] as { version: string }).version.replace(/^v/, "");
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  expect(definition.kubespray.enabled).toBe(true);
  // The build's files and images stages, digests checked against registry-seed/.
  content = await runStages({ definition, lock, lockPath: DEFAULT_LOCK, stagesDir: stagesDir(), sections: ["content"], stopAfterImages: true });
  root = join(work, "runner-root");
  await unpackImage(content.images!.dir, RUNNER, root);
}, 40 * 60_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("the runner image", () => {
  it("runs kubespray's pinned Python packages on the image's own python3, not Debian's ansible", async () => {
    const requirements = await readFile(join(REPO, "images/kubespray-runner/requirements.txt"), "utf8");
    const core = /^ansible-core==(\S+)/m.exec(requirements)![1]!;
    const version = await inImage(root, ["ansible-playbook", "--version"]);
    expect(version.exitCode, version.all).toBe(0);
    expect(version.all).toContain(`ansible-playbook [core ${core}]`);
    expect(version.all).toMatch(/python version = 3\.13\.\d+ .*\(\/usr\/bin\/python3\)/);
    const modules = await inImage(root, [
      "python3",
      "-c",
      "import jmespath, netaddr, cryptography, ansible_collections.community.crypto, ansible_collections.ansible.utils; print(cryptography.__version__)",
    ]);
    expect(modules.exitCode, modules.all).toBe(0);
    expect(modules.all.trim()).toBe(/^cryptography==(\S+)/m.exec(requirements)![1]);
    expect((await inImage(root, ["test", "-e", "/usr/bin/ansible-playbook"])).exitCode).toBe(1);
  });

  it("runs playbooks with Mitogen's strategy by default (its entrypoint's choice), the pinned Mitogen working under the pinned ansible-core", async () => {
    const chosen = await inImage(root, [
      "python3",
      "-c",
      "import importlib.util as u, importlib.machinery as m, json; l = m.SourceFileLoader('e', '/usr/local/bin/bpa-runner'); s = u.spec_from_loader('e', l); e = u.module_from_spec(s); l.exec_module(e); print(json.dumps(e.strategy_env()))",
    ]);
    expect(chosen.exitCode, chosen.all).toBe(0);
    const strategyEnv = JSON.parse(chosen.stdout) as Record<string, string>;
    expect(strategyEnv).toEqual({
      ANSIBLE_STRATEGY: "mitogen_linear",
      ANSIBLE_STRATEGY_PLUGINS: expect.stringMatching(/^\/usr\/local\/lib\/python3\.13\/dist-packages\/ansible_mitogen\/plugins\/strategy$/),
    });
    // The module's process says who ran it: Mitogen's context (python3(mitogen:…)) or Ansible's own AnsiballZ file.
    const play = join(work, "mitogen-play");
    await mkdir(play, { recursive: true });
    await writeFile(
      join(play, "play.yml"),
      [
        "- hosts: localhost",
        "  connection: local",
        "  gather_facts: false",
        "  tasks:",
        "    - ansible.builtin.shell: tr '\\0' ' ' < /proc/$PPID/cmdline",
        "      register: parent",
        '    - ansible.builtin.debug: { msg: "module run by: {{ parent.stdout }}" }',
        "",
      ].join("\n"),
    );
    const run = (env: Record<string, string>) => inImage(root, ["ansible-playbook", "/tmp/play/play.yml"], { binds: { [play]: "/tmp/play" }, env });
    const ran = await run(strategyEnv);
    expect(ran.exitCode, ran.all).toBe(0);
    expect(ran.all).toMatch(/ok=2\s+changed=1\s+unreachable=0\s+failed=0/);
    expect(ran.all).toMatch(/module run by: \/usr\/bin\/python3\S*\(mitogen:/);
    const own = await run({ ANSIBLE_STRATEGY: "linear" });
    expect(own.exitCode, own.all).toBe(0);
    expect(own.all).toMatch(/module run by: \S*python3\S* \S*AnsiballZ_command\.py/);
  });

  it("carries no served versions: the build's kubespray pins (a ConfigMap the BPA mounts) have the served Kubernetes version with the file server's sha256", async () => {
    expect((await inImage(root, ["sh", "-c", "ls /etc/bpa-runner 2>&1; env | grep BPA_ || true"])).all).not.toMatch(/kubespray-pins|BPA_KUBESPRAY_PINS/);
    const text = await shippedPins();
    const pins = yaml.load(text) as Record<string, unknown>;
    const version = kubernetesVersion.replace(/^v/, "");
    // The one version served; the BPA reads it from the pins (its shipped configuration does not narrow them), and its group variables name it.
    expect(Object.keys((pins.kubelet_checksums as Record<string, Record<string, string>>).amd64!)).toEqual([version]);
    expect((await shippedConfig()).kubernetesVersions).toBeUndefined();
    expect(readServedPins(text)).toMatchObject({
      kubernetesVersions: [version],
      components: { containerd: pinnedVersion("containerd"), etcd: pinnedVersion("etcd"), "cni-plugins": expect.any(String) },
    });
    expect(
      yaml.load(await readFile(join(await writeInventory("version", LAYOUTS["one node (control plane and worker)"]!), "group_vars/all/offline.yml"), "utf8")),
    ).toMatchObject({ kube_version: version });
    expect(await readFile(join(content.files!.dir, KUBESPRAY_PINS), "utf8")).toBe(text);
    const served = join(content.files!.dir, "tree", FILES_ROOT, "kubespray/dl.k8s.io/release", kubernetesVersion, "bin/linux/amd64");
    for (const name of ["kubeadm", "kubelet", "kubectl"]) {
      expect((pins[`${name}_checksums`] as Record<string, Record<string, string>>).amd64![version]).toBe(`sha256:${await sha256(join(served, name))}`);
    }
  });
});

describe("kubespray's inventory validation (playbooks/boilerplate.yml) in the runner image", () => {
  for (const [layout, hosts] of Object.entries(LAYOUTS)) {
    it(`accepts the BPA's inventory for ${layout}`, async () => {
      const inventory = await writeInventory(layout, hosts);
      const ini = await readFile(join(inventory, "hosts.ini"), "utf8");
      for (const h of hosts) expect(ini).toContain(h.name);
      const result = await ansible(inventory, ["playbooks/boilerplate.yml"]);
      const errors = result.all.split("\n").filter((line) => /fatal:|ERROR|failed=[1-9]|unreachable=[1-9]/.test(line));
      expect(result.exitCode, [...errors.slice(0, 20), result.all.slice(-2000)].join("\n")).toBe(0);
      expect(result.all).toContain("TASK [validate_inventory : Stop if unsupported version of Kubernetes]");
      expect(result.all).toMatch(/PLAY RECAP[\s\S]*failed=0/);
      expect(result.all).not.toMatch(/failed=[1-9]/);
    });
  }

  it("accepts a hundred hosts as the BPA plans them with the pod network a site of that size sets", async () => {
    const inventory = await writeInventory("hundred", HUNDRED, undefined, WIDE_POD_NETWORK);
    const ini = await readFile(join(inventory, "hosts.ini"), "utf8");
    expect(HUNDRED.filter((h) => ini.includes(`${h.name} ansible_host=${h.ip}`))).toHaveLength(100);
    const result = await ansible(inventory, ["playbooks/boilerplate.yml"]);
    const errors = result.all.split("\n").filter((line) => /fatal:|ERROR|failed=[1-9]|unreachable=[1-9]/.test(line));
    expect(result.exitCode, [...errors.slice(0, 20), result.all.slice(-2000)].join("\n")).toBe(0);
    expect(result.all).toMatch(/TASK \[validate_inventory : Check that ipv4 IP range is enough for the nodes\][\s\S]*?ok: \[/);
  });

  it("rejects a hundred hosts in kubespray's default pod network (64 nodes of /24 in a /18), as the BPA does before planning", async () => {
    const inventory = await writeInventory("hundred-default", HUNDRED);
    const result = await ansible(inventory, ["playbooks/boilerplate.yml"]);
    expect(result.exitCode).not.toBe(0);
    expect(result.all).toMatch(/Not enough ipv4 IPs are available for the desired node count/);
  });

  it("scale.yml limited as the BPA's scale Job limits it reaches the first master's certificate upload and the new node's join", async () => {
    const node1 = host("node1", "master", 0, "10.10.0.11");
    const node2 = host("node2", "worker", 0, "10.10.0.12");
    const next = nextOperation({
      cluster: { hosts: [node1], kubernetesVersion, mastersAreNodes: true, revision: 1 },
      wanted: [node1, node2],
      wantedVersion: kubernetesVersion,
      servedVersions: [kubernetesVersion],
    });
    if (!("operation" in next)) throw new Error(`expected a scale operation, got ${JSON.stringify(next)}`);
    const op = next.operation;
    const inventory = await writeInventory(
      "scale",
      op.inventoryHosts,
      renderHostsIni(op.inventoryHosts, { provisioning: "site/cluster", installHash: "1".repeat(64) }, { mastersAreNodes: op.mastersAreNodes }),
    );
    /** play name -> its hosts, from ansible-playbook --list-hosts. */
    const plays = async (limit: string) => {
      const r = await ansible(inventory, ["scale.yml", "--list-hosts", "--limit", limit]);
      expect(r.exitCode, r.all).toBe(0);
      const out = new Map<string, string[]>();
      let current = "";
      for (const line of String(r.all).split("\n")) {
        const play = /^\s*play #\d+ \([^)]*\): (.+?)\s+TAGS:/.exec(line);
        if (play) out.set((current = play[1]!), []);
        else if (current && /^\s{6}\S+$/.test(line)) out.get(current)!.push(line.trim());
      }
      return out;
    };
    const upload = "Upload control plane certs and retrieve encryption key";
    const join = "Target only workers to get kubelet installed and checking in on any new nodes(network)";
    const limited = await plays(op.limit!.join(","));
    expect(op.limit).toEqual(["node2", "node1"]);
    expect(limited.get(upload)).toEqual(["node1"]);
    expect(limited.get(join)).toContain("node2");
    // The new node alone, as kubespray's nodes.md suggests, leaves the upload out: its join
    // then fails on the missing kubeadm_certificate_key (the e2e's first scale run).
    expect((await plays("node2")).get(upload) ?? []).toEqual([]);
  });

  it("rejects a Kubernetes version the appliance does not serve (the pins have no checksum for it)", async () => {
    const inventory = await writeInventory("unserved-version", LAYOUTS["one node (control plane and worker)"]!);
    // A newer patch than the one the appliance builds.
    const result = await ansible(inventory, ["playbooks/boilerplate.yml"], ["-e", "kube_version=1.35.9"]);
    expect(result.exitCode).not.toBe(0);
    expect(result.all).toContain("Kubernetes v1.35.9 is not supported for amd64");
  });

  it("rejects an even number of etcd members", async () => {
    const two = [host("m0", "master", 0, "10.10.0.20"), host("m1", "master", 1, "10.10.0.21")];
    const bad = renderHostsIni(two, { provisioning: "site/bad", installHash: "1".repeat(64) }).replace(/\[etcd\]\nm0\n/, "[etcd]\nm0\nm1\n");
    const result = await ansible(await writeInventory("even-etcd", two, bad), ["playbooks/boilerplate.yml"]);
    expect(result.exitCode).not.toBe(0);
    expect(result.all).toMatch(/even number of etcd hosts/i);
  });
});

describe("what kubespray downloads for the BPA's inventory", () => {
  it("is served by the build, every file with the sha256 kubespray checks and every image in the seeded registry", async () => {
    const inventory = await writeInventory("offline-list", LAYOUTS["a master and a worker"]!);
    const out = join(work, "offline-list-out");
    await mkdir(out, { recursive: true });
    const play = join(work, "offline-list.yml");
    await writeFile(play, await readFile(join(REPO, "builder/kubespray/offline-list.yml"), "utf8"));
    const result = await inImage(
      root,
      ["ansible-playbook", "-i", "/tmp/inventory/hosts.ini", "/tmp/play/offline-list.yml", "-e", `@${PINS}`, "-e", "offline_list_out=/tmp/out"],
      {
        binds: { [inventory]: "/tmp/inventory", [work]: "/tmp/play", [out]: "/tmp/out" },
        cwd: "/kubespray",
        env: { ANSIBLE_ROLES_PATH: "/kubespray/roles" },
      },
    );
    expect(result.exitCode, result.all.slice(-3000)).toBe(0);
    const lines = new Set<string>();
    for (const file of await readdir(out)) for (const line of (await readFile(join(out, file), "utf8")).split("\n")) if (line.trim()) lines.add(line.trim());

    const filesRoot = join(content.files!.dir, "tree", FILES_ROOT, "kubespray");
    const servedImages = new Set(content.selection!.images.flatMap((i) => [`${i.repository}:${i.tag}`, ...i.tags.map((t) => `${i.repository}:${t}`)]));
    const missing: string[] = [];
    const checked: string[] = [];
    for (const line of [...lines].sort()) {
      const [kind, what, checksum] = line.split(" ");
      if (kind === "file") {
        expect(what!.startsWith(`${FILES_REPO}/`), what).toBe(true);
        const path = what!.slice(FILES_REPO.length + 1);
        const digest = await sha256(join(filesRoot, path)).catch(() => undefined);
        if (!digest) missing.push(`file ${path}`);
        else {
          expect(`sha256:${digest}`, path).toBe(checksum);
          checked.push(path);
        }
      } else {
        expect(kind).toBe("image");
        expect(what!.startsWith(`${REGISTRY}/`), what).toBe(true);
        const reference = what!.slice(REGISTRY.length + 1);
        const repository = reference.slice(0, reference.lastIndexOf(":"));
        const tag = reference.slice(reference.lastIndexOf(":") + 1);
        if (servedImages.has(`${repository}:${tag}`)) checked.push(`${repository}:${tag}`);
        else missing.push(`image ${repository}:${tag}`);
      }
    }
    console.log(`kubespray downloads for a master and a worker: ${checked.length} served and checked (${checked.join(", ")}); not served: ${missing.length}`);
    const etcdVersion = ((await loadLock(DEFAULT_LOCK)).artifacts.etcd as { version: string }).version;
    expect(checked).toEqual(
      expect.arrayContaining([
        `dl.k8s.io/release/${kubernetesVersion}/bin/linux/amd64/kubeadm`,
        `github.com/etcd-io/etcd/releases/download/${etcdVersion}/etcd-${etcdVersion}-linux-amd64.tar.gz`,
        `etcd:${content.selection!.images.find((i) => i.repository === "etcd")!.tag}`,
      ]),
    );
    expect(missing, "kubespray downloads these, and the appliance does not serve them").toEqual([]);
  });
});

describe("kubespray's download table, rendered once by the runner before the playbook", () => {
  it("is the appliance's: every file it enables from the file server with the sha256 of the served file, every image from the registry", async () => {
    const inventory = await writeInventory("rendered-downloads", LAYOUTS["a master and a worker"]!);
    // The runner's own render playbook (entrypoint.py), written by the image's entrypoint code, run as it runs it.
    const script = [
      "import importlib.machinery, importlib.util",
      "loader = importlib.machinery.SourceFileLoader('runner', '/usr/local/bin/bpa-runner')",
      "spec = importlib.util.spec_from_loader('runner', loader)",
      "runner = importlib.util.module_from_spec(spec)",
      "loader.exec_module(runner)",
      "print(runner.render_downloads_playbook('/tmp/inventory', '/tmp/inventory/downloads.json'))",
    ].join("\n");
    const written = await inImage(root, ["python3", "-c", script], { binds: { [inventory]: "/tmp/inventory" } });
    expect(written.exitCode, written.all).toBe(0);
    const rendered = await ansible(inventory, [written.stdout.trim()]);
    expect(rendered.exitCode, rendered.all.slice(-3000)).toBe(0);
    const { downloads } = JSON.parse(await readFile(join(inventory, "downloads.json"), "utf8")) as {
      downloads: Record<string, { enabled: boolean; file?: boolean; container?: boolean; url?: string; checksum?: string; repo?: string }>;
    };
    // Rendered: no template is left for the playbook's tasks to render again.
    expect(JSON.stringify(downloads)).not.toContain("{{");
    const filesRoot = join(content.files!.dir, "tree", FILES_ROOT, "kubespray");
    const enabled = Object.entries(downloads).filter(([, d]) => d.enabled);
    const files = enabled.filter(([, d]) => d.file);
    expect(files.map(([name]) => name)).toEqual(expect.arrayContaining(["kubeadm", "kubelet", "runc", "containerd", "crictl", "nerdctl", "cni"]));
    for (const [name, d] of files) {
      expect(d.url!.startsWith(`${FILES_REPO}/`), `${name}: ${d.url}`).toBe(true);
      expect(`sha256:${await sha256(join(filesRoot, d.url!.slice(FILES_REPO.length + 1)))}`, name).toBe(d.checksum);
    }
    for (const [name, d] of enabled.filter(([, d]) => d.container)) expect(d.repo!.startsWith(`${REGISTRY}/`), `${name}: ${d.repo}`).toBe(true);
  });
});

describe("the compute nodes' release archives on the file server", () => {
  it("have the upstream layout kubespray unpacks, and their programs report the pinned versions", async () => {
    const lock = await loadLock(DEFAULT_LOCK);
    const repo = join(content.files!.dir, "tree", FILES_ROOT, "kubespray");
    const extract = join(work, "archives");
    for (const archive of OFFLINE_ARCHIVES.filter((a) => a.members)) {
      const version = (lock.artifacts[archive.entry] as { version: string }).version.replace(/^v/, "");
      const file = join(repo, archive.path(version));
      const members = (await execa("tar", ["-tzvf", file])).stdout.split("\n");
      expect(members.map((l) => l.split(/\s+/).pop()).sort(), archive.entry).toEqual(Object.keys(archiveMembers(archive, version)).sort());
      for (const line of members) expect(line, archive.entry).toMatch(/^-rwxr-xr-x 0\/0 .* 1970-01-01 00:00 /);
      expect(await readFile(`${file}.sha256sum`, "utf8")).toBe(`${await sha256(file)}  ${basename(file)}\n`);
      await mkdir(join(extract, archive.entry), { recursive: true });
      await execa("tar", ["-xzf", file, "-C", join(extract, archive.entry)]);
    }
    expect((await execa(join(extract, "containerd/bin/containerd"), ["--version"])).stdout).toContain(`v${pinnedVersion("containerd")}`);
    // etcd's tarball, for the etcdctl and etcdutl kubespray installs on control-plane nodes.
    const etcd = (lock.artifacts.etcd as { version: string }).version.replace(/^v/, "");
    expect((await execa(join(extract, `etcd/etcd-v${etcd}-linux-amd64/etcdctl`), ["version"])).stdout).toContain(`etcdctl version: ${etcd}`);
    expect((await execa(join(extract, `etcd/etcd-v${etcd}-linux-amd64/etcdutl`), ["version"])).stdout).toContain(`etcdutl version: ${etcd}`);
    expect((await execa(join(extract, "crictl/crictl"), ["--version"])).stdout).toContain("1.36.0");
    expect((await execa(join(extract, "nerdctl/nerdctl"), ["--version"])).stdout).toBe("nerdctl version 2.0.4");
    // runc is a bare static binary (cgo, linked with the pinned toolchain's libseccomp).
    const runc = join(repo, OFFLINE_ARCHIVES.find((a) => a.entry === "runc")!.path(pinnedVersion("runc")));
    expect((await execa("ldd", [runc], { reject: false, all: true })).all).toMatch(/not a dynamic executable/);
    expect((await execa(runc, ["--version"])).stdout).toMatch(
      new RegExp(`^runc version ${pinnedVersion("runc").replaceAll(".", "\\.")}\\n[\\s\\S]*libseccomp: 2\\.6\\.0`),
    );
    expect((await execa(join(extract, "cni-plugins/bridge"), [], { reject: false, env: { CNI_COMMAND: "VERSION" } })).stdout).toContain('"cniVersion"');
  });
});

describe("the workers' API-server proxy", () => {
  it("kubespray's haproxy.cfg for the BPA's worker is accepted by the haproxy image's haproxy, pointing at the master", async () => {
    const inventory = await writeInventory("haproxy", LAYOUTS["a master and a worker"]!);
    const out = join(work, "haproxy-out");
    await mkdir(out, { recursive: true });
    const rendered = await inImage(root, ["ansible-playbook", "-i", "/tmp/inventory/hosts.ini", "/tmp/play/render-haproxy-cfg.yml", "-e", `@${PINS}`], {
      binds: { [inventory]: "/tmp/inventory", [join(REPO, "test/helpers/fixtures/kubespray")]: "/tmp/play", [out]: "/tmp/out" },
      cwd: "/kubespray",
      env: { ANSIBLE_ROLES_PATH: "/kubespray/roles" },
    });
    expect(rendered.exitCode, rendered.all.slice(-2000)).toBe(0);
    const cfg = await readFile(join(out, "haproxy-node2.cfg"), "utf8");
    expect(cfg).toMatch(/server node1 10\.10\.0\.11:6443 check/);
    const haproxyRef = content.selection!.images.find((i) => i.ref.startsWith("docker.io/library/haproxy:"))!.ref;
    const pins = yaml.load(await shippedPins()) as Record<string, unknown>;
    expect(pins.haproxy_image_tag).toBe(haproxyRef.split(":")[1]);
    const haproxyRoot = join(work, "haproxy-root");
    const image = await unpackImage(content.images!.dir, haproxyRef, haproxyRoot);
    const config = JSON.parse(
      await readFile(
        join(
          content.images!.dir,
          "oci/blobs/sha256",
          JSON.parse(await readFile(join(content.images!.dir, "oci/blobs/sha256", image.digest.replace("sha256:", "")), "utf8")).config.digest.replace(
            "sha256:",
            "",
          ),
        ),
        "utf8",
      ),
    );
    // kubespray's static pod mounts its configuration at /usr/local/etc/haproxy/ and runs the image's own command.
    expect(config.config.Entrypoint).toEqual(["/usr/sbin/haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]);
    const check = await inImage(haproxyRoot, ["/usr/sbin/haproxy", "-c", "-V", "-f", "/tmp/cfg/haproxy-node2.cfg"], { binds: { [out]: "/tmp/cfg" } });
    expect(check.exitCode, check.all).toBe(0);
    expect(check.all).toContain("Configuration file is valid");
  });
});
