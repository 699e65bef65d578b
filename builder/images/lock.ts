import { z } from "zod";

/**
 * `images:` in appliance.lock.yaml: the Debian package sets of the images the project
 * builds, pinned by exact version like the root filesystem (same mirror and suite).
 * - `base`: ONE Debian root shared by every image with Debian packages (one layer,
 *   stored once in the registry): the union of the recipes' packages.
 * - `toolchain`: gcc and libc for static C programs (the pause container).
 */
export const PackageSet = z
  .object({
    requested: z.array(z.string()),
    packages: z.record(z.string(), z.string()),
  })
  .strict();
export type PackageSet = z.infer<typeof PackageSet>;

export const ImagesLock = z
  .object({
    debian: z.object({ base: PackageSet, toolchain: PackageSet }).strict(),
  })
  .strict();
export type ImagesLock = z.infer<typeof ImagesLock>;

export const TOOLCHAIN_PACKAGES = ["gcc", "libc6-dev"];
