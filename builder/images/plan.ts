/**
 * Turns the image lists and recipes into a plan the images stage can hash and build:
 * recipe `build` commands are run, artifacts resolved, every copied file hashed.
 */
import { createHash } from "node:crypto";
import { lstat, readdir, readlink } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import { execa } from "execa";
import { sha256File } from "../../common/hash.js";
import { UserError } from "../errors.js";
import { log } from "../log.js";
import { artifactPaths, pinnedModuleDir, type EnsureOptions } from "../sources/index.js";
import { ensurePythonTree, pythonTreeCopies } from "../sources/pypi.js";
import type { LayerFile } from "../oci/layer.js";
import type { ImageConfig } from "../oci/layout.js";
import type { CompileProgram, RootPythonTree } from "../stages/image-debian.js";
import { IMAGES_DIR, loadRecipe, recipeBase, type Recipe } from "./recipe.js";
import type { SelectedImage } from "./seed.js";
import { planChart, type PlannedChart } from "./chart.js";

export const REPO_ROOT = resolve(import.meta.dirname, "..", "..");

export interface PlannedFile extends LayerFile {
  /** Content hash of the source (a tree hash for directories). */
  sha256: string;
  /** The recipe's sbom marker: the file lists what a bundle in the image holds. */
  sbom?: "npm-packages";
}

export interface PlannedImage {
  ref: string;
  repository: string;
  tag: string;
  tags: string[];
  list: string;
  expected: string | undefined;
  source: "recipe" | "pull";
  upstreamDigest?: string;
  recipe?: {
    name: string;
    recipeSha256: string;
    base: "debian" | "own-debian" | "scratch";
    packages: string[];
    files: PlannedFile[];
    /** `compiled:<name>` copies, resolved by the images stage from the image-compile stage. */
    compiled: { name: string; to: string; mode?: number }[];
    config: ImageConfig;
    /** The PyPI distributions its `python:` installs (for the SBOM). */
    pythonPackages?: { name: string; version: string }[];
  };
  /** A recipe with `chart:`: the chart to package, and the pinned Helm that packages it. */
  chart?: PlannedChart & { recipe: string; helm: { path: string; sha256: string } };
}

export interface ImagesPlan {
  images: PlannedImage[];
  /** Union of the Debian packages of recipes with a Debian base. */
  basePackages: string[];
  /** Recipes with a Debian root of their own (base: own-debian), its packages and its `python:` tree (installed into that root). */
  ownRoots: { name: string; packages: string[]; python?: RootPythonTree }[];
  programs: CompileProgram[];
}

export interface PlanOptions {
  /** The extracted kubespray release tree, when kubespray is enabled. */
  kubesprayTree?: string;
  /** The files stage's output (for `files:<path>` copies, e.g. the kubespray pins). */
  filesDir?: string;
  imagesDir?: string;
  artifacts?: Omit<EnsureOptions, "only">;
  lockPath?: string;
}

async function treeHash(path: string): Promise<string> {
  const hash = createHash("sha256");
  const walk = async (p: string) => {
    const info = await lstat(p);
    const rel = relative(path, p);
    if (info.isDirectory()) {
      // Not its mode: the layer makes every directory 0755 (oci/layer.ts), and the host's umask made this one.
      hash.update(`d ${rel}\n`);
      for (const name of (await readdir(p)).sort()) await walk(join(p, name));
    } else if (info.isSymbolicLink()) hash.update(`l ${rel} ${await readlink(p)}\n`);
    else if (info.isFile()) {
      hash.update(`f ${rel} ${info.mode & 0o111 ? "x" : "-"} ${await sha256File(p)}\n`);
    }
  };
  await walk(path);
  return hash.digest("hex");
}

const ranBuilds = new Set<string>();

async function runRecipeBuild(recipe: Recipe, ref: string): Promise<void> {
  const key = JSON.stringify(recipe.build);
  if (!recipe.build || ranBuilds.has(key)) return;
  log("images", `${recipe.name}: ${recipe.build.join(" ")}`);
  const result = await execa(recipe.build[0]!, recipe.build.slice(1), { cwd: REPO_ROOT, all: true, reject: false });
  if (result.failed) {
    throw new UserError(
      `${ref}: the recipe's build command '${recipe.build.join(" ")}' failed:\n    ${String(result.all ?? "")
        .trimEnd()
        .split("\n")
        .slice(-10)
        .join("\n    ")}`,
      `fix it and run it by hand from ${REPO_ROOT} first`,
    );
  }
  ranBuilds.add(key);
}

export async function planImages(selected: SelectedImage[], opts: PlanOptions = {}): Promise<ImagesPlan> {
  const images: PlannedImage[] = [];
  const basePackages = new Set<string>();
  const ownRoots: ImagesPlan["ownRoots"] = [];
  const programs = new Map<string, CompileProgram>();
  /** The pinned Helm that packages chart recipes, looked up once. */
  let helm: string | undefined;
  for (const image of selected) {
    const planned: PlannedImage = {
      ref: image.ref,
      repository: image.repository,
      tag: image.tag,
      tags: image.tags,
      list: image.list,
      expected: image.expected,
      source: image.source,
      upstreamDigest: image.upstreamDigest,
    };
    if (image.source === "recipe") {
      const recipe = await loadRecipe(image.recipe!, image.ref, opts.imagesDir ?? IMAGES_DIR);
      if (recipe.chart) {
        helm ??= (await artifactPaths(["helm"], { ...opts.artifacts, lockPath: opts.lockPath })).helm!;
        planned.chart = { ...(await planChart(recipe, image, opts.lockPath)), recipe: recipe.name, helm: { path: helm, sha256: helm.split("/").pop()! } };
        images.push(planned);
        continue;
      }
      await runRecipeBuild(recipe, image.ref);
      const base = recipeBase(recipe);
      if (base === "debian") recipe.debian.packages.forEach((p) => basePackages.add(p));
      if (base === "own-debian" && !ownRoots.some((r) => r.name === recipe.name))
        ownRoots.push({ name: recipe.name, packages: [...recipe.debian.packages].sort() });
      const files: PlannedFile[] = [];
      const compiled: { name: string; to: string; mode?: number }[] = [];
      for (const c of recipe.compile) {
        const file = await compileSource(c.source, recipe, image.ref, opts.lockPath);
        const program = { name: c.name, file, sha256: await sha256File(file), cflags: c.cflags };
        const other = programs.get(c.name);
        if (other && (other.sha256 !== program.sha256 || JSON.stringify(other.cflags) !== JSON.stringify(program.cflags))) {
          throw new UserError(`${image.ref}: compile '${c.name}' is defined differently by two recipes`, "give the programs different names");
        }
        programs.set(c.name, program);
      }
      for (const copy of recipe.copy) {
        const mode = copy.mode ? parseInt(copy.mode, 8) : undefined;
        const [kind, rest] = copy.from.includes(":")
          ? [copy.from.slice(0, copy.from.indexOf(":")), copy.from.slice(copy.from.indexOf(":") + 1)]
          : ["path", copy.from];
        if (kind === "compiled") {
          if (!recipe.compile.some((c) => c.name === rest))
            throw new UserError(`${recipe.file}: copy from '${copy.from}' names no compile entry`, "add it under compile:");
          compiled.push({ name: rest, to: copy.to, mode });
          continue;
        }
        let from: string;
        let sha256: string;
        if (kind === "artifact") {
          const artifact = image.artifacts?.[rest] ?? rest;
          const paths: Record<string, string> = await artifactPaths([artifact], { ...opts.artifacts, lockPath: opts.lockPath });
          from = paths[artifact]!;
          sha256 = from.split("/").pop()!;
        } else if (kind === "kubespray") {
          if (!opts.kubesprayTree)
            throw new UserError(
              `${image.ref}: its recipe copies the kubespray tree, but kubespray is not enabled`,
              "set kubespray.enabled: true in the definition (or mark the list entry 'requires: kubespray')",
            );
          from = join(opts.kubesprayTree, rest);
          sha256 = await treeHash(from);
        } else if (kind === "files") {
          if (!opts.filesDir)
            throw new UserError(
              `${image.ref}: its recipe copies '${copy.from}' from the files stage, which has not run`,
              "build it with 'icn-bootstrap build'",
            );
          from = join(opts.filesDir, rest);
          try {
            await lstat(from);
          } catch {
            throw new UserError(
              `${image.ref}: ${recipe.file} copies ${copy.from}, which the files stage did not write (${from})`,
              "is kubespray enabled in the definition? (kubespray.enabled)",
            );
          }
          sha256 = await treeHash(from);
        } else if (kind === "recipe" || kind === "path" || kind === "module") {
          from =
            kind === "module"
              ? await compileSource(copy.from, recipe, image.ref, opts.lockPath)
              : kind === "recipe"
                ? join(recipe.dir, rest)
                : resolve(REPO_ROOT, rest);
          try {
            await lstat(from);
          } catch {
            throw new UserError(
              `${image.ref}: ${recipe.file} copies ${copy.from}, which does not exist (${from})`,
              recipe.build
                ? `check that '${recipe.build.join(" ")}' produces it`
                : "fix the path (relative to the repository, or recipe:<file> beside the recipe)",
            );
          }
          sha256 = await treeHash(from);
        } else {
          throw new UserError(
            `${recipe.file}: copy from '${copy.from}': unknown source '${kind}:'`,
            "use a repository path, recipe:<file>, artifact:<name>, compiled:<name>, module:<entry>:<path>, files:<path> or kubespray:<path>",
          );
        }
        files.push({ from, to: copy.to, mode, sha256, ...(copy.sbom ? { sbom: copy.sbom } : {}) });
      }
      const unused = Object.keys(image.artifacts ?? {}).filter((name) => !recipe.copy.some((c) => c.from === `artifact:${name}`));
      if (unused.length)
        throw new UserError(
          `${image.list}: ${image.ref}: artifacts: ${unused.join(", ")} ${unused.length > 1 ? "are" : "is"} not copied by ${recipe.file}`,
          `name the artifacts its copy: entries use (${
            recipe.copy
              .filter((c) => c.from.startsWith("artifact:"))
              .map((c) => c.from.slice(9))
              .join(", ") || "none"
          })`,
        );
      let pythonPackages: { name: string; version: string }[] | undefined;
      if (recipe.python) {
        const { requirements, version, leaveOut } = recipe.python;
        if (leaveOut.length > 0 && base !== "own-debian")
          throw new UserError(
            `${recipe.file}: python.leaveOut needs base: own-debian`,
            "leave python.leaveOut out, or give the image a Debian root of its own",
          );
        if (base === "scratch") throw new UserError(`${recipe.file}: python: needs a Debian base with python3`, "add python3 to debian.packages");
        const tree = await ensurePythonTree(join(recipe.dir, requirements), version, image.ref, (message) => log("images", `${recipe.name}: ${message}`));
        const ownRoot = base === "own-debian" ? ownRoots.find((r) => r.name === recipe.name) : undefined;
        // An own root gets the tree (and its bytecode, made by the root's python3); on the shared base it is a layer of its own files.
        if (ownRoot) ownRoot.python = { key: tree.dir.split("/").pop()!, sitePackages: tree.sitePackages, bin: tree.bin, version, leaveOut };
        else files.push(...pythonTreeCopies(tree, version));
        pythonPackages = tree.packages;
      }
      planned.recipe = {
        name: recipe.name,
        recipeSha256: createHash("sha256").update(recipe.text).digest("hex"),
        base,
        packages: recipe.debian.packages,
        files,
        compiled,
        config: { entrypoint: recipe.entrypoint, cmd: recipe.cmd, env: recipe.env, user: recipe.user, workingDir: recipe.workdir },
        ...(pythonPackages ? { pythonPackages } : {}),
      };
    }
    images.push(planned);
  }
  return { images, basePackages: [...basePackages].sort(), ownRoots, programs: [...programs.values()].sort((a, b) => a.name.localeCompare(b.name)) };
}

/** `module:<entry>:<path>`: a file of a pinned Go source (a module verified by the committed go.sum, or a gosrc archive by its sha256); `recipe:<file>`. */
async function compileSource(source: string, recipe: Recipe, ref: string, lockPath?: string): Promise<string> {
  if (source.startsWith("recipe:")) return join(recipe.dir, source.slice("recipe:".length));
  const [, entryName, path] = /^module:([^:]+):(.+)$/.exec(source)!;
  const module = await pinnedModuleDir(entryName!, `${ref}: compile source '${source}'`, lockPath);
  return join(module.dir, path!);
}
