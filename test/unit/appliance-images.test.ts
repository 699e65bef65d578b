/**
 * The images the appliance's own cluster runs are pulled at first boot before kubeadm
 * init (overlays/usr/lib/icn-bootstrap/prepull appliance), from the list the build writes
 * from the image lists' `appliance: true` entries. Every image the cluster asks for must
 * be on it, under the name it asks for (a tag such as latest included), or its pod pulls
 * it beside the starting API server again.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { loadDefinition } from "../../builder/definition.js";
import { REPO_ROOT } from "../../builder/images/plan.js";
import { applianceImageNames, loadSeedLists, selectImages } from "../../builder/images/seed.js";
import { BUILTIN_OVERLAYS, MANIFESTS, renderOverlayTemplate } from "../../builder/stages/overlays.js";

async function manifestImages(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".yaml")) continue;
    const text = await readFile(join(entry.parentPath, entry.name), "utf8");
    for (const m of text.matchAll(/^\s*image:\s*(\S+)\s*$/gm)) found.push(m[1]!);
  }
  return [...new Set(found)];
}

describe("the appliance's images, pulled before its cluster starts", async () => {
  const definition = await loadDefinition();
  const listed = await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)));
  const selection = selectImages(listed, { profile: definition.registry.profile, kubespray: definition.kubespray.enabled });
  const names = applianceImageNames(selection.images);

  it("lists every image the components' manifests run, under the name they use", async () => {
    const used = await manifestImages(MANIFESTS);
    expect(used).toContain("bootstrap.icn:5000/icn/bpa:latest");
    expect(used.filter((image) => !names.includes(image))).toEqual([]);
  });

  it("lists the control plane kubeadm runs and nothing the appliance does not", () => {
    for (const component of ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "pause", "etcd", "coredns/coredns"])
      expect(
        names.some((name) => name.startsWith(`registry.k8s.io/${component}:`)),
        component,
      ).toBe(true);
    // The kubespray runner is pulled after the ready marker; the charts and the site's services are not run here.
    expect(names.filter((name) => /kubespray-runner|\/charts\/|site-services|flannel/.test(name))).toEqual([]);
    expect(new Set(names).size).toBe(names.length);
  });

  it("names each tag of an image as well as its reference", () => {
    const bpa = listed.find((image) => image.recipe === "bpa")!;
    expect(applianceImageNames([{ ...bpa, source: "recipe", expected: bpa.digest }])).toEqual([
      "bootstrap.icn:5000/icn/bpa:0.1.0",
      "bootstrap.icn:5000/icn/bpa:latest",
    ]);
  });

  it("is written into the image one name a line, comments aside", async () => {
    const rendered = await renderOverlayTemplate(
      join(BUILTIN_OVERLAYS, "usr/share/icn-bootstrap/appliance-images.hbs"),
      definition,
      listed.map((image) => image.ref),
      names,
    );
    expect(rendered.split("\n").filter((line) => line && !line.startsWith("#"))).toEqual(names);
  });
});
