/**
 * The appliance's boot transaction has no ordering cycle, checked by the image's own
 * systemd (`systemd-analyze verify default.target` in a chroot of the appliance's root
 * with the overlay's units enabled as the build enables them).
 *
 * Why a check of its own: when the units make a cycle, systemd breaks it by deleting one
 * job of the cycle, and which one depends on a hash seed that changes every boot. An early
 * icn-identity.service (with systemd's default dependencies) made such a cycle with
 * icn-site and systemd-resolved: most boots lost systemd-resolved's job, about one in
 * twelve lost icn-identity's (no SSH host keys, no ready marker: the power-cut test's
 * first boot timed out once). A boot test sees that only by luck; this sees it every time.
 */
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { runStages } from "../../builder/pipeline.js";
import { stagesDir } from "../../builder/stage.js";
import { rootfsTar } from "../../builder/stages/rootfs.js";
import { REPO } from "../helpers/cli.js";

const UNITS = join(REPO, "overlays/etc/systemd/system");
let root: string;

/** The overlay's units with an [Install] section, and the packaged ones listed in enable-units: what the build enables. */
async function unitsToEnable(): Promise<string[]> {
  const own: string[] = [];
  for (const file of await readdir(UNITS))
    if (/\.(service|timer|socket|path)$/.test(file) && /^\[Install\]/m.test(await readFile(join(UNITS, file), "utf8"))) own.push(file);
  const listed = (await readFile(join(REPO, "overlays/etc/icn-bootstrap/enable-units"), "utf8"))
    .split("\n")
    .map((line) => line.replace(/#.*/, "").trim())
    .filter(Boolean);
  return [...own, ...listed];
}

/** systemd-analyze's complaints about ordering cycles, from the root's own systemd. */
async function orderingCycles(): Promise<string[]> {
  const result = await execa(
    "unshare",
    ["-m", "sh", "-c", 'mount -t proc proc "$1/proc" && exec chroot "$1" systemd-analyze verify --man=no default.target', "verify", root],
    { reject: false, all: true },
  );
  return String(result.all)
    .split("\n")
    .filter((line) => /ordering cycle/.test(line));
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "icn-boot-order-"));
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const built = await runStages({
    definition: await loadDefinition(DEFAULT_DEFINITION),
    lock,
    lockPath: DEFAULT_LOCK,
    stagesDir: stagesDir(),
    sections: ["appliance-root"],
  });
  await execa("tar", ["-xf", rootfsTar(built.rootfs!.dir), "-C", root]);
  await cp(UNITS, join(root, "etc/systemd/system"), { recursive: true, force: true });
  await execa("systemctl", [`--root=${root}`, "enable", ...(await unitsToEnable())]);
}, 40 * 60_000);

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

describe("the appliance's boot order", () => {
  it("has no ordering cycle in the boot transaction (the image's systemd-analyze verify default.target)", async () => {
    // Each run hashes with another seed; a cycle is found whichever job it would delete.
    for (let run = 0; run < 3; run++) expect(await orderingCycles()).toEqual([]);
  });

  it("finds the cycle an icn-identity.service with systemd's default dependencies makes (the check can fail)", async () => {
    const unit = join(root, "etc/systemd/system/icn-identity.service");
    const shipped = await readFile(unit, "utf8");
    expect(shipped).toMatch(/^DefaultDependencies=no$/m);
    await writeFile(unit, shipped.replace(/^DefaultDependencies=no\n/m, ""));
    try {
      const cycles = await orderingCycles();
      expect(cycles.join("\n")).toMatch(/Found ordering cycle/);
      expect(cycles.join("\n")).toMatch(/deleted to break ordering cycle/);
    } finally {
      await writeFile(unit, shipped);
    }
  });
});
