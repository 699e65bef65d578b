import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BOOT_FILES_PATH } from "../../builder/stages/ramdisk.js";

const REPO = join(import.meta.dirname, "..", "..");
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { loadOsRecipe } from "../../builder/images/os.js";
import { runStages } from "../../builder/pipeline.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";

describe("OS images of the definition", () => {
  it("the default definition serves the compute nodes' image, whose recipe is an OS image pinned in the lock as it asks", async () => {
    const definition = await loadDefinition(DEFAULT_DEFINITION);
    expect(definition.osImages).toEqual(["compute-node", "ipa-ramdisk"]);
    const recipe = await loadOsRecipe("compute-node");
    expect(recipe.os!.file).toMatch(/\.qcow2$/);
    const pinned = (await loadLock(DEFAULT_LOCK)).images?.debian.os?.["compute-node"];
    expect(pinned?.requested).toEqual([...new Set(recipe.debian.packages)].sort());
    for (const name of ["linux-image-amd64", "cloud-init", "openssh-server", "python3", "conntrack"]) expect(pinned?.packages, name).toHaveProperty(name);
  });

  it("the default definition serves Ironic's deploy ramdisk, a ramdisk recipe pinned in the lock as it asks", async () => {
    const recipe = await loadOsRecipe("ipa-ramdisk");
    expect(recipe.os).toBeUndefined();
    expect(recipe.ramdisk).toMatchObject({
      kernel: "ironic-python-agent.kernel",
      initramfs: "ironic-python-agent.initramfs",
      enable: ["ironic-python-agent.service"],
    });
    const pinned = (await loadLock(DEFAULT_LOCK)).images?.debian.os?.["ipa-ramdisk"];
    expect(pinned?.requested).toEqual([...new Set(recipe.debian.packages)].sort());
    for (const name of ["linux-image-amd64", "systemd", "python3-cheroot", "python3-oslo.config", "qemu-utils", "lshw"])
      expect(pinned?.packages, name).toHaveProperty(name);
    // Debian's own agent package is not among them (it would pull libguestfs-tools): the agent is PyPI's.
    expect(pinned?.packages).not.toHaveProperty("ironic-python-agent");
    expect(pinned?.packages).not.toHaveProperty("libguestfs-tools");
    // The baremetal-operator hands Ironic these files' URLs on the file server (BOOT_FILES_PATH).
    const settings = await readFile(join(REPO, "manifests/metal3/baremetal-operator.yaml"), "utf8");
    expect(settings).toContain(`DEPLOY_KERNEL_URL: http://127.0.0.1:8080/${BOOT_FILES_PATH}/${recipe.ramdisk!.kernel}\n`);
    expect(settings).toContain(`DEPLOY_RAMDISK_URL: http://127.0.0.1:8080/${BOOT_FILES_PATH}/${recipe.ramdisk!.initramfs}\n`);
  });

  it("refuses a container image recipe named as an OS image, naming it", async () => {
    const definition = { ...(await loadDefinition(DEFAULT_DEFINITION)), osImages: ["bpa"] };
    await expect(runStages({ definition, lock: await loadLock(DEFAULT_LOCK), stagesDir: "/nonexistent", sections: ["os-images"] })).rejects.toThrow(
      /osImages names 'bpa', but images\/bpa\/recipe.yaml is a container image recipe/,
    );
  });

  it("refuses to build an OS image whose set the lock does not pin, pointing at lock-images", async () => {
    const lock = await loadLock(DEFAULT_LOCK);
    const withoutSet = { ...lock, images: { ...lock.images!, debian: { ...lock.images!.debian, os: {} } } };
    await expect(
      runStages({ definition: await loadDefinition(DEFAULT_DEFINITION), lock: withoutSet, stagesDir: "/nonexistent", sections: ["os-images"] }),
    ).rejects.toThrow(/images\.debian\.os\.compute-node/);
  });
});
