/**
 * Upstream support windows (the definition's `support:`): a pinned component whose line's
 * window has ended is out of support; from 60 days before the end it is warned about. A
 * pin with no window for its line is listed, never called supported.
 */
import type { SupportWindow } from "../definition.js";
import type { ComponentPin, Finding } from "./findings.js";
import { onLine } from "./versions.js";

export const WARN_DAYS = 60;
const DAY_MS = 86_400_000;

export interface SupportResult {
  findings: Finding[];
  /** Pins within their window (component and the end day). */
  supported: { pin: ComponentPin; endOfLife: string }[];
  /** Pins whose line has no window recorded. */
  unrecorded: ComponentPin[];
  /** Windows that match no pin (a moved pin, a typo): stale data to remove. */
  unused: SupportWindow[];
}

/** `today` is the day as YYYY-MM-DD (the clock's, or a test's). */
export function checkSupport(pins: ComponentPin[], windows: SupportWindow[], today: string): SupportResult {
  const result: SupportResult = { findings: [], supported: [], unrecorded: [], unused: [] };
  const used = new Set<SupportWindow>();
  for (const pin of pins) {
    const window = windows.find((w) => w.pin === pin.key && onLine(pin.version, w.series));
    if (!window) {
      result.unrecorded.push(pin);
      continue;
    }
    used.add(window);
    const days = Math.round((Date.parse(window.endOfLife) - Date.parse(today)) / DAY_MS);
    const why = `${window.source}${window.note ? `; ${window.note}` : ""}`;
    if (days < 0)
      result.findings.push({
        verdict: "out-of-support",
        component: pin.component,
        pin: pin.pin,
        detail: `upstream support of the ${window.series} line ended ${window.endOfLife} (${why})`,
        move: pin.move(),
      });
    else if (days <= WARN_DAYS)
      result.findings.push({
        verdict: "ends-soon",
        component: pin.component,
        pin: pin.pin,
        detail: `upstream support of the ${window.series} line ends ${window.endOfLife}, in ${days} days (${why})`,
        move: pin.move(),
      });
    else result.supported.push({ pin, endOfLife: window.endOfLife });
  }
  result.unused = windows.filter((w) => !used.has(w));
  return result;
}
