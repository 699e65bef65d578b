/**
 * Image recipes (`images/<name>/recipe.yaml`): how the project builds a container
 * image without a Docker daemon. Format (compatible with images/bpa/recipe.yaml):
 *
 *   name: bpa
 *   base: debian                       # or scratch (default: debian when debian.packages is given)
 *   debian: { packages: [nodejs] }     # must be in the shared image base (lock file: images.debian.base)
 *                                      # base: own-debian: the packages are this image's own Debian root
 *                                      #   (lock file images.debian.own.<name>), not added to the shared
 *                                      #   base every other image carries (for big sets such as Ironic's)
 *   build: ["npm", "run", "build:bpa"] # run on the build host, from the repository root, first
 *   copy:
 *     - { from: out/bpa/bpa.mjs, to: /opt/bpa/bpa.mjs }         # a path relative to the repository
 *     - { from: out/bpa/bpa.packages.json, to: /opt/bpa/packages.json, sbom: npm-packages } # what the bundle holds
 *     - { from: "artifact:kubeadm", to: /usr/local/bin/kubeadm } # a pinned artifact (builder/sources)
 *     - { from: "compiled:pause", to: /pause }                    # a `compile` output below
 *     - { from: "kubespray:", to: /kubespray }                    # the kubespray release tree
 *     - { from: "files:kubespray-pins.yml", to: /etc/x.yml }      # an output of the files stage
 *     - { from: "recipe:entrypoint.py", to: /usr/local/bin/x, mode: "0755" } # a file beside the recipe
 *     - { from: "module:sriov-cni:images/entrypoint.sh", to: /x.sh }  # a file of a pinned Go source (gomod or gosrc entry)
 *   python:                            # PyPI packages for the image's python3 (builder/sources/pypi.ts)
 *     requirements: requirements.txt   # beside the recipe, every line name==version with --hash lines
 *     version: "3.13"                  # the image's Debian python3; into /usr/local/lib/python3.13/dist-packages
 *     leaveOut: [ironic/tests]         # base: own-debian only: directories of the tree not installed
 *   compile:                           # static C programs, built with the pinned Debian toolchain
 *     - { name: pause, source: "module:kubernetes:build/pause/linux/pause.c", cflags: [-Os, -static] }
 *   os:                                # instead of a container image: a bootable disk image for
 *     file: debian-13-compute-node.qcow2 #   compute nodes, served as os-images/<file> (+ .sha256sum)
 *     rootFree: 256MiB                 #   room left in its root filesystem (it grows at first boot)
 *                                      #   its debian.packages are its own set (images.debian.os.<name>),
 *                                      #   its copies only recipe:<file>
 *   ramdisk:                           # or: a kernel and an initramfs for network boot (Ironic's deploy
 *     kernel: ipa.kernel               #   ramdisk), served as boot/<kernel> and boot/<initramfs>; the
 *     initramfs: ipa.initramfs         #   whole root is the initramfs, systemd its /init. Its packages are
 *     enable: [agent.service]          #   its own set (images.debian.os.<name>), python: is allowed;
 *     dropModules: [sound]             #   systemd units to enable, kernel module trees left out (under kernel/)
 *   chart:                             # or: a Helm chart, seeded as an OCI artifact (builder/images/chart.ts);
 *     name: multus                     #   its list entry's repository ends in the name, its tag is the version
 *     version: 4.3.0
 *     appVersion: v4.3.0
 *     description: Multus CNI
 *     files:                           #   module:<entry>:<path> (a file or a directory), recipe:<path>, or
 *                                      #   a path under this repository's manifests/
 *       - from: "module:multus:deployments/multus-daemonset-thick.yml"
 *         to: templates/multus.yaml
 *         replace:                     #   image references to rewrite; each must occur in the source
 *           - { from: "multus-cni:snapshot-thick", to: "multus-cni:v4.3.0-thick" }
 *   entrypoint: ["node", "/opt/bpa/bpa.mjs"]
 *   cmd: []
 *   env: {}
 *   user: "65532"
 *   workdir: /
 */
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import yaml from "js-yaml";
import { z } from "zod";
import { UserError } from "../errors.js";

export const IMAGES_DIR = resolve(import.meta.dirname, "..", "..", "images");

const Copy = z
  .object({
    from: z.string().min(1),
    to: z.string().regex(/^\/[^\0]*$/, "an absolute path inside the image"),
    mode: z
      .string()
      .regex(/^0?[0-7]{3,4}$/, "an octal mode such as '0755'")
      .optional(),
    /** npm-packages: the file lists the npm packages a bundle in the image holds ({ packages: [{ name, version, license }] }), for the SBOM. */
    sbom: z.enum(["npm-packages"]).optional(),
  })
  .strict();

const Compile = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9_-]*$/),
    /** `module:<lock artifact entry>:<path in the module>` or `recipe:<file beside the recipe>`. */
    source: z.string().regex(/^(module:[a-z0-9._-]+:|recipe:)[^\0]+$/, "module:<artifact entry>:<path> or recipe:<file>"),
    cflags: z.array(z.string()).default([]),
  })
  .strict();

export const Recipe = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/),
    base: z.enum(["debian", "own-debian", "scratch"]).optional(),
    debian: z
      .object({ packages: z.array(z.string().regex(/^[a-z0-9][a-z0-9+.-]+$/)).default([]) })
      .strict()
      .default({}),
    build: z.array(z.string()).min(1).optional(),
    compile: z.array(Compile).default([]),
    python: z
      .object({
        requirements: z.string().regex(/^[A-Za-z0-9._-]+$/, "a file name beside the recipe"),
        version: z.string().regex(/^3\.\d+$/, "the image's Python version, such as '3.13'"),
        /** Package directories not installed (base: own-debian only): code the image never imports, such as ironic/tests. */
        leaveOut: z.array(z.string().regex(/^[A-Za-z0-9_]+(\/[A-Za-z0-9_.-]+)*$/, "a directory of the installed tree, such as ironic/tests")).default([]),
      })
      .strict()
      .optional(),
    copy: z.array(Copy).default([]),
    os: z
      .object({
        file: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\.qcow2$/, "a file name ending in .qcow2"),
        rootFree: z
          .string()
          .regex(/^\d+(\.\d+)?\s*(KiB|MiB|GiB)$/, "a size such as 256MiB")
          .default("256MiB"),
      })
      .strict()
      .optional(),
    ramdisk: z
      .object({
        kernel: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "a file name"),
        initramfs: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, "a file name"),
        enable: z.array(z.string().regex(/^[A-Za-z0-9@._-]+\.(service|target|socket|timer)$/, "a systemd unit name")).default([]),
        dropModules: z
          .array(z.string().regex(/^[a-z0-9_-]+(\/[a-z0-9_-]+)*$/, "a directory under the kernel's kernel/ module tree, such as sound or drivers/gpu"))
          .default([]),
      })
      .strict()
      .optional(),
    chart: z
      .object({
        name: z.string().regex(/^[a-z0-9][a-z0-9-]*$/, "a chart name (lower case, digits, dashes)"),
        version: z.string().regex(/^\d+\.\d+\.\d+([-+][\w.-]+)?$/, "a SemVer version such as 4.3.0"),
        appVersion: z.string().min(1),
        description: z.string().min(1),
        files: z
          .array(
            z
              .object({
                from: z
                  .string()
                  .regex(
                    /^(?!(.*[/:])?\.\.(\/|$))((module:[a-z0-9._-]+:|recipe:|manifests\/)[^\0]+|shipped:)$/,
                    "module:<artifact entry>:<path>, recipe:<path>, a path under the repository's manifests/ (no '..'), or shipped: (the registry's rules for the images the build ships)",
                  ),
                to: z
                  .string()
                  .regex(
                    /^(templates|crds|files|ci)(\/[A-Za-z0-9._-]+)*$|^values\.(yaml|schema\.json)$/,
                    "a path in the chart: templates/…, crds/…, files/…, ci/…, values.yaml or values.schema.json",
                  ),
                replace: z.array(z.object({ from: z.string().min(1), to: z.string() }).strict()).default([]),
              })
              .strict(),
          )
          .min(1),
      })
      .strict()
      .optional(),
    entrypoint: z.array(z.string()).optional(),
    cmd: z.array(z.string()).optional(),
    env: z.record(z.string(), z.string()).default({}),
    user: z.string().optional(),
    workdir: z.string().optional(),
  })
  .strict();
export type Recipe = z.infer<typeof Recipe> & { dir: string; file: string; text: string };

export function recipeBase(recipe: Recipe): "debian" | "own-debian" | "scratch" {
  return recipe.base ?? (recipe.debian.packages.length > 0 ? "debian" : "scratch");
}

export async function loadRecipe(name: string, ref: string, imagesDir = IMAGES_DIR): Promise<Recipe> {
  const dir = join(imagesDir, name);
  const file = join(dir, "recipe.yaml");
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch {
    throw new UserError(`${ref}: its recipe images/${name}/recipe.yaml is missing`, `add the recipe, or fix 'recipe: ${name}' in the image list`);
  }
  let raw: unknown;
  try {
    raw = yaml.load(text, { filename: file });
  } catch (error) {
    throw new UserError(`${file}: not valid YAML: ${(error as Error).message}`, "fix the YAML syntax at the line shown");
  }
  const result = Recipe.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new UserError(
      `${file} (for ${ref}): ${issue.path.join(".")}: ${issue.message}`,
      "fix the recipe (the format is described in builder/images/recipe.ts)",
    );
  }
  if (result.data.os && result.data.ramdisk)
    throw new UserError(`${file}: has both os: and ramdisk:`, "a recipe makes a disk image (os:) or a network-boot kernel and initramfs (ramdisk:), not both");
  if (result.data.name !== name) throw new UserError(`${file}: name '${result.data.name}' differs from its directory '${name}'`, `set name: ${name}`);
  return { ...result.data, dir, file, text };
}
