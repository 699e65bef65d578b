/**
 * The pinned components `lock --check` speaks about, each with the command that moves it:
 * the lock's artifacts (Go groups built from modules, Go programs built from source
 * archives, downloaded files), the images' PyPI packages (recipes' requirements files) and
 * the Debian packages the definition records a support window for.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { ADDON_GROUPS } from "../addons/components.js";
import { cacheRoot } from "../cache.js";
import type { ApplianceDefinition, SupportWindow } from "../definition.js";
import { REPO_ROOT } from "../images/plan.js";
import { loadSeedLists } from "../images/seed.js";
import { IMAGES_DIR, loadRecipe } from "../images/recipe.js";
import { OFFLINE_GROUPS } from "../kubespray/components.js";
import { debianSets, type LockFile } from "../lockfile.js";
import { METAL3_GROUPS } from "../metal3/components.js";
import type { ArtifactEntry } from "../sources/schema.js";
import { checkPinnedRequirements } from "../sources/pypi.js";
import type { ComponentPin } from "./findings.js";
import { goModModules, type GoTarget } from "./go-vulns.js";

const TO = (to?: string) => to ?? "vX.Y.Z";

/** The command that moves an artifact entry's pin. */
export function artifactMove(name: string, entry: ArtifactEntry): (to?: string) => string {
  if (entry.source === "gomod") {
    if (name === "kubernetes") return (to) => `icn-bootstrap lock-artifacts --kubernetes ${TO(to)}`;
    if (name === "etcd" || name === "etcdctl") return (to) => `icn-bootstrap lock-artifacts --etcd ${TO(to)}`;
    if (name === "coredns") return (to) => `icn-bootstrap lock-artifacts --coredns ${TO(to)}`;
    if (/^kubernetes-v/.test(name))
      return (to) => `icn-bootstrap lock-artifacts --also-kubernetes ${TO(to)} (and name it in kubespray.extraKubernetesVersions instead of ${entry.version})`;
    const file = OFFLINE_GROUPS.some((g) => g.name === name)
      ? "builder/kubespray/components.ts"
      : METAL3_GROUPS.some((g) => g.name === name)
        ? "builder/metal3/components.ts"
        : ADDON_GROUPS.some((g) => g.name === name)
          ? "builder/addons/components.ts"
          : undefined;
    if (file) return (to) => `set ${name}'s version to ${TO(to)} in ${file}, then icn-bootstrap lock-artifacts`;
  }
  return (to) => `set artifacts.${name} (url, sha256, version${to ? ` ${to}` : ""}) in the lock file, then icn-bootstrap fetch --only ${name}`;
}

export function artifactPins(lock: LockFile): ComponentPin[] {
  return Object.entries(lock.artifacts)
    .filter(([, entry]) => entry.profile === "default")
    .map(([name, entry]) => ({
      key: `artifact:${name}`,
      component: name,
      version: entry.version ?? "unversioned",
      pin: entry.source === "gomod" ? `${entry.module} ${entry.version}` : `${entry.url.split("/").slice(3, 5).join("/")} ${entry.version ?? entry.url}`,
      move: artifactMove(name, entry),
    }));
}

/**
 * The modules each Go artifact builds with: a gomod entry's wrapper go.mod; a gosrc entry's
 * archive go.mod when this machine has extracted it (else undefined: not known here).
 */
export async function goTargets(lock: LockFile, baseDir: string, pins: ComponentPin[]): Promise<{ targets: GoTarget[]; missing: ComponentPin[] }> {
  const targets: GoTarget[] = [];
  const missing: ComponentPin[] = [];
  for (const pin of pins) {
    const name = pin.key.replace(/^artifact:/, "");
    const entry = lock.artifacts[name];
    if (entry?.source === "gomod") {
      targets.push({
        pin,
        modules: goModModules(await readFile(join(baseDir, entry.dir, "go.mod"), "utf8")),
        main: entry.module,
        raise: `icn-bootstrap lock-artifacts --only ${name}`,
      });
    } else if (entry?.source === "gosrc") {
      const goMod = join(cacheRoot(), "gosrc-trees", entry.sha256.replace(/^sha256:/, ""), "go.mod");
      if (!existsSync(goMod)) {
        missing.push(pin);
        continue;
      }
      const text = await readFile(goMod, "utf8");
      const main = /^module\s+(\S+)/m.exec(text)?.[1];
      const modules = goModModules(text);
      if (main) modules.set(main, entry.version);
      targets.push({ pin, modules, main });
    }
  }
  return { targets, missing };
}

/**
 * The image recipes a definition builds from: those its registry lists name and its OS
 * images; none when the lock pins no images (such a lock builds none).
 */
export async function definitionRecipes(definition: ApplianceDefinition, lock: LockFile): Promise<string[]> {
  if (!lock.images) return [];
  const listed = await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)));
  return [...new Set([...listed.flatMap((i) => (i.recipe ? [i.recipe] : [])), ...definition.osImages])].sort();
}

/** The PyPI packages these image recipes pin (python.requirements). */
export async function pypiPins(recipes: string[], imagesDir = IMAGES_DIR): Promise<ComponentPin[]> {
  const pins: ComponentPin[] = [];
  for (const name of recipes) {
    const recipe = await loadRecipe(name, `images/${name}`, imagesDir);
    if (!recipe.python) continue;
    const file = join(recipe.dir, recipe.python.requirements);
    const requirements = `images/${name}/${recipe.python.requirements}`;
    // Resolved from top-level pins (requirements.in, 'npm run lock:python'), or written by hand.
    const generated = existsSync(join(recipe.dir, "requirements.in"));
    for (const p of checkPinnedRequirements(await readFile(file, "utf8"), file))
      pins.push({
        key: `pypi:${p.name}`,
        component: `${name} image: ${p.name}`,
        version: p.version,
        pin: `${p.name}==${p.version}`,
        move: (to) =>
          name === "kubespray-runner"
            ? `npm run lock:runner (re-pins ${requirements} from kubespray's requirements${to ? `; ${p.name} ${to} or newer` : ""}), then icn-bootstrap lock-images`
            : generated
              ? `npm run lock:python -- ${name} (re-resolves ${requirements}; for ${p.name} ${to ?? "a fixed release"}, pin it in images/${name}/requirements.in if the resolution does not pick it), then icn-bootstrap lock-images`
              : `pin ${p.name}==${to ?? "X.Y.Z"} with its --hash lines in ${requirements}, then icn-bootstrap lock-images`,
      });
  }
  return pins;
}

/** The Debian packages a support window is recorded for, at each version the lock pins them (root filesystem, images' sets). */
export function debianPins(lock: LockFile, windows: SupportWindow[]): ComponentPin[] {
  const names = [...new Set(windows.filter((w) => w.pin.startsWith("debian:")).map((w) => w.pin.slice("debian:".length)))];
  const pins: ComponentPin[] = [];
  for (const name of names) {
    const byVersion = new Map<string, string[]>();
    for (const set of debianSets(lock)) {
      const pin = set.packages[name];
      if (pin) byVersion.set(pin.version, [...(byVersion.get(pin.version) ?? []), set.name]);
    }
    for (const [version, sets] of byVersion)
      pins.push({
        key: `debian:${name}`,
        component: `${name} (Debian)`,
        version,
        pin: `${name} ${version} in ${sets.join(", ")}`,
        move: () => `icn-bootstrap lock --update ${name} (Debian's trixie carries this line: a newer upstream line means another package source)`,
      });
  }
  return pins;
}
