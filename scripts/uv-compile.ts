/**
 * Resolves a requirements input into a requirements file where every package is pinned
 * to one version with the sha256 of each of its files on PyPI (uv pip compile
 * --generate-hashes), for the images' Python (Debian trixie: 3.13) on x86_64 Linux: the
 * form builder/sources/pypi.ts installs. Used by 'npm run lock:runner' and
 * 'npm run lock:python'. Needs PyPI.
 */
import { join } from "node:path";
import { execa } from "execa";
import { cacheRoot } from "../builder/cache.js";

export const UV_VERSION = "0.13.9";
export const PYTHON = "3.13";

export interface UvCompileOptions {
  /** Only releases with a wheel for the target (the builder installs wheels only, nothing is compiled). */
  wheelsOnly?: boolean;
  /** Packages resolved (their dependencies are) but left out of the output. */
  noEmit?: string[];
}

/** The pinned, hash-checked requirements of `input` (a requirements.in), without header or annotations. */
export async function uvCompile(input: string, opts: UvCompileOptions = {}): Promise<string> {
  const venv = join(cacheRoot(), "python", `uv-${UV_VERSION}`);
  await execa("python3", ["-m", "venv", venv]);
  await execa(join(venv, "bin/pip"), ["install", "--quiet", "--disable-pip-version-check", `uv==${UV_VERSION}`]);
  const compiled = await execa(join(venv, "bin/uv"), [
    "pip",
    "compile",
    input,
    "--python-version",
    PYTHON,
    "--python-platform",
    "x86_64-manylinux_2_28",
    ...(opts.wheelsOnly ? ["--only-binary", ":all:"] : []),
    ...(opts.noEmit ?? []).flatMap((name) => ["--no-emit-package", name]),
    "--generate-hashes",
    "--no-header",
    "--no-annotate",
  ]);
  return compiled.stdout.trim();
}
