import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { loadAll } from "js-yaml";
import { describe, expect, it } from "vitest";

const REPO = join(import.meta.dirname, "..", "..");
const BOOT_SCRIPT = join(REPO, "overlays", "usr", "lib", "icn-bootstrap", "kubernetes");

interface Deployment {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec: { progressDeadlineSeconds?: number };
}

async function manifestFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile() && e.name.endsWith(".yaml")).map((e) => join(e.parentPath, e.name));
}

async function deployments(): Promise<Map<string, Deployment>> {
  const found = new Map<string, Deployment>();
  for (const file of await manifestFiles(join(REPO, "manifests"))) {
    for (const doc of loadAll(await readFile(file, "utf8")) as (Deployment | null)[]) {
      if (doc?.kind === "Deployment") found.set(`${doc.metadata.namespace}/${doc.metadata.name}`, doc);
    }
  }
  return found;
}

describe("the appliance's boot waits for its own Deployments", () => {
  it("no Deployment the boot waits on reports its rollout failed before the boot stops waiting", async () => {
    const script = await readFile(BOOT_SCRIPT, "utf8");
    const waits = [...script.matchAll(/kubectl -n (\S+) rollout status deployment\/(\S+) --timeout=(\d+)s/g)].map((m) => ({
      key: `${m[1]}/${m[2]}`,
      seconds: Number(m[3]),
    }));
    expect(waits.map((w) => w.key)).toEqual(
      expect.arrayContaining(["bpa-system/bpa-operator", "baremetal-operator-system/ironic", "baremetal-operator-system/baremetal-operator"]),
    );
    const shipped = await deployments();
    for (const wait of waits) {
      const deployment = shipped.get(wait.key);
      expect(deployment, `${wait.key} is waited for but not in manifests/`).toBeDefined();
      // Kubernetes' default is 600 s; past it `rollout status` fails at once and the boot's retries run out.
      expect(deployment!.spec.progressDeadlineSeconds ?? 600, wait.key).toBeGreaterThanOrEqual(wait.seconds);
    }
  });
});
