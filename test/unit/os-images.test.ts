import { describe, expect, it } from "vitest";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { buildOsImages, loadOsRecipe } from "../../builder/images/os.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";

describe("OS images of the definition", () => {
  it("the default definition serves the compute nodes' image, whose recipe is an OS image pinned in the lock as it asks", async () => {
    const definition = await loadDefinition(DEFAULT_DEFINITION);
    expect(definition.osImages).toEqual(["compute-node"]);
    const recipe = await loadOsRecipe("compute-node");
    expect(recipe.os.file).toMatch(/\.qcow2$/);
    const pinned = (await loadLock(DEFAULT_LOCK)).images?.debian.os?.["compute-node"];
    expect(pinned?.requested).toEqual([...new Set(recipe.debian.packages)].sort());
    for (const name of ["linux-image-amd64", "cloud-init", "openssh-server", "python3", "conntrack"]) expect(pinned?.packages, name).toHaveProperty(name);
  });

  it("refuses a container image recipe named as an OS image, naming it", async () => {
    const definition = { ...(await loadDefinition(DEFAULT_DEFINITION)), osImages: ["bpa"] };
    await expect(buildOsImages({ definition, lock: await loadLock(DEFAULT_LOCK), stagesDir: "/nonexistent" })).rejects.toThrow(/osImages names 'bpa', but images\/bpa\/recipe.yaml is a container image recipe/);
  });

  it("refuses to build an OS image whose set the lock does not pin, pointing at lock-images", async () => {
    const lock = await loadLock(DEFAULT_LOCK);
    const withoutSet = { ...lock, images: { ...lock.images!, debian: { ...lock.images!.debian, os: {} } } };
    await expect(buildOsImages({ definition: await loadDefinition(DEFAULT_DEFINITION), lock: withoutSet, stagesDir: "/nonexistent" })).rejects.toThrow(/images\.debian\.os\.compute-node/);
  });
});
