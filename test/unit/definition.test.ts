import { describe, expect, it } from "vitest";
import { loadDefinition, parseDefinition, parseSize, withExtraKubernetes } from "../../builder/definition.js";
import { UserError } from "../../builder/errors.js";

const minimal = "name: test\ndebian:\n  suite: trixie\n";

function errorOf(text: string): string {
  try {
    parseDefinition(text, "appliance.yaml");
  } catch (error) {
    expect(error).toBeInstanceOf(UserError);
    return (error as Error).message;
  }
  throw new Error("expected the definition to be rejected");
}

describe("appliance definition", () => {
  it("loads the repository's default definition", async () => {
    const definition = await loadDefinition();
    expect(definition.name).toBe("icn-bootstrap");
    expect(definition.outputs.formats).toEqual(["usb", "qcow2"]);
    expect(definition.debian.packages).toContain("docker-registry");
    // The container runtime is the pinned releases (the kubernetes stage), not Debian's out-of-support 1.7 and 1.1.
    expect(definition.debian.packages).not.toContain("containerd");
    expect(definition.debian.packages).not.toContain("runc");
  });

  it("fills defaults for a minimal definition", () => {
    const definition = parseDefinition(minimal, "x.yaml");
    expect(definition.console.serial).toBe("ttyS0,115200");
    expect(definition.network).toMatchObject({ dhcp: true, hostnamePrefix: "icn-bootstrap" });
    expect(definition.outputs.formats).toEqual(["usb", "qcow2"]);
    expect(definition.overlays).toEqual([]);
    expect(definition.kubernetes).toMatchObject({ enabled: true, components: true });
    expect(parseDefinition(`${minimal}kubernetes:\n  components: false\n`, "x.yaml").kubernetes).toMatchObject({ enabled: true, components: false });
  });

  it("rejects an unknown key with its path", () => {
    expect(errorOf(`${minimal}network:\n  dhpc: true\n`)).toMatch(/network: unknown key 'dhpc'/);
    expect(errorOf(`${minimal}colour: blue\n`)).toMatch(/\(top level\): unknown key 'colour'/);
  });

  it("rejects a wrong type with the path and the expected type", () => {
    expect(errorOf(`${minimal}network:\n  dhcp: "yes"\n`)).toMatch(/network\.dhcp: expected boolean, got string/);
    expect(errorOf(`name: test\ndebian:\n  suite: trixie\n  packages: nginx\n`)).toMatch(/debian\.packages: expected array, got string/);
  });

  it("names the element of a list that is wrong", () => {
    expect(errorOf(`${minimal}outputs:\n  formats: [usb, iso]\n`)).toMatch(/outputs\.formats\[1\]: expected one of 'usb', 'qcow2', got 'iso'/);
    expect(errorOf(`name: test\ndebian:\n  suite: trixie\n  packages: [curl, "Bad Name"]\n`)).toMatch(/debian\.packages\[1\]: expected a Debian package name/);
  });

  it("reports a missing required field", () => {
    expect(errorOf("name: test\n")).toMatch(/debian: required field missing \(expected object\)/);
  });

  it("rejects malformed values with what was expected", () => {
    expect(errorOf(`${minimal}disk:\n  rootFree: lots\n`)).toMatch(/disk\.rootFree: expected a size such as '512MiB'/);
    expect(errorOf(`${minimal}network:\n  static: { interface: eth0, address: 10.0.0.2 }\n`)).toMatch(
      /network\.static\.address: expected an IPv4 address with prefix/,
    );
    expect(errorOf(`${minimal}console:\n  serial: com1\n`)).toMatch(/console\.serial: expected a serial console/);
  });

  it("takes the keys an upgrade must be signed by as PEM public keys, and the health bound as a duration", () => {
    const key = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n";
    expect(parseDefinition(minimal, "x.yaml").upgrade).toEqual({ trustedKeys: [], healthTimeout: "30m" });
    expect(parseDefinition(`${minimal}upgrade:\n  trustedKeys: [${JSON.stringify(key)}]\n  healthTimeout: 1h\n`, "x.yaml").upgrade).toEqual({
      trustedKeys: [key],
      healthTimeout: "1h",
    });
    expect(errorOf(`${minimal}upgrade:\n  trustedKeys: ["-----BEGIN PRIVATE KEY-----\\nMIG\\n-----END PRIVATE KEY-----\\n"]\n`)).toMatch(
      /upgrade\.trustedKeys\[0\]: expected a PEM public key/,
    );
    expect(errorOf(`${minimal}upgrade:\n  healthTimeout: soon\n`)).toMatch(/upgrade\.healthTimeout: .*a duration such as '1800s'/);
  });

  it("serves extra Kubernetes versions: a release each, with its control-plane image list", () => {
    expect(errorOf(`${minimal}kubespray:\n  extraKubernetesVersions: [1.35.3]\n`)).toMatch(
      /kubespray\.extraKubernetesVersions\[0\]: expected a Kubernetes release such as v1\.35\.3/,
    );
    const definition = parseDefinition(`${minimal}kubespray:\n  extraKubernetesVersions: [v1.35.3]\n`, "x.yaml");
    expect(definition.kubespray).toEqual({ enabled: true, extraKubernetesVersions: ["v1.35.3"] });
    const wider = withExtraKubernetes(withExtraKubernetes(definition, ["v1.35.3"]), ["v1.34.7"]);
    expect(wider.kubespray.extraKubernetesVersions).toEqual(["v1.35.3", "v1.34.7"]);
    expect(wider.registry.lists).toEqual([...definition.registry.lists, "registry-seed/kubernetes-v1.35.3.yaml", "registry-seed/kubernetes-v1.34.7.yaml"]);
  });

  it("reports YAML syntax errors", () => {
    expect(errorOf("name: [unclosed\n")).toMatch(/not valid YAML/);
  });

  it("reports a missing file with the fix", async () => {
    await expect(loadDefinition("/nonexistent/appliance.yaml")).rejects.toThrow(/cannot read appliance definition \/nonexistent\/appliance.yaml: ENOENT/);
  });

  it("parses sizes", () => {
    expect(parseSize("512MiB")).toBe(512 * 1024 * 1024);
    expect(parseSize("1.5G")).toBe(1.5 * 1024 ** 3);
  });
});
