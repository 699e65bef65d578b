import { describe, expect, it } from "vitest";
import { diskCache } from "../../builder/boot/qemu.js";

describe("a test boot's disk cache mode", () => {
  it("ends the guest's flushes at the host's page cache for a throw-away disk", () => {
    expect(diskCache({})).toBe("unsafe");
  });

  it("keeps writeback when the boot cuts the power, so a SIGKILL leaves the qcow2 whole", () => {
    expect(diskCache({ powerCutOn: /Starting/ })).toBe("writeback");
  });

  it("takes what the caller asks for", () => {
    expect(diskCache({ diskCache: "writeback" })).toBe("writeback");
  });
});
