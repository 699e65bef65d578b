import { describe, expect, it } from "vitest";
import { checkRegistryCaPem } from "../../../bpa/controller/registry-ca.js";
import { makeTestCA } from "../../helpers/fixtures/bpa/registry-ca.js";

describe("the registry's site CA (ConfigMap icn-registry-ca, key ca.crt)", () => {
  const ca = makeTestCA();

  it("is taken as the appliance writes it", () => {
    expect(checkRegistryCaPem(ca.pem)).toEqual({ pem: ca.pem });
  });

  it("is normalised, so whitespace around it does not make a new install", () => {
    expect(checkRegistryCaPem(`\n\n${ca.pem.trim()}   \n\n`)).toEqual({ pem: ca.pem });
  });

  it("keeps every certificate of a bundle", () => {
    const other = makeTestCA("second CA");
    expect(checkRegistryCaPem(`${ca.pem}${other.pem}`)).toEqual({ pem: `${ca.pem}${other.pem}` });
  });

  it("refuses text that holds no certificate, a broken certificate, and an expired one", () => {
    expect(checkRegistryCaPem("")).toEqual({ problem: expect.stringMatching(/holds no PEM certificate/) });
    expect(checkRegistryCaPem(ca.keyPem)).toEqual({ problem: expect.stringMatching(/holds no PEM certificate/) });
    const broken = ca.pem.replace(/\n[A-Za-z0-9+/]{20}/, "\nAAAAAAAAAAAAAAAAAAAA");
    expect(checkRegistryCaPem(broken)).toEqual({ problem: expect.stringMatching(/certificate 1 is not a valid X\.509 certificate/) });
    expect(checkRegistryCaPem(ca.pem, new Date("2200-01-01T00:00:00Z"))).toEqual({
      problem: expect.stringMatching(/certificate 1 \(CN=ICN test registry CA\) expired on/),
    });
  });
});
