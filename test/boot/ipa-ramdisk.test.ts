/**
 * Ironic's deploy ramdisk (images/ipa-ramdisk), as the build serves it: a kernel and a
 * gzip-compressed newc initramfs under boot/ of the file server, each with its sha256sum.
 * test/boot/network-boot.test.ts boots them through Ironic and checks what they inspect.
 */
import { runStages } from "../../builder/pipeline.js";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { constants, gunzipSync } from "node:zlib";
import { execa } from "execa";
import { beforeAll, describe, expect, it } from "vitest";
import { ensureLockedDebs } from "../../builder/debian/fetch.js";
import { DEFAULT_DEFINITION, loadDefinition } from "../../builder/definition.js";
import { loadOsRecipe } from "../../builder/images/os.js";
import { DEFAULT_LOCK, loadLock } from "../../builder/lockfile.js";
import { stagesDir } from "../../builder/stage.js";
import { FILES_ROOT } from "../../builder/stages/files.js";
import { BOOT_FILES_PATH, readRamdisk, type RamdiskFiles } from "../../builder/stages/ramdisk.js";

let files: RamdiskFiles;
let boot: string;

beforeAll(async () => {
  const definition = await loadDefinition(DEFAULT_DEFINITION);
  expect(definition.osImages).toContain("ipa-ramdisk");
  const lock = await loadLock(DEFAULT_LOCK);
  await ensureLockedDebs(lock);
  const [built] = (await runStages({ definition: { ...definition, osImages: ["ipa-ramdisk"] }, lock, stagesDir: stagesDir(), sections: ["os-images"] }))
    .osImages;
  files = await readRamdisk(built!.image!);
  boot = join(built!.image!.dir, "tree", FILES_ROOT);
}, 40 * 60_000);

describe("Ironic's deploy ramdisk", () => {
  it("is a kernel and an initramfs on the file server, each with its sha256sum", async () => {
    const recipe = await loadOsRecipe("ipa-ramdisk");
    expect(files.kernel.path).toBe(`${BOOT_FILES_PATH}/${recipe.ramdisk!.kernel}`);
    expect(files.initramfs.path).toBe(`${BOOT_FILES_PATH}/${recipe.ramdisk!.initramfs}`);
    for (const file of [files.kernel, files.initramfs]) {
      const path = join(boot, file.path);
      expect((await stat(path)).size).toBe(file.size);
      expect(await readFile(`${path}.sha256sum`, "utf8")).toBe(`${file.sha256}  ${file.path.split("/").pop()}\n`);
      expect((await execa("sha256sum", [path])).stdout.split(" ")[0]).toBe(file.sha256);
    }
    // An x86 bzImage (its boot protocol header "HdrS" at 0x202) and a gzip stream holding a newc cpio.
    const kernel = await readFile(join(boot, files.kernel.path));
    expect(kernel.subarray(0x202, 0x206).toString("latin1")).toBe("HdrS");
    const initramfs = await readFile(join(boot, files.initramfs.path));
    expect(
      gunzipSync(initramfs.subarray(0, 64 * 1024), { finishFlush: constants.Z_SYNC_FLUSH })
        .subarray(0, 6)
        .toString("latin1"),
    ).toBe("070701");
    console.log(
      `deploy ramdisk: kernel ${(files.kernel.size / 1024 / 1024).toFixed(1)} MiB (Linux ${files.kernelRelease}), initramfs ${(files.initramfs.size / 1024 / 1024).toFixed(1)} MiB`,
    );
  });
});
