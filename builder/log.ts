/** Progress output: one line per event, prefixed with the stage and the elapsed time. */
const started = Date.now();

export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function formatSeconds(ms: number): string {
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const whole = Math.round(s); // rounded once, so 119.6 s is 2m00s, not 1m60s
  return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, "0")}s`;
}

let quiet = false;
export function setQuiet(value: boolean): void {
  quiet = value;
}

export function log(scope: string, message: string): void {
  if (quiet) return;
  process.stderr.write(`[${formatSeconds(Date.now() - started).padStart(6)}] ${scope.padEnd(10)} ${message}\n`);
}
