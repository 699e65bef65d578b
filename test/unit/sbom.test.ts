import { Spec, Validation } from "@cyclonedx/cyclonedx-library";
import { describe, expect, it } from "vitest";
import { buildBom, serializeBom, type SbomInput } from "../../builder/sbom/cyclonedx.js";
import { parseBuildInfo } from "../../builder/sbom/go-buildinfo.js";

// As `go version -m` prints it for a Kubernetes binary built from the wrapper module (a replaced staging module included).
const KUBECTL_BUILDINFO = [
  "kubectl: go1.26.8",
  "\tpath\tk8s.io/kubernetes/cmd/kubectl",
  "\tmod\tk8s.io/kubernetes\tv1.37.1\th1:LTUzSbp9n0W7649oVKBYfC48zcoD3vCk++1PZQn28q8=",
  "\tdep\tgithub.com/MakeNowJust/heredoc\tv1.0.0\th1:cXCdzVdstXyiTqTvfqk9SDHpKNjxuom+DOlyEeQ4pzQ=",
  "\tdep\tk8s.io/api\tv0.0.0",
  "\t=>\tk8s.io/api\tv0.37.1\th1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
  "\tbuild\t-trimpath=true",
  "\tbuild\tCGO_ENABLED=0",
].join("\n");

function input(): SbomInput {
  const info = parseBuildInfo(KUBECTL_BUILDINFO);
  return {
    name: "icn-bootstrap",
    epoch: 1795832945,
    debianVersion: "13.2",
    debian: [
      { set: "rootfs", name: "systemd", version: "257.9-1~deb13u1", architecture: "amd64", sha256: "a".repeat(64) },
      { set: "rootfs", name: "libc6", version: "2.41-12", architecture: "amd64", sha256: "b".repeat(64) },
      { set: "base", name: "libc6", version: "2.41-12", architecture: "amd64", sha256: "b".repeat(64) },
      { set: "toolchain", name: "gcc-14", version: "14.2.0-19", architecture: "amd64", sha256: "c".repeat(64) },
    ],
    goBinaries: [
      {
        name: "kubectl",
        sha256: "d".repeat(64),
        info,
        locations: ["/usr/local/bin/kubectl", "file server /kubespray/dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubectl"],
      },
    ],
    containerImages: [
      {
        ref: "registry.k8s.io/kube-proxy:v1.37.1",
        repository: "kube-proxy",
        tags: ["v1.37.1"],
        digest: `sha256:${"e".repeat(64)}`,
        source: "recipe",
        debianSet: "base",
        binaries: [],
        npmPackages: [],
      },
      {
        ref: "bootstrap.icn:5000/icn/kubespray-runner:2.31.0",
        repository: "icn/kubespray-runner",
        tags: ["2.31.0"],
        digest: `sha256:${"7".repeat(64)}`,
        source: "recipe",
        debianSet: "base",
        binaries: [],
        npmPackages: [],
        pythonPackages: [
          { name: "ansible-core", version: "2.18.19" },
          { name: "jmespath", version: "1.1.0" },
        ],
      },
      {
        ref: "bootstrap.icn:5000/icn/bpa:0.1.0",
        repository: "icn/bpa",
        tags: ["0.1.0", "latest"],
        digest: `sha256:${"9".repeat(64)}`,
        source: "recipe",
        debianSet: "base",
        binaries: [],
        npmPackages: [
          { name: "@kubernetes/client-node", version: "1.4.0", license: "Apache-2.0" },
          { name: "ws", version: "8.18.3", license: "MIT" },
          { name: "dual", version: "1.0.0", license: "(MIT OR Apache-2.0)" },
          { name: "odd", version: "2.0.0", license: "SEE LICENSE IN LICENSE.md" },
          { name: "none", version: "0.1.0" },
        ],
      },
    ],
    files: [{ path: "/kubespray/dl.k8s.io/release/v1.37.1/bin/linux/amd64/kubectl", sha256: "d".repeat(64), from: "artifact:kubectl" }],
    images: [{ format: "usb", sha256: "f".repeat(64) }],
    tools: [{ name: "e2fsprogs", version: "1.47.0-2" }],
  };
}

const validator = new Validation.JsonStrictValidator(Spec.Version.v1dot6);

describe("CycloneDX SBOM", () => {
  it("reads Go build information, replacements applied", () => {
    const info = parseBuildInfo(KUBECTL_BUILDINFO);
    expect(info).toMatchObject({ goVersion: "go1.26.8", package: "k8s.io/kubernetes/cmd/kubectl", main: { path: "k8s.io/kubernetes", version: "v1.37.1" } });
    expect(info.deps.map((d) => `${d.path}@${d.version}`)).toEqual(["github.com/MakeNowJust/heredoc@v1.0.0", "k8s.io/api@v0.37.1"]);
  });

  it("is valid CycloneDX 1.6 (the CycloneDX library's strict JSON schema validator) with purls for every kind", async () => {
    const json = serializeBom(buildBom(input()));
    expect(await validator.validate(json)).toBeNull();
    const bom = JSON.parse(json);
    expect(bom.specVersion).toBe("1.6");
    const purls = bom.components.map((c: { purl?: string }) => c.purl).filter(Boolean);
    expect(purls).toContain("pkg:deb/debian/systemd@257.9-1~deb13u1?arch=amd64&distro=debian-13");
    expect(purls).toContain("pkg:golang/k8s.io/kubernetes@v1.37.1#cmd/kubectl");
    expect(purls).toContain("pkg:golang/k8s.io/api@v0.37.1");
    expect(purls).toContain("pkg:golang/stdlib@v1.26.8");
    expect(purls).toContain(`pkg:oci/kube-proxy@sha256:${"e".repeat(64)}?repository_url=registry.k8s.io%2Fkube-proxy&tag=v1.37.1`);
    // What the BPA's bundle holds: npm purls (scoped names encoded), licenses as npm states them, and the image depends on them.
    expect(purls).toContain("pkg:npm/%40kubernetes/client-node@1.4.0");
    expect(purls).toContain("pkg:npm/ws@8.18.3");
    const byName = (name: string) => bom.components.find((c: { name: string }) => c.name === name);
    expect(byName("@kubernetes/client-node").licenses).toEqual([{ license: { id: "Apache-2.0" } }]);
    expect(byName("dual").licenses).toEqual([{ expression: "(MIT OR Apache-2.0)" }]);
    expect(byName("odd").licenses).toEqual([{ license: { name: "SEE LICENSE IN LICENSE.md" } }]);
    expect(byName("none").licenses ?? []).toEqual([]);
    const bpaDeps = bom.dependencies.find((d: { ref: string }) => d.ref === "oci:bootstrap.icn:5000/icn/bpa:0.1.0").dependsOn;
    expect(bpaDeps).toEqual(expect.arrayContaining(["npm:@kubernetes/client-node@1.4.0", "npm:ws@8.18.3", "npm:none@0.1.0"]));
    // The runner's PyPI packages: pypi purls, and the image depends on them.
    expect(purls).toContain("pkg:pypi/ansible-core@2.18.19");
    const runnerDeps = bom.dependencies.find((d: { ref: string }) => d.ref === "oci:bootstrap.icn:5000/icn/kubespray-runner:2.31.0").dependsOn;
    expect(runnerDeps).toEqual(expect.arrayContaining(["pypi:ansible-core@2.18.19", "pypi:jmespath@1.1.0"]));
    const kubectl = bom.components.find((c: { name: string }) => c.name === "kubectl");
    expect(kubectl.hashes).toEqual([{ alg: "SHA-256", content: "d".repeat(64) }]);
    expect(kubectl.properties).toContainEqual({ name: "icn-bootstrap:go:version", value: "go1.26.8" });
    // The toolchain compiled pause; it is not shipped.
    expect(bom.components.find((c: { "bom-ref": string }) => c["bom-ref"] === "deb:toolchain:gcc-14").scope).toBe("excluded");
    expect(bom.metadata.timestamp).toBe(new Date(1795832945 * 1000).toISOString()); // SOURCE_DATE_EPOCH, not the build's time
    expect(bom.serialNumber).toMatch(/^urn:uuid:[0-9a-f-]{36}$/);
  });

  it("gives the same bytes for the same inputs, whatever their order, and other bytes for other inputs", () => {
    const reordered = input();
    reordered.debian.reverse();
    reordered.files.reverse();
    expect(serializeBom(buildBom(reordered))).toBe(serializeBom(buildBom(input())));
    const other = input();
    other.debian[0]!.version = "257.9-1~deb13u2";
    const [a, b] = [JSON.parse(serializeBom(buildBom(input()))), JSON.parse(serializeBom(buildBom(other)))];
    expect(b.serialNumber).not.toBe(a.serialNumber);
  });

  it("the validator rejects a document that breaks the schema", async () => {
    const bom = JSON.parse(serializeBom(buildBom(input())));
    bom.components[0].type = "no-such-type";
    expect(await validator.validate(JSON.stringify(bom))).not.toBeNull();
  });
});
