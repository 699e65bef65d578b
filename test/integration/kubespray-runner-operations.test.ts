/**
 * The kubespray runner's day-2 contract (images/kubespray-runner/entrypoint.py): what the
 * BPA's operation Jobs set (BPA_OPERATION, BPA_PLAYBOOK, BPA_LIMIT, BPA_EXTRA_VARS) becomes
 * the ansible-playbook runs kubespray documents: every host's facts refreshed before a
 * limited run, --limit, -e name=value. The real runner and the real ansible-playbook run;
 * the playbooks are a STAND-IN tree (written below, named so in its README) that only
 * records on which hosts and with which variables they ran, over a local connection. The
 * real kubespray's scale.yml runs in `npm run e2e:kubespray`.
 */
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTestCA } from "../helpers/fixtures/bpa/registry-ca.js";

const REPO = new URL("../../", import.meta.url).pathname;
let work: string;
let tree: string;
let record: string;

const RECORD_PLAY = (name: string) => `---
# STAND-IN for kubespray's ${name} (see README.md): records where and how it ran.
- name: Stand-in ${name}
  hosts: all
  gather_facts: false
  tasks:
    - name: Record the run
      ansible.builtin.copy:
        dest: "{{ standin_record }}/${name.replace(/\//g, "_")}-{{ inventory_hostname }}.json"
        content: "{{ {'limit': ansible_limit | default(''), 'node': node | default(''), 'skip_confirmation': skip_confirmation | default(''), 'kube_version': kube_version | default('')} | to_json }}"
`;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "runner-ops-"));
  tree = join(work, "kubespray");
  record = join(work, "record");
  await mkdir(join(tree, "playbooks"), { recursive: true });
  await mkdir(record);
  await writeFile(
    join(tree, "README.md"),
    "# kubespray STAND-IN\n\nNot kubespray: icn-bootstrap's runner test writes it; its playbooks only record how they were run.\n",
  );
  await writeFile(
    join(tree, "ansible.cfg"),
    `[defaults]\nfact_caching = jsonfile\nfact_caching_connection = ${join(work, "facts")}\nhost_key_checking = False\n`,
  );
  for (const name of ["cluster.yml", "scale.yml", "remove-node.yml", "upgrade-cluster.yml", "playbooks/facts.yml"])
    await writeFile(join(tree, name), RECORD_PLAY(name));
  const inventory = join(work, "inventory");
  await mkdir(join(inventory, "group_vars", "all"), { recursive: true });
  await writeFile(
    join(inventory, "hosts.ini"),
    [
      "[all]",
      "m0 ansible_connection=local ansible_python_interpreter=python3",
      "w1 ansible_connection=local ansible_python_interpreter=python3",
      "",
      "[kube_control_plane]",
      "m0",
      "",
      "[kube_node]",
      "m0",
      "w1",
      "",
    ].join("\n"),
  );
  await writeFile(join(inventory, "group_vars", "all", "offline.yml"), `---\nstandin_record: ${record}\nkube_version: 1.35.4\n`);
  await writeFile(join(inventory, "registry-ca.crt"), makeTestCA("runner operations test CA").pem);
  await writeFile(join(work, "id_ed25519"), "not used: every host is local\n", { mode: 0o400 });
}, 60_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

async function runner(env: Record<string, string>) {
  await rm(record, { recursive: true, force: true });
  await mkdir(record);
  const result = await execa("python3", [join(REPO, "images/kubespray-runner/entrypoint.py"), "install"], {
    reject: false,
    all: true,
    env: {
      BPA_INVENTORY: join(work, "inventory", "hosts.ini"),
      BPA_SSH_KEY: join(work, "id_ed25519"),
      BPA_KUBESPRAY_DIR: tree,
      BPA_REGISTRY_CA_NODE_PATH: join(work, "node", "registry-ca.crt"),
      BPA_TERMINATION_LOG: join(work, "termination-log"),
      BPA_WORK_DIR: work,
      BPA_PROVISIONING: "edge",
      BPA_INSTALL_HASH: "0123456789abcdef",
      ANSIBLE_LOCAL_TEMP: join(work, ".ansible-tmp"),
      ANSIBLE_HOME: join(work, ".ansible"),
      // The host's Debian ansible-core has no Mitogen; the runner image's is tested in kubespray-inventory.test.ts.
      BPA_ANSIBLE_STRATEGY: "linear",
      ...env,
    },
  });
  const runs: Record<string, Record<string, string>> = {};
  for (const file of (await readdir(record)).sort()) runs[file.replace(/\.json$/, "")] = JSON.parse(await readFile(join(record, file), "utf8"));
  return { result, runs };
}

describe("the runner's day-2 operations", () => {
  it("scale: refreshes every host's facts, then runs scale.yml limited to the new host; no kubeconfig needed", async () => {
    const { result, runs } = await runner({ BPA_OPERATION: "scale", BPA_PLAYBOOK: "scale.yml", BPA_LIMIT: "w1" });
    expect(result.exitCode, result.all).toBe(0);
    expect(Object.keys(runs)).toEqual(["playbooks_facts.yml-m0", "playbooks_facts.yml-w1", "scale.yml-w1"]);
    expect(runs["playbooks_facts.yml-m0"]!.limit).toBe("");
    expect(runs["scale.yml-w1"]).toMatchObject({ limit: "w1", kube_version: "1.35.4" });
    expect(result.all).toContain("bpa-runner: provisioning edge scale 0123456789abcdef: scale.yml --limit w1");
    expect(result.all).toContain("scale done (scale.yml wrote no kubeconfig; the one handed back before stays)");
    expect(await readFile(join(work, "node", "registry-ca.crt"), "utf8")).toContain("BEGIN CERTIFICATE");
  });

  it("remove: remove-node.yml with node and skip_confirmation as extra variables, on every host of the inventory", async () => {
    const { result, runs } = await runner({
      BPA_OPERATION: "remove",
      BPA_PLAYBOOK: "remove-node.yml",
      BPA_EXTRA_VARS: JSON.stringify({ node: "w1", skip_confirmation: "true" }),
    });
    expect(result.exitCode, result.all).toBe(0);
    expect(Object.keys(runs)).toEqual(["remove-node.yml-m0", "remove-node.yml-w1"]);
    expect(runs["remove-node.yml-w1"]).toMatchObject({ node: "w1", skip_confirmation: "true", limit: "" });
  });

  it("refuses a bad operation, limit or variables before running anything, saying which", async () => {
    for (const [env, message] of [
      [{ BPA_OPERATION: "reboot" }, "unknown operation 'reboot'"],
      [{ BPA_OPERATION: "scale", BPA_LIMIT: "w1,--become" }, "BPA_LIMIT names '--become'"],
      [{ BPA_OPERATION: "remove", BPA_EXTRA_VARS: "node=w1" }, "BPA_EXTRA_VARS is not JSON"],
      [{ BPA_OPERATION: "remove", BPA_EXTRA_VARS: JSON.stringify({ node: ["w1"] }) }, "BPA_EXTRA_VARS must be a JSON object of strings"],
    ] as const) {
      const { result, runs } = await runner({ BPA_PLAYBOOK: "scale.yml", ...env });
      expect(result.exitCode).toBe(2);
      expect(result.all).toContain(message);
      expect(await readFile(join(work, "termination-log"), "utf8")).toContain(message);
      expect(runs).toEqual({});
    }
  });
});
