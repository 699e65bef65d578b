/** The REST API's upload metadata rules and configuration (common/uploads.ts, bpa/rest/config.ts). */
import { describe, expect, it } from "vitest";
import { parseImageName, parseUploadRequest } from "../../../common/uploads.js";
import { loadApiConfig } from "../../../bpa/rest/config.js";
import { publishedName } from "../../../bpa/rest/owners.js";

const hex = "a".repeat(64);

describe("upload metadata", () => {
  it("accepts the three kinds with their names, and sha256 with or without its prefix", () => {
    expect(parseUploadRequest({ kind: "file", name: "kubespray/v2.31.0/calicoctl", sha256: hex })).toEqual({
      kind: "file",
      name: "kubespray/v2.31.0/calicoctl",
      sha256: hex,
    });
    expect(parseUploadRequest({ kind: "os-image", name: "ubuntu-22.04.qcow2", sha256: `sha256:${"B".repeat(64)}` }).sha256).toBe("b".repeat(64));
    expect(parseUploadRequest({ kind: "container-image", name: "site/app:1.0", sha256: hex }).name).toBe("site/app:1.0");
  });

  it("names every bad field with the fix", () => {
    expect(() => parseUploadRequest({})).toThrow(
      /metadata "kind" is missing: use one of file, container-image, os-image, chart, appliance-image; metadata "name" is missing.*; metadata "sha256" is missing/,
    );
    expect(() => parseUploadRequest({ kind: "appliance-image", name: "2026.12/notes.txt", sha256: hex })).toThrow(
      /not one of the build's outputs an upgrade reads/,
    );
    expect(() => parseUploadRequest({ kind: "appliance-image", name: "../icn-bootstrap.img", sha256: hex })).toThrow(/is not a relative file path/);
    expect(parseUploadRequest({ kind: "appliance-image", name: "2026.12/icn-bootstrap.img.sigstore.json", sha256: hex }).kind).toBe("appliance-image");
    for (const name of ["../x", "a/../b", ".hidden", "a//b", "/abs", "a b"]) {
      expect(() => parseUploadRequest({ kind: "file", name, sha256: hex }), name).toThrow(/is not a relative file path/);
    }
    expect(() => parseUploadRequest({ kind: "os-image", name: "dir/x.qcow2", sha256: hex })).toThrow(/is not a file name/);
    expect(() => parseUploadRequest({ kind: "os-image", name: "x.qcow2.sha256sum", sha256: hex })).toThrow(/checksum file/);
    expect(() => parseUploadRequest({ kind: "file", name: "tools/x.sha256", sha256: hex })).toThrow(/ends like a checksum file/);
    expect(() => parseUploadRequest({ kind: "file", name: "tools/x.sha256/y", sha256: hex })).toThrow(
      /directory "x.sha256" is named like the checksum file of "x"/,
    );
    expect(() => parseUploadRequest({ kind: "container-image", name: "Site/App:1", sha256: hex })).toThrow(/lowercase repository/);
    expect(() => parseUploadRequest({ kind: "container-image", name: "site/app:-bad", sha256: hex })).toThrow(/tag "-bad" is not a tag/);
    expect(() => parseUploadRequest({ kind: "file", name: "x", sha256: "abc" })).toThrow(/metadata "sha256" is "abc": state the sha256/);
  });

  it("splits image names into repository and tag, latest by default, ports not taken for tags", () => {
    expect(parseImageName("site/app:1.0")).toEqual({ repository: "site/app", tag: "1.0" });
    expect(parseImageName("site/app")).toEqual({ repository: "site/app", tag: "latest" });
  });
});

describe("published names (whose they are is decided by these)", () => {
  it("are one per place: a path per tree, repository:tag in the registry that images and charts share", () => {
    expect(publishedName("file", "tools/x.bin").key).toBe("file:tools/x.bin");
    expect(publishedName("os-image", "x.qcow2").key).toBe("os-image:x.qcow2");
    expect(publishedName("container-image", "site/app").key).toBe(publishedName("container-image", "site/app:latest").key);
    expect(publishedName("container-image", "charts/app:1.0.0").key).toBe(publishedName("chart", "charts/app:1.0.0").key);
    // A chart named without its version: its tag is known once the chart is read (+ written _, as Helm does).
    expect(publishedName("chart", "charts/app")).toMatchObject({ repository: "charts/app", key: "registry:charts/app:?" });
    expect(publishedName("chart", "charts/app", "1.0.0+b1")).toMatchObject({ tag: "1.0.0_b1", key: "registry:charts/app:1.0.0_b1" });
  });
});

describe("REST API configuration", () => {
  it("needs TLS unless --plain-http is explicit, and names the variable of a bad value", () => {
    expect(() => loadApiConfig({}, {})).toThrow(/tlsCert \(BPA_API_TLS_CERT\): TLS needs --tls-cert and --tls-key/);
    expect(loadApiConfig({ plainHttp: true }, {}).port).toBe(8443);
    expect(() => loadApiConfig({ plainHttp: true }, { BPA_API_MAX_UPLOAD_BYTES: "lots" })).toThrow(/maxUploadBytes \(BPA_API_MAX_UPLOAD_BYTES\)/);
    expect(loadApiConfig({ tlsCert: "/c", tlsKey: "/k" }, { BPA_API_MAX_UPLOAD_BYTES: "1024", POD_NAMESPACE: "x" })).toMatchObject({
      maxUploadBytes: 1024,
      namespace: "x",
      stateDir: "/var/lib/icn-bootstrap/bpa-api",
    });
  });
});
