import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { sha256Text } from "../../builder/cache.js";
import { UserError } from "../../builder/errors.js";
import { DEFAULT_LOCK, LockFile } from "../../builder/lockfile.js";
import { classifyGoFailure, compareGoVersions, requiredVersion } from "../../builder/sources/go.js";
import { buildRecipe } from "../../builder/sources/gomod.js";
import { loadArtifacts, selectTargets } from "../../builder/sources/index.js";
import { followedVersion, KUBERNETES_BINARIES, kubeadmVersions, kubernetesStagingReplaces } from "../../builder/sources/lock.js";
import { Artifacts, targetsOf } from "../../builder/sources/schema.js";
import { formatTable } from "../../builder/commands/fetch.js";

const sha = (c: string) => c.repeat(64);

describe("artifact entries", () => {
  const artifacts = Artifacts.parse({
    kubernetes: {
      source: "gomod",
      module: "k8s.io/kubernetes",
      version: "v1.37.1",
      dir: "go/kubernetes",
      goSum: `sha256:${sha("a")}`,
      binaries: { "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver", kubectl: "k8s.io/kubernetes/cmd/kubectl" },
    },
    "kube-apiserver-release": { source: "url", url: "https://dl.k8s.io/release/v1.37.1/bin/linux/amd64/kube-apiserver", sha256: sha("b"), profile: "upstream" },
  });

  it("expands gomod entries into binaries; the default profile ignores upstream entries", () => {
    expect(targetsOf(artifacts).map((t) => [t.name, t.source])).toEqual([
      ["kube-apiserver", "gomod"],
      ["kubectl", "gomod"],
    ]);
  });

  it("lets an upstream url entry replace a default binary of the same name", () => {
    const withUpstream = Artifacts.parse({
      ...artifacts,
      "kube-apiserver": { source: "url", url: "https://dl.k8s.io/x", sha256: sha("c"), profile: "upstream" },
    });
    delete withUpstream["kube-apiserver-release"];
    expect(targetsOf(withUpstream, "upstream").map((t) => [t.name, t.source])).toEqual([
      ["kube-apiserver", "url"],
      ["kubectl", "gomod"],
    ]);
  });

  it("rejects entries with a wrong source, digest or version", () => {
    expect(Artifacts.safeParse({ x: { source: "git", url: "x" } }).success).toBe(false);
    expect(Artifacts.safeParse({ x: { source: "url", url: "https://a/b", sha256: "abc" } }).success).toBe(false);
    expect(
      Artifacts.safeParse({ x: { source: "gomod", module: "a.b/c", version: "1.2.3", dir: "go/x", goSum: sha("a"), binaries: { x: "a.b/c" } } }).success,
    ).toBe(false);
    expect(LockFile.shape.artifacts.safeParse({ x: { source: "url", url: "https://a/b", sha256: sha("d"), extra: 1 } }).success).toBe(false);
  });

  it("selects by binary or entry name and names the choices for an unknown one", () => {
    const loaded = { lockPath: "appliance.lock.yaml", baseDir: ".", artifacts };
    expect(selectTargets(loaded, { only: ["kubectl"] }).map((t) => t.name)).toEqual(["kubectl"]);
    expect(selectTargets(loaded, { only: ["kubernetes"] }).map((t) => t.name)).toEqual(["kube-apiserver", "kubectl"]);
    expect(() => selectTargets(loaded, { only: ["kubelet"] })).toThrow(/no artifact named 'kubelet'/);
  });
});

describe("Kubernetes pinning", () => {
  it("turns staging replace directives into the published v0.MINOR.PATCH modules", () => {
    const goMod =
      "replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n";
    expect(kubernetesStagingReplaces(goMod, "v1.37.1")).toEqual(["k8s.io/api => k8s.io/api v0.37.1", "k8s.io/client-go => k8s.io/client-go v0.37.1"]);
    expect(() => kubernetesStagingReplaces(goMod, "v2.0")).toThrow(UserError);
  });

  it("reads the etcd and CoreDNS versions kubeadm deploys", () => {
    const constants = 'DefaultEtcdVersion = "3.7.0-0"\n\tCoreDNSVersion = "v1.14.6"\n';
    expect(kubeadmVersions(constants)).toEqual({ etcd: "v3.7.0", coredns: "v1.14.6" });
  });

  it("keeps an etcd or CoreDNS pin newer than kubeadm's; an explicit version wins; an older pin follows kubeadm", () => {
    expect(followedVersion("v1.13.1", "v1.14.7")).toEqual({ version: "v1.14.7", why: "pinned" });
    expect(followedVersion("v3.6.6", "v3.6.16")).toEqual({ version: "v3.6.16", why: "pinned" });
    expect(followedVersion("v3.6.6", "v3.6.16", "v3.6.14")).toEqual({ version: "v3.6.14", why: "override" });
    expect(followedVersion("v3.7.0", "v3.6.16")).toEqual({ version: "v3.7.0", why: "kubeadm" });
    expect(followedVersion("v1.13.1", undefined)).toEqual({ version: "v1.13.1", why: "kubeadm" });
    expect(followedVersion("v1.13.1", "v1.13.1")).toEqual({ version: "v1.13.1", why: "kubeadm" });
  });

  it("stamps the pinned version into Kubernetes binaries", () => {
    const recipe = buildRecipe({ module: "k8s.io/kubernetes", version: "v1.37.1" });
    expect(recipe.tags).toEqual(["selinux", "notest", "grpcnotrace"]);
    expect(recipe.ldflags).toContain("-X k8s.io/component-base/version.gitVersion=v1.37.1");
    expect(recipe.ldflags).toContain("-X k8s.io/client-go/pkg/version.gitMinor=37");
    expect(recipe.ldflags.slice(0, 2)).toEqual(["-s", "-w"]);
    expect(buildRecipe({ module: "go.etcd.io/etcd/server/v3", version: "v3.7.0" })).toEqual({ tags: [], ldflags: ["-s", "-w"] });
  });
});

describe("the committed lock file and wrapper modules", async () => {
  const loaded = await loadArtifacts(DEFAULT_LOCK);
  const k8s = loaded.artifacts.kubernetes;

  it("pins Kubernetes once, with every component from that one entry", () => {
    expect(k8s?.source).toBe("gomod");
    if (k8s?.source !== "gomod") return;
    expect(Object.keys(k8s.binaries).sort()).toEqual([...KUBERNETES_BINARIES].sort());
    expect(targetsOf(loaded.artifacts).map((t) => t.name)).toEqual(expect.arrayContaining(["etcd", "coredns", ...KUBERNETES_BINARIES]));
  });

  it("has wrapper modules that follow the lock file (version, staging replaces, go.sum digest)", async () => {
    for (const [name, entry] of Object.entries(loaded.artifacts)) {
      if (entry.source !== "gomod") continue;
      const goMod = await readFile(join(loaded.baseDir, entry.dir, "go.mod"), "utf8");
      const goSum = await readFile(join(loaded.baseDir, entry.dir, "go.sum"), "utf8");
      expect(requiredVersion(goMod, entry.module), name).toBe(entry.version);
      expect(`sha256:${sha256Text(goSum)}`, name).toBe(entry.goSum);
    }
    if (k8s?.source !== "gomod") return;
    const goMod = await readFile(join(loaded.baseDir, k8s.dir, "go.mod"), "utf8");
    const staging = [...goMod.matchAll(/^\s+(k8s\.io\/\S+) => (k8s\.io\/\S+) (v\S+)$/gm)];
    expect(staging.length).toBeGreaterThan(20);
    for (const [, from, to, version] of staging) {
      expect(to).toBe(from);
      expect(version).toBe(k8s.version.replace(/^v1\./, "v0."));
    }
  });
});

describe("Go toolchain checks", () => {
  it("compares Go versions as Go does", () => {
    expect(compareGoVersions("go1.26.8", "1.26.0")).toBe(1);
    expect(compareGoVersions("go1.22.1", "1.26")).toBe(-1);
    expect(compareGoVersions("go1.26.0", "1.26")).toBe(0);
    expect(compareGoVersions("go1.27rc1", "1.27.0")).toBe(-1);
  });

  it("explains go failures by cause", () => {
    expect(classifyGoFailure("go: k8s.io/kubernetes@v1.37.9: invalid version: unknown revision v1.37.9", "kube-apiserver", "go build").hint).toMatch(
      /lock-artifacts/,
    );
    expect(classifyGoFailure("verifying k8s.io/api@v0.37.1: checksum mismatch", "kubectl", "go build").message).toMatch(
      /^kubectl: module verification against the committed go.sum failed/,
    );
    expect(classifyGoFailure("go: go.mod requires go >= 1.99.0 (running go 1.26.8; GOTOOLCHAIN=local)", "etcd", "go build").hint).toMatch(
      /install Go 1\.99\.0/,
    );
  });
});

describe("fetch table", () => {
  it("lists name, source, version, short digest, size and status", () => {
    const table = formatTable([
      { name: "etcd", source: "gomod", version: "v3.7.0", path: "/x", sha256: sha("e"), size: 30 * 1024 * 1024, status: "cached", seconds: 0 },
      {
        name: "kube-apiserver",
        source: "gomod",
        version: "v1.37.1",
        path: "/y",
        sha256: sha("f"),
        size: 90 * 1024 * 1024,
        status: "built",
        seconds: 312,
        repaired: "corrupt",
      },
    ]).split("\n");
    expect(table[0]).toMatch(/^NAME\s+SOURCE\s+VERSION\s+SHA256\s+SIZE\s+STATUS$/);
    expect(table[1]).toMatch(/^etcd\s+gomod\s+v3\.7\.0\s+eeeeeeeeeeee\s+30\.0 MiB\s+cached$/);
    expect(table[2]).toMatch(/built \(repaired\) 5m12s$/);
  });
});
