/**
 * The kubespray pins (builder/kubespray/pins.ts) for one or more served Kubernetes versions,
 * and what the BPA reads back from them (common/kubespray-pins.ts).
 */
import yaml from "js-yaml";
import { describe, expect, it } from "vitest";
import { kubesprayPins, renderPins, type ServedKubernetes } from "../../builder/kubespray/pins.js";
import { UserError } from "../../builder/errors.js";
import { KUBESPRAY_PINS_CONFIGMAP, KUBESPRAY_PINS_KEY, kubesprayPinsManifest, readServedPins } from "../../common/kubespray-pins.js";

const sha = (c: string) => c.repeat(64);
const served = (version: string, c: string): ServedKubernetes => ({
  version,
  files: (["kubeadm", "kubelet", "kubectl"] as const).map((name) => ({ name, sha256: sha(c) })),
});
const controlPlane = (version: string) =>
  ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"].map((r) => `registry.k8s.io/${r}:${version}`);
const common = ["registry.k8s.io/etcd:3.6.6-0", "registry.k8s.io/coredns/coredns:v1.13.1", "registry.k8s.io/pause:3.10.1", "docker.io/flannel/flannel:v0.28.4"];

describe("kubespray pins for the served Kubernetes versions", () => {
  it("pin every served version's files, newest first (kubespray's default is the first key)", () => {
    const pins = kubesprayPins({
      kubernetes: [served("v1.35.3", "a"), served("v1.35.4", "b")],
      images: [...common, ...controlPlane("v1.35.4"), ...controlPlane("v1.35.3")],
    });
    expect(pins.kubeadm_checksums).toEqual({ amd64: { "1.35.4": `sha256:${sha("b")}`, "1.35.3": `sha256:${sha("a")}` } });
    expect(Object.keys((pins.kubelet_checksums as { amd64: object }).amd64)).toEqual(["1.35.4", "1.35.3"]);
    expect(pins).not.toHaveProperty("kube_version");
    expect(pins).toMatchObject({ etcd_version: "3.6.6", coredns_version: "1.13.1", pod_infra_version: "3.10.1", flannel_version: "0.28.4" });
  });

  it("refuse a served version whose control-plane images the registry does not have, naming the list to add", () => {
    const error = (() => {
      try {
        return kubesprayPins({ kubernetes: [served("v1.35.4", "b"), served("v1.35.3", "a")], images: [...common, ...controlPlane("v1.35.4")] });
      } catch (e) {
        return e;
      }
    })() as UserError;
    expect(error).toBeInstanceOf(UserError);
    expect(error.message).toBe(
      "kubespray pins: the file server serves Kubernetes v1.35.3 but the registry has no registry.k8s.io/kube-apiserver:v1.35.3 (it has v1.35.4)",
    );
    expect(error.hint).toContain("registry-seed/kubernetes-v1.35.3.yaml");
  });

  it("read back: the versions with all three binaries, oldest first, and the nodes' component versions", () => {
    const text = renderPins(
      kubesprayPins({
        kubernetes: [served("v1.35.4", "b"), served("v1.35.3", "a")],
        images: [...common, ...controlPlane("v1.35.4"), ...controlPlane("v1.35.3")],
      }),
      "test",
    );
    expect(readServedPins(text)).toEqual({
      kubernetesVersions: ["1.35.3", "1.35.4"],
      components: { etcd: "3.6.6", coredns: "1.13.1", pause: "3.10.1", flannel: "0.28.4" },
    });
    // A version with kubeadm but no kubelet is not served.
    const partial = yaml.dump({
      kubeadm_checksums: { amd64: { "1.35.4": "sha256:x", "1.36.0": "sha256:y" } },
      kubelet_checksums: { amd64: { "1.35.4": "sha256:x" } },
      kubectl_checksums: { amd64: { "1.35.4": "sha256:x", "1.36.0": "sha256:y" } },
    });
    expect(readServedPins(partial)).toMatchObject({ kubernetesVersions: ["1.35.4"] });
  });

  it("read back: say what is wrong with text that is not pins", () => {
    expect(readServedPins("a: [")).toMatch(/^not YAML: /);
    expect(readServedPins("- 1\n")).toBe("not a mapping of kubespray variables");
    expect(readServedPins("etcd_version: 3.6.6\n")).toBe("no kubeadm_checksums.amd64: no Kubernetes version is served");
    expect(readServedPins(yaml.dump({ kubeadm_checksums: { amd64: { "1.35.4": "sha256:x" } } }))).toBe(
      "no Kubernetes version has kubeadm, kubelet and kubectl checksums",
    );
  });

  it("ship as a ConfigMap of the operator's namespace that carries the file unchanged", () => {
    const text = "# comment\nkubeadm_checksums:\n  amd64:\n    1.35.4: sha256:x\n";
    const manifest = yaml.load(kubesprayPinsManifest(text)) as { kind: string; metadata: { name: string; namespace: string }; data: Record<string, string> };
    expect(manifest).toMatchObject({ kind: "ConfigMap", metadata: { name: KUBESPRAY_PINS_CONFIGMAP, namespace: "bpa-system" } });
    expect(manifest.data[KUBESPRAY_PINS_KEY]).toBe(text);
  });
});
