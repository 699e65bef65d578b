import { describe, expect, it } from "vitest";
import { seededTagRules } from "../../builder/registry/seeded-tags.js";

const D1 = `sha256:${"a".repeat(64)}`;
const D2 = `sha256:${"b".repeat(64)}`;

describe("nginx rules that keep the shipped tags immutable", () => {
  it("names every tag of every seeded image, with its digest, sorted", () => {
    const rules = seededTagRules([
      { repository: "pause", tag: "3.10.2", tags: [], digest: D1 },
      { repository: "icn/bpa", tag: "0.1.0", tags: ["latest"], digest: D2 },
    ]);
    const entries = rules.split("\n").filter((l) => l.startsWith('    "PUT'));
    expect(entries).toEqual([
      `    "PUT /v2/icn/bpa/manifests/0.1.0" "icn/bpa:0.1.0 is shipped with this appliance at ${D2}";`,
      `    "PUT /v2/icn/bpa/manifests/latest" "icn/bpa:latest is shipped with this appliance at ${D2}";`,
      `    "PUT /v2/pause/manifests/3.10.2" "pause:3.10.2 is shipped with this appliance at ${D1}";`,
    ]);
    expect(rules).toMatch(/^map "\$request_method \$uri" \$icn_seeded_tag \{$/m);
    expect(rules).toMatch(/^ {4}default "";$/m);
  });

  it("names every shipped repository exactly (its API paths), for the REST API account's rule; the chart's rules without digests", () => {
    const rules = seededTagRules([{ repository: "coredns/coredns", tag: "v1.13.1", tags: [] }], "the chart's bundle");
    expect(rules).toContain(`    "PUT /v2/coredns/coredns/manifests/v1.13.1" "coredns/coredns:v1.13.1 is shipped with the chart's bundle";`);
    expect(rules).toMatch(/^map \$uri \$icn_shipped_repository \{$/m);
    expect(rules).toContain(`    "~^/v2/coredns/coredns/(manifests|blobs|tags|referrers)/" "coredns/coredns";`);
    expect(seededTagRules([{ repository: "a.b", tag: "1", tags: [] }])).toContain(`"~^/v2/a\\.b/(manifests|blobs|tags|referrers)/" "a.b";`);
  });

  it("refuses a name that could break out of the nginx string", () => {
    expect(() => seededTagRules([{ repository: 'evil"; }', tag: "1", tags: [], digest: D1 }])).toThrow(/unexpected characters/);
    expect(() => seededTagRules([{ repository: "ok", tag: "1", tags: ["x y"], digest: D1 }])).toThrow(/ok:x y/);
  });
});
