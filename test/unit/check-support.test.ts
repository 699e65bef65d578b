/**
 * lock --check's support windows: a toy definition's windows against toy pins on an
 * injected day, making each verdict appear (out of support, ends soon, within, no window).
 */
import { describe, expect, it } from "vitest";
import type { ComponentPin } from "../../builder/check/findings.js";
import { checkSupport, WARN_DAYS } from "../../builder/check/support.js";
import { parseDefinition } from "../../builder/definition.js";
import { UserError } from "../../builder/errors.js";

const TOY = `name: toy
debian:
  suite: trixie
support:
  - pin: artifact:runtime
    series: "2.2"
    endOfLife: 2026-11-06
    source: https://example.test/runtime/RELEASES.md
    note: 2.3 is the long-term line
  - pin: debian:agent
    series: "29.0"
    endOfLife: "2027-01-15"
    source: https://example.test/series
  - pin: pypi:tool
    series: "1.4"
    endOfLife: 2027-06-30
    source: https://example.test/tool
  - pin: artifact:gone
    series: "1.0"
    endOfLife: 2030-01-01
    source: https://example.test/gone
`;

const pin = (key: string, version: string): ComponentPin => ({
  key,
  component: key.split(":")[1]!,
  version,
  pin: `${key.split(":")[1]} ${version}`,
  move: () => `move ${key}`,
});
const windows = parseDefinition(TOY, "toy.yaml").support;
const pins = [pin("artifact:runtime", "v2.2.3"), pin("debian:agent", "1:29.0.5-0+deb13u3"), pin("pypi:tool", "1.4.2"), pin("artifact:other", "v0.1.0")];

describe("support windows", () => {
  it("the definition reads a window's day written as a YAML date or a string", () => {
    expect(windows.map((w) => w.endOfLife)).toEqual(["2026-11-06", "2027-01-15", "2027-06-30", "2030-01-01"]);
  });

  it("refuses a window without a source or with a bad day, naming the field", () => {
    const bad = TOY.replace("    source: https://example.test/series\n", "").replace('"2027-01-15"', "next year");
    const error = (() => {
      try {
        parseDefinition(bad, "toy.yaml");
      } catch (e) {
        return e as UserError;
      }
    })();
    expect(error).toBeInstanceOf(UserError);
    expect(error!.message).toMatch(/support\[1\]\.endOfLife: expected a day written YYYY-MM-DD/);
    expect(error!.message).toMatch(/support\[1\]\.source: required field missing/);
  });

  it("after the end: out of support, naming the line, the day, the source and the move", () => {
    const result = checkSupport(pins, windows, "2026-12-01");
    expect(result.findings.filter((f) => f.verdict === "out-of-support")).toEqual([
      {
        verdict: "out-of-support",
        component: "runtime",
        pin: "runtime v2.2.3",
        detail: "upstream support of the 2.2 line ended 2026-11-06 (https://example.test/runtime/RELEASES.md; 2.3 is the long-term line)",
        move: "move artifact:runtime",
      },
    ]);
  });

  it(`from ${WARN_DAYS} days before the end: ends soon; earlier: within its window`, () => {
    const result = checkSupport(pins, windows, "2026-12-01");
    expect(result.findings.filter((f) => f.verdict === "ends-soon").map((f) => [f.component, f.detail])).toEqual([
      ["agent", "upstream support of the 29.0 line ends 2027-01-15, in 45 days (https://example.test/series)"],
    ]);
    expect(result.supported.map((s) => [s.pin.component, s.endOfLife])).toEqual([["tool", "2027-06-30"]]);
    const day = (d: string) => checkSupport([pin("debian:agent", "29.0.5")], windows, d).findings.map((f) => f.verdict);
    expect(day("2026-11-15")).toEqual([]); // 61 days before
    expect(day("2026-11-16")).toEqual(["ends-soon"]); // 60 days before
    expect(day("2027-01-15")).toEqual(["ends-soon"]); // the last day
    expect(day("2027-01-16")).toEqual(["out-of-support"]);
  });

  it("a pin on another line than its window, or with none, is listed as having no window, never as supported; a window matching no pin is stale", () => {
    const result = checkSupport([...pins.slice(1), pin("artifact:runtime", "v2.3.0"), pin("artifact:runtime", "v2.20.1")], windows, "2026-12-01");
    expect(result.unrecorded.map((p) => p.pin)).toEqual(["other v0.1.0", "runtime v2.3.0", "runtime v2.20.1"]);
    expect(result.findings.some((f) => f.component === "runtime")).toBe(false);
    expect(result.unused.map((w) => `${w.pin} ${w.series}`)).toEqual(["artifact:runtime 2.2", "artifact:gone 1.0"]);
  });
});
