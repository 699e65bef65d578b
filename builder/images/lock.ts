import { z } from "zod";
import { PinnedSet } from "../debian/schema.js";

/**
 * `images:` in appliance.lock.yaml: the Debian package sets of the images the project
 * builds, pinned as files like the root filesystem (same archives, debian/schema.ts).
 * - `base`: ONE Debian root shared by every image with Debian packages (one layer,
 *   stored once in the registry): the union of the recipes' packages.
 * - `toolchain`: gcc and libc for static C programs (the pause container) and the C part
 *   of Go programs that need cgo (libseccomp for runc, pkg-config to find it).
 * - `os.<recipe>`: the root of an OS image (the compute nodes' disk image, recipe `os:`).
 * - `own.<recipe>`: the Debian root of a container image with `base: own-debian`: one layer
 *   of its own instead of the shared base (a set too big to put into every image).
 */
export const PackageSet = PinnedSet;
export type PackageSet = z.infer<typeof PackageSet>;

export const ImagesLock = z
  .object({
    debian: z
      .object({
        base: PackageSet,
        toolchain: PackageSet,
        /** Each OS image recipe's own set (a bootable root, not a container layer), by recipe name. */
        os: z.record(z.string(), PackageSet).optional(),
        /** Each `base: own-debian` recipe's own root, by recipe name. */
        own: z.record(z.string(), PackageSet).optional(),
      })
      .strict(),
  })
  .strict();
export type ImagesLock = z.infer<typeof ImagesLock>;

export const TOOLCHAIN_PACKAGES = ["gcc", "libc6-dev", "libseccomp-dev", "pkg-config"];
