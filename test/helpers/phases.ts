/** An e2e run's phases, each printed at once with the minutes since the run started, and all again as a summary at its end. */
export function phaseLog(run: string): { phase: (what: string) => void; summary: () => string } {
  const started = Date.now();
  const lines: string[] = [];
  return {
    phase(what) {
      const line = `[${((Date.now() - started) / 60_000).toFixed(1).padStart(5)} min] ${what}`;
      lines.push(line);
      console.log(`${run} ${line}`);
    },
    summary: () => `${run} phases:\n${lines.join("\n")}`,
  };
}
