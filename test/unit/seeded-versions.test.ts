/**
 * The images the registry seeds for etcd, CoreDNS and flannel carry the lock's versions in
 * their tags (kubespray's pins and the bootstrap cluster's kubeadm read the versions from
 * the tags), and the bootstrap cluster's kubeadm names those tags rather than its own
 * release's defaults.
 */
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { loadDefinition } from "../../builder/definition.js";
import { UserError } from "../../builder/errors.js";
import { REPO_ROOT } from "../../builder/images/plan.js";
import { loadSeedLists } from "../../builder/images/seed.js";
import { loadArtifacts } from "../../builder/sources/index.js";
import { BUILTIN_OVERLAYS, kubeadmImageTags, renderOverlayTemplate } from "../../builder/stages/overlays.js";

describe("seeded etcd, CoreDNS and flannel follow the lock", async () => {
  const definition = await loadDefinition();
  const { artifacts } = await loadArtifacts();
  const refs = (await loadSeedLists(definition.registry.lists.map((l) => resolve(REPO_ROOT, l)))).map((i) => i.ref);
  const tagOf = (repository: string) => refs.filter((r) => r.startsWith(`${repository}:`)).map((r) => r.slice(repository.length + 1));
  const version = (name: string) => artifacts[name]?.version?.replace(/^v/, "");

  it("tags each image with its artifact's version", () => {
    expect(tagOf("registry.k8s.io/etcd")).toEqual([`${version("etcd")}-0`]);
    expect(version("etcdctl")).toBe(version("etcd"));
    expect(tagOf("registry.k8s.io/coredns/coredns")).toEqual([`v${version("coredns")}`]);
    expect(tagOf("docker.io/flannel/flannel")).toEqual([`v${version("flannel")}`]);
  });

  it("names the seeded etcd and CoreDNS tags in the bootstrap cluster's kubeadm configuration", async () => {
    const kubeadm = await renderOverlayTemplate(resolve(BUILTIN_OVERLAYS, "etc/icn-bootstrap/kubeadm.yaml.hbs"), definition, refs);
    expect(kubeadm).toMatch(new RegExp(`etcd:\\n  local:\\n    imageTag: "${version("etcd")!.replaceAll(".", "\\.")}-0"`));
    expect(kubeadm).toMatch(new RegExp(`dns:\\n  imageTag: "v${version("coredns")!.replaceAll(".", "\\.")}"`));
  });

  it("refuses a registry without exactly one etcd or CoreDNS image, naming what it has", () => {
    expect(kubeadmImageTags(["registry.k8s.io/etcd:3.6.16-0", "registry.k8s.io/coredns/coredns:v1.14.7"])).toEqual({ etcd: "3.6.16-0", coredns: "v1.14.7" });
    const error = (() => {
      try {
        return kubeadmImageTags(["registry.k8s.io/etcd:3.6.16-0", "registry.k8s.io/etcd:3.6.6-0", "registry.k8s.io/coredns/coredns:v1.14.7"]);
      } catch (e) {
        return e;
      }
    })() as UserError;
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toContain("exactly one registry.k8s.io/etcd image in the registry, the lists have 3.6.16-0, 3.6.6-0");
    expect(() => kubeadmImageTags(["registry.k8s.io/etcd:3.6.16-0"])).toThrow(/registry\.k8s\.io\/coredns\/coredns image in the registry, the lists have none/);
  });
});
